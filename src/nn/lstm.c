/* lstm: a character LM written in PyTorch as
 *     embedding = nn.Embedding(V, E); lstm = nn.LSTM(E, H, batch_first=True); head = nn.Linear(H, V)
 * with E = 64, H = 256, unrolled over T = 64 steps from zero state: amp_lstm_cell per step (PyTorch's
 * gate order i, f, g, o, which nn.LSTM shares), so the parameters are nn.LSTM's
 * lstm.weight_ih_l0 [4H, E], lstm.weight_hh_l0 [4H, H], lstm.bias_ih_l0 [4H], lstm.bias_hh_l0 [4H]. */
#include "../tensor/ctx_internal.h"
#include "nn_internal.h"

enum { LSTM_EMB, LSTM_W_IH, LSTM_W_HH, LSTM_B_IH, LSTM_B_HH, LSTM_HEAD_W, LSTM_HEAD_B };

int nn_lstm_declare(amp_model *m) {
    const amp_model_config *c = &m->cfg;
    const int64_t V = c->vocab, E = c->embed, H = c->hidden;
    const nn_init cell = nn_fan_in_uniform(H), head = nn_fan_in_uniform(H); /* nn.LSTM: U(-1/sqrt(H), 1/sqrt(H)) */
    if (!nn_param(m, (nn_init){NN_INIT_NORMAL, 1.0f}, 2, (const int64_t[]){V, E}, "embedding.weight") ||
        !nn_param(m, cell, 2, (const int64_t[]){4 * H, E}, "lstm.weight_ih_l0") ||
        !nn_param(m, cell, 2, (const int64_t[]){4 * H, H}, "lstm.weight_hh_l0") ||
        !nn_param(m, cell, 1, (const int64_t[]){4 * H}, "lstm.bias_ih_l0") ||
        !nn_param(m, cell, 1, (const int64_t[]){4 * H}, "lstm.bias_hh_l0") ||
        !nn_param(m, head, 2, (const int64_t[]){V, H}, "head.weight") ||
        !nn_param(m, head, 1, (const int64_t[]){V}, "head.bias"))
        return amp_ctx_status(m->ctx);
    return AMP_OK;
}

/* tokens [B, T] -> logits [B*T, V] */
amp_tensor *nn_lstm_forward(amp_model *m, amp_ctx *ctx, const int32_t *tokens, int64_t batch) {
    const amp_model_config *c = &m->cfg;
    const int64_t B = batch, T = c->context, H = c->hidden;
    int32_t *ids = amp_ctx_alloc(ctx, (size_t)B * sizeof *ids);
    amp_tensor **hs = amp_ctx_alloc(ctx, (size_t)T * sizeof *hs);
    amp_tensor *h = amp_tensor_zeros(ctx, c->param_dtype, 2, (const int64_t[]){B, H});
    amp_tensor *cell = amp_tensor_zeros(ctx, c->param_dtype, 2, (const int64_t[]){B, H});
    if (!ids || !hs || !h || !cell) return NULL;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t b = 0; b < B; b++) ids[b] = tokens[b * T + t];
        amp_tensor *x = amp_embedding(ctx, nn_p(m, LSTM_EMB), ids, 1, (const int64_t[]){B}); /* [B, E] */
        amp_tensor *h_next = NULL, *c_next = NULL;
        if (amp_lstm_cell(ctx, x, h, cell, nn_p(m, LSTM_W_IH), nn_p(m, LSTM_W_HH), nn_p(m, LSTM_B_IH),
                          nn_p(m, LSTM_B_HH), &h_next, &c_next) != AMP_OK)
            return NULL;
        h = h_next, cell = c_next;
        if (!(hs[t] = amp_reshape(ctx, h, 3, (const int64_t[]){B, 1, H}))) return NULL;
    }
    amp_tensor *all = nn_concat_many(ctx, hs, (int)T, 1);                   /* [B, T, H] */
    all = amp_reshape(ctx, all, 2, (const int64_t[]){B * T, H});
    return amp_linear(ctx, all, nn_p(m, LSTM_HEAD_W), nn_p(m, LSTM_HEAD_B)); /* [B*T, V] */
}

double nn_lstm_flops(const amp_model_config *c) {
    const double H = (double)c->hidden;
    const double per_token = 4.0 * H * ((double)c->embed + H) + H * (double)c->vocab;
    return 3.0 * 2.0 * per_token * (double)c->context;
}
