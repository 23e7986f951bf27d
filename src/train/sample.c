/* What a text model's checkpoint carries for generation (its sizes and its vocabulary), and the
 * sample a gpt writes at each evaluation (amp/train.h: sample_tokens). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "amp/generate.h"
#include "amp/vocab.h"
#include "train_internal.h"
#include "../core/alloc_internal.h"

int amp_train_model_meta(const amp_train_run_state *r, char *sizes, size_t sizes_len, char **vocab,
                         const char **pattern) {
    const amp_model_config *m = &r->cfg.model;
    *vocab = NULL, *pattern = NULL;
    snprintf(sizes, sizes_len,
             "vocab=%" PRId64 ",context=%" PRId64 ",hidden=%" PRId64 ",layers=%" PRId64 ",heads=%" PRId64
             ",embed=%" PRId64 ",vocab_padded=%" PRId64 ",positions=%" PRId64,
             m->vocab, m->context, m->hidden, m->layers, m->heads, m->embed, m->vocab_padded, m->positions);
    const amp_text_corpus *c = &r->corpus;
    /* token shards without a rank file spell nothing: no vocabulary to keep */
    if (!r->text || !c->token_offset || c->vocab_size < 1 || c->token_offset[c->vocab_size] == 0) return AMP_OK;
    if (r->cfg.tokenizer) *pattern = r->cfg.tokenizer_pattern ? r->cfg.tokenizer_pattern : "cl100k";
    return amp_vocab_to_meta(c->token_offset, c->token_text, c->vocab_size, vocab);
}

int amp_train_sample(amp_train_run_state *r, char **text, size_t *bytes) {
    *text = NULL, *bytes = 0;
    const amp_train_config *c = &r->cfg;
    const int64_t n = c->sample_tokens;
    const bool cached = c->model.kind == AMP_MODEL_GPT || c->model.kind == AMP_MODEL_GPT2;
    if (n <= 0 || !r->text || !cached || r->corpus.heldout_len < 1 || !r->corpus.token_offset) return AMP_OK;
    const int64_t V = c->model.vocab;
    int32_t *seq = amp_malloc((size_t)(n + 1) * sizeof *seq);
    float *logits = amp_malloc((size_t)V * sizeof *logits);
    amp_generator *g = NULL;
    int st = !seq || !logits ? AMP_ERR_OUT_OF_MEMORY : amp_generator_create(r->model, r->prec->autocast_dtype, &g);
    const amp_sampling greedy = {.temperature = 0.0f};
    if (seq) seq[0] = r->corpus.heldout[0];
    if (st == AMP_OK) st = amp_generator_feed(g, seq, 1, logits);
    for (int64_t t = 1; t <= n && st == AMP_OK; t++) {
        seq[t] = amp_sample_token(logits, V, &greedy, NULL);
        if (t < n) st = amp_generator_append(g, seq, t + 1, logits);
    }
    amp_generator_free(g);
    amp_free(logits);
    if (st != AMP_OK) {
        amp_free(seq);
        return amp_train_fail(r, st, "sample at step %lld: %s", (long long)r->step + 1,
                              amp_ctx_status(r->ctx) != AMP_OK ? amp_ctx_error(r->ctx) : amp_status_str(st));
    }
    const int64_t len = amp_text_corpus_bytes(&r->corpus, seq, n + 1);
    char *out = amp_malloc((size_t)len + 1);
    if (!out) {
        amp_free(seq);
        return amp_train_fail(r, AMP_ERR_OUT_OF_MEMORY, "sample: out of memory");
    }
    size_t at = 0;
    for (int64_t t = 0; t <= n; t++) {
        const uint32_t a = r->corpus.token_offset[seq[t]], b = r->corpus.token_offset[seq[t] + 1];
        memcpy(out + at, r->corpus.token_text + a, b - a);
        at += b - a;
    }
    amp_free(seq);
    *text = out, *bytes = at;
    return amp_ctx_reset(r->ctx);
}
