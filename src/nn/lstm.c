/* lstm: a character LM written in PyTorch as
 *     embedding = nn.Embedding(V, E); lstm = nn.LSTM(E, H, batch_first=True); head = nn.Linear(H, V)
 * with E = 64, H = 256, unrolled over T = 64 steps from zero state: amp_lstm_cell per step (PyTorch's
 * gate order i, f, g, o, which nn.LSTM shares), so the parameters are nn.LSTM's
 * lstm.weight_ih_l0 [4H, E], lstm.weight_hh_l0 [4H, H], lstm.bias_ih_l0 [4H], lstm.bias_hh_l0 [4H]. */
#include "nn_internal.h"

/* The layers in declaration order. */
typedef struct lstm_layers {
    amp_embedding_layer embedding;
    amp_lstm_layer lstm;
    amp_linear_layer head;
} lstm_layers;

/* The shared default width is the image models' hidden layer; an LSTM of 256 over the shared
 * context of 64 (the unroll) is the contract's model. */
static void lstm_defaults(amp_model_config *c) { c->hidden = 256; }

static int lstm_validate(amp_ctx *ctx, const amp_model_config *c) {
    NN_NEED(ctx, c->embed > 0 && c->embed <= NN_SIZE_CAP, "lstm: embed %lld out of range", (long long)c->embed);
    return AMP_OK;
}

static int lstm_declare(amp_model *m) {
    const amp_model_config *c = &m->cfg;
    const int64_t V = c->vocab, E = c->embed, H = c->hidden;
    lstm_layers *L = m->layers = nn_layers_alloc(m, sizeof *L);
    if (!L) return AMP_ERR_OUT_OF_MEMORY;
    int st = amp_embedding_layer_declare(m->ctx, &L->embedding, "embedding", V, E, c->param_dtype);
    if (st == AMP_OK) st = amp_lstm_layer_declare(m->ctx, &L->lstm, "lstm", E, H, true, c->param_dtype);
    if (st == AMP_OK) st = amp_linear_layer_declare(m->ctx, &L->head, "head", H, V, true, c->param_dtype);
    return st;
}

/* nn.Embedding's N(0, 1), nn.LSTM's U(-1/sqrt(H), 1/sqrt(H)), nn.Linear's default. */
static int lstm_init(amp_model *m, amp_rng *rng) {
    lstm_layers *L = m->layers;
    int st = amp_embedding_layer_init(m->ctx, &L->embedding, rng);
    if (st == AMP_OK) st = amp_lstm_layer_init(m->ctx, &L->lstm, rng);
    if (st == AMP_OK) st = amp_linear_layer_init(m->ctx, &L->head, rng);
    return st;
}

/* tokens [B, T] -> logits [B*T, V]. The embedding and the T cell steps run as one node
 * (amp_lstm_sequence_tokens: the input projection of the V embedding rows once, looked up per token;
 * the weight gradients as one GEMM each), the values of amp_embedding then T amp_lstm_cell calls (its
 * twins in the tests) at a fraction of the GEMM calls, and without the B*T rows of input projection
 * and input gradient: the same product on the 256 rows of the embedding instead of 2048 tokens' rows
 * (the model's FLOPs per sample, lstm_flops, still count them, as PyTorch computes them). */
static amp_tensor *lstm_forward(amp_model *m, amp_ctx *ctx, amp_tensor *x, const int32_t *tokens, int64_t batch) {
    (void)x;
    const amp_model_config *c = &m->cfg;
    const int64_t B = batch, T = c->context, H = c->hidden;
    const lstm_layers *L = m->layers;
    amp_tensor *all = amp_lstm_layer_forward_tokens(ctx, &L->lstm, &L->embedding, tokens, B, T); /* [B, T, H] */
    all = all ? amp_reshape(ctx, all, 2, (const int64_t[]){B * T, H}) : NULL;
    return all ? amp_linear_layer_forward(ctx, &L->head, all) : NULL; /* [B*T, V] */
}

static double lstm_flops(const amp_model_config *c) {
    const double H = (double)c->hidden;
    const double per_token = 4.0 * H * ((double)c->embed + H) + H * (double)c->vocab;
    return 3.0 * 2.0 * per_token * (double)c->context;
}

/* What amp computes: the count above, with the embedding folded in (amp_lstm_sequence_tokens): the
 * per-token input projection [E -> 4H] and its two gradient products left out, three products of the
 * V embedding rows per batch (the table, dW_ih, dE) added, shared by its samples. */
static double lstm_flops_computed(const amp_model_config *c, int64_t batch) {
    const double input_projection = 3.0 * 2.0 * 4.0 * (double)c->hidden * (double)c->embed; /* per row */
    return lstm_flops(c) + input_projection * ((double)c->vocab / (double)(batch > 0 ? batch : 1) - (double)c->context);
}

const nn_model nn_model_lstm = {
    .name = "lstm",
    .task = NN_CHAR_LM,
    .defaults = lstm_defaults,
    .validate = lstm_validate,
    .declare = lstm_declare,
    .init = lstm_init,
    .forward = lstm_forward,
    .flops = lstm_flops,
    .flops_computed = lstm_flops_computed,
};
