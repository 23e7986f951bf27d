/* amp_train_run's memory estimate against what runs measure (the arena's and the scratch's peaks, the
 * parameters, their gradients and the optimizer state, as amp_train_result reports them), for the
 * built-in models in fp32, under 16-bit autocast, with 16-bit parameters and with recompute; the
 * refusal of a run that does not fit (before allocating, one line, nothing written); the parsing of
 * AMP_MEMORY_AVAILABLE. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

#include "../src/train/memory_check.h"

enum { SIDE = 28, N_IMAGES = 256, ERR_SIZE = 1024 };

/* MNIST-sized images, ten classes: image i is labelled i % 10 and its row (i % 10) is brighter. */
static int image_label(int i, void *user) {
    (void)user;
    return i % 10;
}

static int image_pixel(int i, int p, void *user) {
    (void)user;
    return (i * 37 + p * 11 + (p / SIDE == i % 10) * 90) % 256;
}

static bool write_images(const char *dir, const char *prefix, int n) {
    return CHECK_MSG(test_write_idx_images(dir, prefix, n, SIDE, image_label, image_pixel, NULL),
                     "cannot write %s/%s-*-ubyte", dir, prefix);
}

enum { GPT2_VOCAB = 50257, SHARD_TOKENS = 20000 };

/* A token shard as llm.c writes it (version 1), ids spread over GPT-2's vocabulary, with the
 * vocabulary's last id in it so that the vocabulary read from the data is GPT-2's. */
static bool write_shard(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!CHECK_MSG(f != NULL, "cannot write %s", path)) return false;
    const int32_t header[256] = {20240520, 1, SHARD_TOKENS};
    bool ok = fwrite(header, sizeof header, 1, f) == 1;
    for (uint32_t i = 0; i < SHARD_TOKENS && ok; i++) {
        const uint16_t id = (uint16_t)(i == 0 ? GPT2_VOCAB - 1 : (i * 2654435761u >> 7) % GPT2_VOCAB);
        ok = fwrite(&id, sizeof id, 1, f) == 1;
    }
    return CHECK_MSG(fclose(f) == 0 && ok, "cannot write %s", path);
}

/* A directory with an image set, text.txt (every byte value, so the byte vocabulary is full) and
 * tokens.bin (GPT-2's vocabulary). */
