"""The PyTorch twin of custom_model.c: the same model, data, initialization rules, training (fp16
autocast, the dynamic GradScaler, AdamW, gradient clipping) and checks. Not run by `make test`.

    python3 examples/custom_model.py
"""
import io
import sys

import torch
from torch import nn

PIXELS, CLASSES, TRAIN, TEST, BATCH, EPOCHS, NOISE = 64, 10, 4096, 1024, 64, 4, 160


def make_data():
    """custom_model.c's images, byte for byte: 8x8 class patterns, each pixel replaced by a random
    byte with probability NOISE/256, from a 64-bit LCG (Knuth's MMIX constants)."""
    state = 1

    def byte():
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
        return state >> 56

    protos = [[byte() for _ in range(PIXELS)] for _ in range(CLASSES)]
    images, labels = [], []
    for _ in range(TRAIN + TEST):
        labels.append(byte() % CLASSES)
        images.append([byte() if byte() < NOISE else protos[labels[-1]][p] for p in range(PIXELS)])
    return torch.tensor(images, dtype=torch.float32) / 255, torch.tensor(labels)


def make_model():
    return nn.Sequential(nn.Linear(PIXELS, 256), nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, CLASSES))


def evaluate(model, x, y):
    with torch.no_grad():
        logits = model(x)
        return nn.functional.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


x, y = make_data()
x = (x - x[:TRAIN].mean()) / x[:TRAIN].std()
x_train, y_train, x_test, y_test = x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]
torch.manual_seed(1)
model = make_model()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
scaler = torch.amp.GradScaler("cpu")
before = evaluate(model, x_test, y_test)
for epoch in range(EPOCHS):
    for idx in torch.randperm(TRAIN).split(BATCH):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
after = evaluate(model, x_test, y_test)
saved = io.BytesIO()
torch.save(model.state_dict(), saved)
saved.seek(0)
reloaded = make_model()
reloaded.load_state_dict(torch.load(saved))
again = evaluate(reloaded, x_test, y_test)
print(f"test loss {before[0]:.4f} -> {after[0]:.4f}, accuracy {before[1]:.4f} -> {after[1]:.4f}; reloaded: {again[1]:.4f}")
sys.exit(0 if after[1] > before[1] + 0.3 and again == after else 1)