static bool make_data(char *dir, size_t size) {
    snprintf(dir, size, "/tmp/amp_test_memory_XXXXXX");
    if (!CHECK_MSG(mkdtemp(dir) != NULL, "mkdtemp failed")) return false;
    if (!write_images(dir, "train", N_IMAGES) || !write_images(dir, "t10k", 64)) return false;
    char path[1024];
    snprintf(path, sizeof path, "%s/text.txt", dir);
    FILE *f = fopen(path, "wb");
    if (!CHECK(f != NULL)) return false;
    for (int i = 0; i < 200000; i++) fputc((i * 7 + i / 256) % 256, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    return write_shard(path);
}

typedef struct mem_case {
    const char *name;
    amp_model_kind kind;
    amp_precision precision;
    bool param_bf16, recompute;
    int64_t layers, hidden, heads, context, batch;
    bool gpt2_vocab; /* tokens.bin (GPT-2's 50257 ids: the head and the tied gradient dominate), else bytes */
} mem_case;

/* The estimate for the configuration c as amp_train_run resolves it (vocabulary: the data's). */
static amp_train_memory_need estimate_of(const amp_train_config *c, int64_t num_params, int64_t vocab) {
    amp_precision_info prec = *amp_precision_get_info(c->precision);
    if (c->param_dtype_override == AMP_BF16) prec.param_dtype = AMP_BF16, prec.master_weights = true;
    amp_model_config m = c->model;
    m.param_dtype = prec.param_dtype;
    if (amp_model_is_text(m.kind)) m.vocab = vocab;
    else m.in_channels = 1, m.image_rows = SIDE, m.image_cols = SIDE, m.classes = 10;
    amp_train_memory_need need;
    amp_train_memory_estimate(&m, num_params, &prec, &c->optim, c->batch, c->threads, 1, 0, &need);
    return need;
}

/* The transformers' estimate follows what their ops keep (memory_check.c): less what the first step
 * leaves resident beyond the peaks (first_step), it is held to 0.95x-1.1x of the measured memory, its
 * arena part to 0.95x-1.05x of the arena's peak. The other models' estimate is fitted per sample and
 * per parameter: 0.8x-1.25x. */
void test_memory_estimate(void) {
    char dir[64], text[128], tokens[128];
    if (!make_data(dir, sizeof dir)) return;
    snprintf(text, sizeof text, "%s/text.txt", dir);
    snprintf(tokens, sizeof tokens, "%s/tokens.bin", dir);
    static const mem_case cases[] = {
        {"gpt2 fp32", AMP_MODEL_GPT2, AMP_PRECISION_FP32, false, false, 2, 128, 4, 128, 8, false},
        {"gpt2 amp-bf16 --recompute", AMP_MODEL_GPT2, AMP_PRECISION_AMP_BF16, false, true, 3, 128, 4, 128, 8, false},
        {"gpt2 amp-bf16 --param-dtype bf16", AMP_MODEL_GPT2, AMP_PRECISION_AMP_BF16, true, false, 2, 128, 4, 128, 8, false},
        {"gpt2 amp-fp16, 4 layers", AMP_MODEL_GPT2, AMP_PRECISION_AMP_FP16, false, false, 4, 96, 2, 128, 8, false},
        {"gpt amp-fp16", AMP_MODEL_GPT, AMP_PRECISION_AMP_FP16, false, false, 2, 128, 4, 128, 8, false},
        {"gpt fp32 --recompute", AMP_MODEL_GPT, AMP_PRECISION_FP32, false, true, 3, 128, 4, 128, 8, false},
        /* GPT-2's vocabulary: the logits and the tied head's gradient; the fp32 gradient of wte's rows
         * under autocast in memory of its own (few tokens) or in the logits' gradient's (more) */
        {"gpt2 50257 fp32", AMP_MODEL_GPT2, AMP_PRECISION_FP32, false, false, 2, 64, 2, 64, 4, true},
        {"gpt2 50257 amp-bf16, 128 tokens", AMP_MODEL_GPT2, AMP_PRECISION_AMP_BF16, false, false, 2, 128, 2, 32, 4, true},
        {"gpt2 50257 amp-bf16, 512 tokens", AMP_MODEL_GPT2, AMP_PRECISION_AMP_BF16, false, false, 2, 64, 2, 64, 8, true},
        {"gpt2 50257 --param-dtype bf16", AMP_MODEL_GPT2, AMP_PRECISION_AMP_BF16, true, false, 2, 64, 2, 64, 4, true},
        {"gpt2 50257 fp32 --recompute", AMP_MODEL_GPT2, AMP_PRECISION_FP32, false, true, 3, 64, 2, 64, 4, true},
        {"mlp fp32", AMP_MODEL_MLP, AMP_PRECISION_FP32, false, false, 0, 512, 0, 0, 128, false},
        {"mlp amp-bf16", AMP_MODEL_MLP, AMP_PRECISION_AMP_BF16, false, false, 0, 512, 0, 0, 128, false},
        {"cnn fp32", AMP_MODEL_CNN, AMP_PRECISION_FP32, false, false, 0, 256, 0, 0, 16, false},
        {"lstm amp-bf16", AMP_MODEL_LSTM, AMP_PRECISION_AMP_BF16, false, false, 0, 256, 0, 64, 16, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mem_case *k = &cases[i];
        amp_train_config c = amp_train_default_config(k->kind);
        c.data = !amp_model_is_text(k->kind) ? dir : k->gpt2_vocab ? tokens : text;
        c.precision = k->precision;
        c.param_dtype_override = k->param_bf16 ? AMP_BF16 : AMP_F32;
        c.model.recompute = k->recompute;
        c.model.hidden = k->hidden;
        if (k->layers) c.model.layers = k->layers, c.model.heads = k->heads;
        if (k->context) c.model.context = k->context;
        c.batch = k->batch;
        c.steps = 2;
        c.eval = false;
        c.threads = 2;
        amp_train_result r;
        char err[ERR_SIZE];
        const int st = amp_train_run(&c, NULL, &r, err, sizeof err);
        if (!CHECK_MSG(st == AMP_OK, "%s: %s", k->name, err)) continue;
        const amp_train_memory_need need = estimate_of(&c, r.num_params, k->gpt2_vocab ? GPT2_VOCAB : 256);
        const double measured = (double)r.arena_peak_bytes + (double)r.scratch_peak_bytes + 2.0 * (double)r.param_bytes +
                                (double)r.optimizer_state_bytes + (double)r.cast_copy_bytes;
        /* the cast copies: 2 bytes per parameter (each 64-byte aligned), where the estimate keeps them */
        CHECK_MSG(need.cast_copies <= (int64_t)r.cast_copy_bytes && (int64_t)r.cast_copy_bytes <= need.cast_copies + 64 * 64,
                  "%s: cast copies of %zu bytes, estimated %lld", k->name, r.cast_copy_bytes, (long long)need.cast_copies);
        const double ratio = (double)(need.total - need.first_step) / measured, M = 1048576.0;
        harness_note("%-34s measured %7.1f MiB (arena %.1f, scratch %.1f), estimate / measured %.3f (arena %.1f, "
                     "scratch %.1f)",
                     k->name, measured / M, (double)r.arena_peak_bytes / M, (double)r.scratch_peak_bytes / M, ratio,
                     (double)(need.casts + need.activations) / M, (double)need.scratch / M);
        const bool transformer = k->kind == AMP_MODEL_GPT || k->kind == AMP_MODEL_GPT2;
        const double lo = transformer ? 0.95 : 0.8, hi = transformer ? 1.1 : 1.25;
        CHECK_MSG(ratio >= lo && ratio <= hi, "%s: the estimate is %.3f x the measured %.0f bytes (%.2f to %.2f)",
                  k->name, ratio, measured, lo, hi);
        const double arena = (double)(need.casts + need.activations) / (double)r.arena_peak_bytes;
        if (transformer)
            CHECK_MSG(arena >= 0.95 && arena <= 1.05, "%s: the arena's estimate is %.3f x its peak (0.95 to 1.05)",
                      k->name, arena);
    }
    test_remove_tree(dir);
}

/* The estimate's parts follow the settings that the refusal names: each lowers the total. */
void test_memory_estimate_settings(void) {
    amp_model_config m = amp_model_default_config(AMP_MODEL_GPT2);
    CHECK(amp_model_gpt2_size("1558m", &m) == AMP_OK);
    m.vocab = 50257;
    const amp_optim_config adamw = amp_optim_default_config(AMP_OPTIM_ADAMW);
    const amp_precision_info *bf16 = amp_precision_get_info(AMP_PRECISION_AMP_BF16);
    amp_precision_info bf16_params = *bf16;
    bf16_params.param_dtype = AMP_BF16, bf16_params.master_weights = true;
    const int64_t n = 1557611200; /* GPT-2 1558M's parameters at 1024 positions and 50304 rows */
    amp_train_memory_need base, rec, half, zero, small;
    amp_train_memory_estimate(&m, n, bf16, &adamw, 64, 2, 1, 0, &base);
    /* fp32 parameters and gradients, two fp32 moments, the bf16 cast copies of every parameter (kept
     * beside them, written by the optimizer; the head reads wte's): no casts in the arena */
    const int64_t C = 1600, block_weights = 12 * C * C + 9 * C, head_weight = 50257 * C;
    CHECK_EQ_INT(base.params, 4 * n);
    CHECK_EQ_INT(base.grads, 4 * n);
    CHECK_EQ_INT(base.optimizer, 8 * n);
    CHECK_EQ_INT(base.cast_copies, 2 * n);
    CHECK_EQ_INT(base.casts, 0);
    CHECK(base.total == base.params + base.grads + base.optimizer + base.casts + base.cast_copies + base.activations +
                            base.scratch + base.first_step);
    /* without cast copies (an fp8 preset, ZeRO): bf16 casts of the weights the linears read, made each
     * step: each block's four weights and biases (12 C^2 + 9 C) and the head's rows of wte (V x C) */
    const amp_precision_info *fp8 = amp_precision_get_info(AMP_PRECISION_FP8_DELAYED);
    amp_train_memory_need cast;
    amp_train_memory_estimate(&m, n, fp8, &adamw, 64, 2, 1, 0, &cast);
    CHECK_EQ_INT(cast.casts, 2 * (48 * block_weights + head_weight));
    CHECK_EQ_INT(cast.cast_copies, 0);
    /* recompute: each block keeps its fp32 input (4 of the 36 bytes per token-channel it keeps
     * otherwise); the logits and their gradient stay; one block's weights are cast at a time (the
     * copies are of every parameter all the same) */
    m.recompute = true;
    amp_train_memory_estimate(&m, n, bf16, &adamw, 64, 2, 1, 0, &rec);
    CHECK_MSG(rec.activations * 4 < base.activations, "recompute keeps %lld of %lld bytes of activations",
              (long long)rec.activations, (long long)base.activations);
    CHECK_EQ_INT(rec.cast_copies, 2 * n);
    amp_train_memory_estimate(&m, n, fp8, &adamw, 64, 2, 1, 0, &rec);
    CHECK_EQ_INT(rec.casts, 2 * (block_weights + head_weight));
    m.recompute = false;
    amp_train_memory_estimate(&m, n, &bf16_params, &adamw, 64, 2, 1, 0, &half);
    CHECK_EQ_INT(half.params, 2 * n);
    CHECK_EQ_INT(half.optimizer, 12 * n); /* the masters join the moments */
    CHECK_EQ_INT(half.casts, 0);
    amp_train_memory_estimate(&m, n, bf16, &adamw, 64, 2, 4, 1, &zero);
    CHECK_EQ_INT(zero.optimizer, 2 * n);
    CHECK_EQ_INT(zero.cast_copies, 0); /* each rank updates a slice: no copies */
    CHECK_EQ_INT(zero.casts, 2 * (48 * block_weights + head_weight));
    CHECK_EQ_INT(half.cast_copies, 0);
    amp_train_memory_estimate(&m, n, bf16, &adamw, 8, 2, 1, 0, &small);
    CHECK(small.activations * 7 < base.activations);
}

/* One run of c with AMP_MEMORY_AVAILABLE=avail: its status, the message in err. */
static int run_with(amp_train_config *c, const char *avail, char *err, size_t size) {
    setenv("AMP_MEMORY_AVAILABLE", avail, 1);
    amp_train_result r;
    const int st = amp_train_run(c, NULL, &r, err, size);
    unsetenv("AMP_MEMORY_AVAILABLE");
    return st;
}

void test_memory_refusal(void) {
    char dir[64], text[128], ckpt[160];
    if (!make_data(dir, sizeof dir)) return;
    snprintf(text, sizeof text, "%s/text.txt", dir);
    snprintf(ckpt, sizeof ckpt, "%s/ck.safetensors", dir);
    /* GPT-2 1558M at batch 64 x 1024: hundreds of GiB; refused before its 6 GiB of parameters */
    amp_train_config c = amp_train_default_config(AMP_MODEL_GPT2);
    CHECK(amp_model_gpt2_size("1558m", &c.model) == AMP_OK);
    c.data = text;
    c.batch = 64;
    c.steps = 1;
    c.precision = AMP_PRECISION_AMP_BF16;
    c.checkpoint = ckpt;
    c.save_llmc = ckpt;
    char err[ERR_SIZE];
    const clock_t t0 = clock();
    int st = run_with(&c, "16G", err, sizeof err);
    const double seconds = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK_EQ_INT(st, AMP_ERR_OUT_OF_MEMORY);
    harness_note("%s", err);
    CHECK_MSG(seconds < 2.0, "the refusal took %.2f s of CPU time: it allocated before refusing?", seconds);
    static const char *const want[] = {"gpt2 1558m at batch 64 x context 1024", "needs about", "16.0 GiB is available",
                                       "--batch", "--accum", "--context", "--recompute", "--param-dtype bf16", "--zero 1",
                                       "AMP_MEMORY_CHECK=0"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_MSG(strstr(err, want[i]) != NULL, "the refusal lacks '%s': %s", want[i], err);
    CHECK_MSG(strchr(err, '\n') == NULL, "the refusal is not one line: %s", err);
    CHECK_MSG(access(ckpt, F_OK) != 0, "the refused run wrote %s", ckpt);
    /* the settings already in use are not offered again */
    c.model.recompute = true;
    c.param_dtype_override = AMP_BF16;
    st = run_with(&c, "16G", err, sizeof err);
    CHECK_EQ_INT(st, AMP_ERR_OUT_OF_MEMORY);
    CHECK_MSG(!strstr(err, "--recompute") && !strstr(err, "--param-dtype"), "offers what is in use: %s", err);
    /* a small run under a small limit: refused; skip_memory_check or AMP_MEMORY_CHECK=0 train it */
    amp_train_config s = amp_train_default_config(AMP_MODEL_GPT2);
    s.data = text;
    s.model.layers = 1, s.model.hidden = 32, s.model.heads = 2, s.model.context = 16;
    s.batch = 2, s.steps = 1, s.eval = false, s.threads = 1;
    CHECK_EQ_INT(run_with(&s, "64K", err, sizeof err), AMP_ERR_OUT_OF_MEMORY);
    CHECK_EQ_INT(run_with(&s, "1G", err, sizeof err), AMP_OK);
    s.skip_memory_check = true;
    CHECK_EQ_INT(run_with(&s, "64K", err, sizeof err), AMP_OK);
    s.skip_memory_check = false;
    setenv("AMP_MEMORY_CHECK", "0", 1);
    CHECK_EQ_INT(run_with(&s, "64K", err, sizeof err), AMP_OK);
    unsetenv("AMP_MEMORY_CHECK");
    test_remove_tree(dir);
}

void test_memory_available(void) {
    static const struct { const char *text; int64_t bytes; } cases[] = {
        {"0", 0}, {"123", 123}, {"4K", 4096}, {"1.5M", 1572864}, {"16G", (int64_t)16 << 30}, {"2GiB", (int64_t)2 << 30},
        {"1T", (int64_t)1 << 40}, {"12x", -1}, {"G", -1}, {"-5", -1}, {"3GB!", -1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("AMP_MEMORY_AVAILABLE", cases[i].text, 1);
        const int64_t got = amp_train_memory_available();
        CHECK_MSG(got == cases[i].bytes, "AMP_MEMORY_AVAILABLE=%s: %lld, expected %lld", cases[i].text, (long long)got,
                  (long long)cases[i].bytes);
    }
    unsetenv("AMP_MEMORY_AVAILABLE");
    const int64_t real = amp_train_memory_available();
    if (access("/proc/meminfo", R_OK) == 0) CHECK_MSG(real > 0, "MemAvailable read as %lld", (long long)real);
    harness_note("available here: %.1f GiB", (double)real / (1 << 30));
}
