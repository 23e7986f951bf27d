/* Generation with a key/value cache (amp/generate.h) against the model's own forward pass: the
 * logits of every position, fed as a prompt, token by token or in chunks, equal the rows of
 * amp_model_forward (grad off, the same autocast dtype) on the sequence; greedy generation picks the
 * argmax of the full forward at every step; sampling is deterministic for a seed, top-k 1 is greedy,
 * and draws follow softmax(logits / T) over the top k. Models: the gpt at small random sizes (seeded
 * by harness_seed) with nanoGPT's initialization, weights scaled up so the logits spread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "harness.h"
#include "test_util.h"
#include "tests.h"
#include "amp.h"

typedef struct gen_fixture {
    amp_ctx *ctx;
    amp_model *m;
    amp_model_config cfg;
} gen_fixture;

/* A gpt (or a gpt2 with `positions` position rows, 0: context) of the given sizes, initialized from
 * seed, its weights multiplied by 20 (the 0.02 init makes every logit ~0: ties and near-uniform rows
 * would test little). */
static bool make_model(gen_fixture *f, amp_model_kind kind, int64_t vocab, int64_t context, int64_t hidden,
                       int64_t layers, int64_t heads, int64_t positions, uint64_t seed) {
    memset(f, 0, sizeof *f);
    amp_ctx_config cc = amp_ctx_default_config();
    if (!CHECK(amp_ctx_create(&cc, &f->ctx) == AMP_OK)) return false;
    f->cfg = amp_model_default_config(kind);
    f->cfg.vocab = vocab, f->cfg.context = context, f->cfg.hidden = hidden, f->cfg.layers = layers;
    f->cfg.heads = heads;
    if (kind == AMP_MODEL_GPT2) f->cfg.positions = positions;
    if (!CHECK(amp_model_create(f->ctx, &f->cfg, &f->m) == AMP_OK)) return false;
    if (!CHECK(amp_ctx_alloc_params(f->ctx) == AMP_OK) || !CHECK(amp_model_init(f->m, seed) == AMP_OK)) return false;
    for (size_t i = 0; i < amp_model_num_tensors(f->m); i++) {
        amp_tensor *p = amp_model_tensor(f->m, i);
        float *d = p->data;
        const bool norm = strstr(p->name, "ln_") != NULL;
        for (int64_t j = 0; j < amp_tensor_numel(p); j++) d[j] = norm ? d[j] : d[j] * 20.0f;
    }
    return true;
}

static bool make_gpt(gen_fixture *f, int64_t vocab, int64_t context, int64_t hidden, int64_t layers, int64_t heads,
                     uint64_t seed) {
    return make_model(f, AMP_MODEL_GPT, vocab, context, hidden, layers, heads, 0, seed);
}

static void free_fixture(gen_fixture *f) {
    amp_ctx_free(f->ctx);
    amp_model_free(f->m);
}

/* amp_model_forward's logits [batch*context, V] (fp32) of tokens [batch, context], grad off, under
 * autocast to dt (none for f32). */
static bool full_forward(gen_fixture *f, amp_dtype dt, const int32_t *tokens, int64_t batch, float *logits) {
    amp_ctx_reset(f->ctx);
    const bool prev = amp_set_grad_enabled(f->ctx, false);
    if (dt != AMP_F32) amp_autocast_enter(dt);
    amp_tensor *out = amp_model_forward(f->m, f->ctx, NULL, tokens, batch, false);
    if (dt != AMP_F32) amp_autocast_exit();
    amp_set_grad_enabled(f->ctx, prev);
    const bool ok = CHECK_MSG(out != NULL, "forward: %s", amp_ctx_error(f->ctx)) &&
                    CHECK(amp_tensor_read(out, logits, AMP_F32) == AMP_OK);
    amp_ctx_reset(f->ctx);
    return ok;
}

static const char *dt_name(amp_dtype dt) { return dt == AMP_F32 ? "fp32" : dt == AMP_BF16 ? "bf16" : "fp16"; }

/* Largest |a - b| over n values, and whether all bits agree. */
static double max_diff(const float *a, const float *b, int64_t n, bool *same_bits) {
    double d = 0;
    *same_bits = memcmp(a, b, (size_t)n * sizeof *a) == 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* Cached logits of every position, fed three ways (a prefill of `split` tokens then one at a time;
 * one prefill of everything; chunks of 5), against row t of the full forward (batch row `row` of a
 * batch of 2, the other row different tokens). */
static void check_positions(gen_fixture *f, amp_dtype dt, uint64_t seed) {
    const int64_t T = f->cfg.context, V = f->cfg.vocab;
    int32_t *tokens = malloc((size_t)(2 * T) * sizeof *tokens);
    float *want = malloc((size_t)(2 * T * V) * sizeof *want), *got = malloc((size_t)(T * V) * sizeof *got);
    amp_rng rng;
    amp_rng_seed(&rng, seed);
    for (int64_t i = 0; i < 2 * T; i++) tokens[i] = (int32_t)(amp_rng_next(&rng) % (uint64_t)V);
    amp_generator *g = NULL;
    if (!full_forward(f, dt, tokens, 2, want) || !CHECK(amp_generator_create(f->m, dt, &g) == AMP_OK)) goto done;
    for (int way = 0; way < 3; way++) {
        for (int64_t row = 0; row < 2; row++) {
            const int32_t *seq = tokens + row * T;
            amp_generator_reset(g);
            const int64_t split = way == 0 ? 1 + (int64_t)(amp_rng_next(&rng) % (uint64_t)(T - 1)) : T;
            const int64_t chunk = way == 2 ? 5 : split;
            for (int64_t at = 0; at < T;) {
                const int64_t n = at < split ? (chunk < split - at ? chunk : split - at) : 1;
                const int st = n > 1 ? amp_generator_feed_all(g, seq + at, n, got + at * V)
                                     : amp_generator_feed(g, seq + at, 1, got + at * V);
                if (!CHECK_MSG(st == AMP_OK, "feed: %s", amp_ctx_error(f->ctx))) goto done;
                at += n;
            }
            CHECK_EQ_INT(amp_generator_position(g), T);
            bool same;
            const double d = max_diff(got, want + row * T * V, T * V, &same);
            /* The same ops on the same values in the same order: the bits of the full forward. */
            CHECK_MSG(same, "%s way %d row %lld: cached logits differ from the forward's by up to %g", dt_name(dt),
                      way, (long long)row, d);
        }
    }
done:
    amp_generator_free(g);
    free(tokens);
    free(want);
    free(got);
}

void test_generate_matches_forward(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    /* context 64 > the attention op's 48-row causal blocks; a 1-layer model with one head too */
    const int64_t shapes[][5] = {{13, 64, 32, 2, 2}, {7, 9, 16, 1, 1}, {29, 20, 24, 2, 3}};
    const amp_dtype dts[] = {AMP_F32, AMP_BF16, AMP_F16};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        gen_fixture f;
        if (make_gpt(&f, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4], seed + s))
            for (size_t d = 0; d < 3; d++) check_positions(&f, dts[d], seed ^ (0x9e37u * (s * 3 + d + 1)));
        free_fixture(&f);
    }
    /* gpt2: GELU's tanh form and the head tied to a padded wte; 40 position rows for a context of 24:
     * the forward's positions match, and the generator's window is all 40 */
    gen_fixture f;
    if (make_model(&f, AMP_MODEL_GPT2, 19, 24, 16, 2, 2, 40, seed + 9)) {
        for (size_t d = 0; d < 3; d++) check_positions(&f, dts[d], seed ^ (0x51u * (d + 1)));
        amp_generator *g = NULL;
        int32_t ids[40] = {0};
        float logits[19];
        if (CHECK(amp_generator_create(f.m, AMP_F32, &g) == AMP_OK)) {
            CHECK_EQ_INT(amp_generator_context(g), 40);
            CHECK(amp_generator_feed(g, ids, 40, logits) == AMP_OK);
            CHECK(amp_generator_feed(g, ids, 1, logits) == AMP_ERR_INVALID_ARGUMENT);
        }
        amp_generator_free(g);
    }
    free_fixture(&f);
}

/* Greedy generation from a prompt: each token is the argmax of the full forward's row before it. */
static void check_greedy(gen_fixture *f, amp_dtype dt, uint64_t seed) {
    const int64_t T = f->cfg.context, V = f->cfg.vocab, prompt = 3;
    int32_t *seq = calloc((size_t)T, sizeof *seq), *arg = malloc((size_t)T * sizeof *arg);
    float *logits = malloc((size_t)V * sizeof *logits), *full = malloc((size_t)(T * V) * sizeof *full);
    amp_generator *g = NULL;
    amp_rng rng;
    amp_rng_seed(&rng, seed);
    for (int64_t i = 0; i < prompt; i++) seq[i] = (int32_t)(amp_rng_next(&rng) % (uint64_t)V);
    const amp_sampling greedy = {.temperature = 0.0f, .top_k = 0};
    if (!CHECK(amp_generator_create(f->m, dt, &g) == AMP_OK) || !CHECK(amp_generator_feed(g, seq, prompt, logits) == AMP_OK))
        goto done;
    for (int64_t t = prompt; t < T; t++) {
        seq[t] = amp_sample_token(logits, V, &greedy, NULL);
        if (t + 1 < T && !CHECK(amp_generator_append(g, seq, t + 1, logits) == AMP_OK)) goto done;
    }
    if (!full_forward(f, dt, seq, 1, full)) goto done;
    amp_tensor *lt = NULL;
    amp_ctx_reset(f->ctx);
    lt = amp_tensor_from(f->ctx, AMP_F32, 2, (const int64_t[]){T, V}, full, AMP_F32);
    CHECK(amp_argmax_rows(lt, arg) == AMP_OK);
    int bad = 0;
    for (int64_t t = prompt; t < T; t++) bad += seq[t] != arg[t - 1];
    CHECK_MSG(bad == 0, "%s: %d greedy tokens differ from the full forward's argmax", dt_name(dt), bad);
done:
    amp_ctx_reset(f->ctx);
    amp_generator_free(g);
    free(seq), free(arg), free(logits), free(full);
}

/* n tokens after a 2-token prompt with settings s and a generator seeded with seed. */
static bool generate(gen_fixture *f, const amp_sampling *s, uint64_t seed, int32_t *out, int64_t n) {
    const int64_t V = f->cfg.vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    amp_generator *g = NULL;
    amp_rng rng;
    amp_rng_seed(&rng, seed);
    out[0] = 1, out[1] = 2;
    bool ok = CHECK(amp_generator_create(f->m, AMP_F32, &g) == AMP_OK) && CHECK(amp_generator_feed(g, out, 2, logits) == AMP_OK);
    for (int64_t t = 2; t < n && ok; t++) {
        out[t] = amp_sample_token(logits, V, s, &rng);
        ok = CHECK(out[t] >= 0 && out[t] < V) && (t + 1 == n || CHECK(amp_generator_append(g, out, t + 1, logits) == AMP_OK));
    }
    amp_generator_free(g);
    free(logits);
    return ok;
}

void test_generate_greedy_and_seeds(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    gen_fixture f;
    if (make_gpt(&f, 17, 24, 16, 2, 2, seed)) {
        check_greedy(&f, AMP_F32, seed);
        check_greedy(&f, AMP_BF16, seed + 1);
        check_greedy(&f, AMP_F16, seed + 2);
        /* past the context (60 tokens, context 24): the window slides; same seed, same tokens */
        enum { N = 60 };
        int32_t a[N], b[N], c[N], greedy[N], top1[N];
        const amp_sampling warm = {.temperature = 1.5f, .top_k = 8};
        if (generate(&f, &warm, seed, a, N) && generate(&f, &warm, seed, b, N) && generate(&f, &warm, seed + 1, c, N)) {
            CHECK(memcmp(a, b, sizeof a) == 0);
            CHECK_MSG(memcmp(a, c, sizeof a) != 0, "seeds %llu and %llu drew the same 58 tokens",
                      (unsigned long long)seed, (unsigned long long)seed + 1);
        }
        const amp_sampling g0 = {.temperature = 0.0f}, k1 = {.temperature = 1.0f, .top_k = 1};
        if (generate(&f, &g0, seed, greedy, N) && generate(&f, &k1, seed + 7, top1, N))
            CHECK(memcmp(greedy, top1, sizeof greedy) == 0);
        /* the slide: after a full cache, append equals a fresh feed of the last context/2 tokens */
        amp_generator *g = NULL, *h = NULL;
        float la[17], lb[17];
        if (CHECK(amp_generator_create(f.m, AMP_F32, &g) == AMP_OK) && CHECK(amp_generator_create(f.m, AMP_F32, &h) == AMP_OK) &&
            CHECK(amp_generator_feed(g, a, 24, la) == AMP_OK)) {
            CHECK(amp_generator_feed(g, a + 24, 1, la) == AMP_ERR_INVALID_ARGUMENT); /* feed does not slide */
            CHECK(amp_generator_append(g, a, 25, la) == AMP_OK);
            CHECK_EQ_INT(amp_generator_position(g), 12);
            CHECK(amp_generator_feed(h, a + 13, 12, lb) == AMP_OK);
            CHECK(memcmp(la, lb, sizeof la) == 0);
            CHECK(amp_generator_recompute(g, a, 40, la) == AMP_OK && amp_generator_position(g) == 24);
            amp_generator_reset(h);
            CHECK(amp_generator_feed(h, a + 16, 24, lb) == AMP_OK && memcmp(la, lb, sizeof la) == 0);
        }
        amp_generator_free(g);
        amp_generator_free(h);
    }
    free_fixture(&f);
}

/* The sampler alone: greedy ties, NaN, top-k's support, the distribution of draws, errors. */
void test_generate_sampler(void) {
    const uint64_t seed = harness_seed();
    harness_note("seed %llu", (unsigned long long)seed);
    amp_rng rng;
    amp_rng_seed(&rng, seed);
    const amp_sampling greedy = {0};
    const float ties[5] = {1, 3, 2, 3, -1};
    CHECK_EQ_INT(amp_sample_token(ties, 5, &greedy, NULL), 1);
    const float nan_first[3] = {NAN, 0.5f, 0.5f};
    CHECK_EQ_INT(amp_sample_token(nan_first, 3, &greedy, NULL), 1);
    const float all_nan[2] = {NAN, NAN};
    CHECK_EQ_INT(amp_sample_token(all_nan, 2, &(amp_sampling){.temperature = 1}, &rng), 0);
    /* draws from logits log(1..4) at T = 1 follow p = (1, 2, 3, 4) / 10; top-k 2 keeps ids 3 and 2 */
    const float lg[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)};
    enum { DRAWS = 40000 };
    long count[4] = {0}, count_k[4] = {0}, count_t[4] = {0};
    for (int i = 0; i < DRAWS; i++) {
        count[amp_sample_token(lg, 4, &(amp_sampling){.temperature = 1.0f}, &rng)]++;
        count_k[amp_sample_token(lg, 4, &(amp_sampling){.temperature = 1.0f, .top_k = 2}, &rng)]++;
        count_t[amp_sample_token(lg, 4, &(amp_sampling){.temperature = 0.5f}, &rng)]++; /* p ~ i^2: 1,4,9,16 /30 */
    }
    for (int i = 0; i < 4; i++) {
        const double p = (i + 1) / 10.0, pk = i < 2 ? 0 : (i + 1) / 7.0, pt = (double)((i + 1) * (i + 1)) / 30.0;
        /* 5 standard deviations of a binomial count */
        CHECK_MSG(fabs((double)count[i] - DRAWS * p) <= 5 * sqrt(DRAWS * p * (1 - p)), "id %d: %ld draws of %d, p %.2f", i,
                  count[i], DRAWS, p);
        CHECK_MSG(fabs((double)count_k[i] - DRAWS * pk) <= 5 * sqrt(DRAWS * pk * (1 - pk)) + (pk == 0 ? 0 : 1),
                  "top-2 id %d: %ld draws, p %.3f", i, count_k[i], pk);
        CHECK_MSG(fabs((double)count_t[i] - DRAWS * pt) <= 5 * sqrt(DRAWS * pt * (1 - pt)), "T 0.5 id %d: %ld draws, p %.3f",
                  i, count_t[i], pt);
    }
    /* a large top-k (a sort instead of the insertion list): with many ties, every draw is among the
     * k first by (logit descending, id ascending), and draws reach beyond the 64 largest */
    enum { NV = 300, K = 150 };
    float big[NV];
    bool in_top[NV] = {false}, in_64[NV] = {false};
    for (int i = 0; i < NV; i++) big[i] = (float)(amp_rng_next(&rng) % 97) * 0.01f;
    for (int r = 0; r < K; r++) { /* selection: the r-th by rank */
        int b = -1;
        for (int i = 0; i < NV; i++)
            if (!in_top[i] && (b < 0 || big[i] > big[b])) b = i; /* the first (lowest id) on ties */
        in_top[b] = true;
        in_64[b] = r < 64;
    }
    int outside = 0, deep = 0;
    for (int i = 0; i < 3000; i++) {
        const int32_t id = amp_sample_token(big, NV, &(amp_sampling){.temperature = 1.0f, .top_k = K}, &rng);
        outside += id < 0 || !in_top[id];
        deep += id >= 0 && in_top[id] && !in_64[id];
    }
    CHECK_MSG(outside == 0, "%d draws outside the top %d", outside, K);
    CHECK_MSG(deep > 0, "no draw beyond the 64 first");
    CHECK_EQ_INT(amp_sample_token(NULL, 4, &greedy, NULL), -1);
    CHECK_EQ_INT(amp_sample_token(lg, 0, &greedy, NULL), -1);
    CHECK_EQ_INT(amp_sample_token(lg, 4, &(amp_sampling){.temperature = -1}, &rng), -1);
    CHECK_EQ_INT(amp_sample_token(lg, 4, &(amp_sampling){.temperature = NAN}, &rng), -1);
    CHECK_EQ_INT(amp_sample_token(lg, 4, &(amp_sampling){.temperature = 1, .top_k = -1}, &rng), -1);
    CHECK_EQ_INT(amp_sample_token(lg, 4, &(amp_sampling){.temperature = 1}, NULL), -1);
}

/* Models without a cache are refused with a message; bad tokens and a full context too. */
void test_generate_errors(void) {
    amp_ctx_config cc = amp_ctx_default_config();
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    amp_generator *g = (amp_generator *)&cc; /* must come back NULL */
    amp_model_config c = amp_model_default_config(AMP_MODEL_LSTM);
    c.vocab = 5, c.embed = 4, c.hidden = 4, c.context = 3;
    if (CHECK(amp_ctx_create(&cc, &ctx) == AMP_OK) && CHECK(amp_model_create(ctx, &c, &m) == AMP_OK) &&
        CHECK(amp_ctx_alloc_params(ctx) == AMP_OK)) {
        CHECK(amp_generator_create(m, AMP_F32, &g) == AMP_ERR_INVALID_ARGUMENT);
        CHECK(g == NULL);
        CHECK_MSG(strstr(amp_ctx_error(ctx), "lstm") != NULL, "message: %s", amp_ctx_error(ctx));
    }
    amp_ctx_free(ctx);
    amp_model_free(m);
    CHECK(amp_generator_create(NULL, AMP_F32, &g) == AMP_ERR_NULL_POINTER);

    gen_fixture f;
    if (make_gpt(&f, 5, 4, 8, 1, 2, 1)) {
        CHECK(amp_generator_create(f.m, AMP_F8E4M3, &g) == AMP_ERR_UNSUPPORTED_DTYPE);
        if (CHECK(amp_generator_create(f.m, AMP_F32, &g) == AMP_OK)) {
            const int32_t bad[2] = {1, 5}, ok[5] = {0, 1, 2, 3, 4};
            CHECK(amp_generator_feed(g, bad, 2, NULL) == AMP_ERR_INVALID_ARGUMENT);
            CHECK(amp_generator_position(g) == 0);
            CHECK(amp_generator_feed(g, ok, 5, NULL) == AMP_ERR_INVALID_ARGUMENT); /* 5 > context 4 */
            CHECK(amp_generator_feed(g, ok, 0, NULL) == AMP_ERR_INVALID_ARGUMENT);
            CHECK(amp_generator_feed(g, ok, 4, NULL) == AMP_OK && amp_generator_position(g) == 4);
            CHECK(amp_generator_append(g, ok, 0, NULL) == AMP_ERR_INVALID_ARGUMENT);
            amp_generator_free(g);
        }
    }
    free_fixture(&f);
}

/* amp/vocab.h: the metadata value round-trips any bytes (commas and NUL included), hostile values are
 * refused, greedy longest match picks the longest token, and on a corpus's own table it gives the
 * corpus's tokens (a byte vocabulary: the same ids as amp_text_corpus_load's). */
void test_generate_vocab(void) {
    const uint8_t t0[] = {0x00, ','}, t1[] = {0xff}, t2[] = {'a', 'b'}, t3[] = {'a'}, t4[] = {'a', 'b', 'c'};
    const uint8_t *tok[6] = {t0, t1, t2, t3, NULL, t4};
    const size_t lens[6] = {2, 1, 2, 1, 0, 3};
    amp_vocab v, w;
    char *meta = NULL;
    if (!CHECK(amp_vocab_from_tokens(tok, lens, 6, &v) == AMP_OK)) return;
    CHECK_EQ_INT(v.size, 6);
    if (CHECK(amp_vocab_to_meta(v.offset, v.text, v.size, &meta) == AMP_OK)) {
        CHECK_STR_EQ(meta, "002c,ff,6162,61,,616263");
        if (CHECK(amp_vocab_from_meta(meta, &w, NULL, 0) == AMP_OK)) {
            CHECK(w.size == 6 && memcmp(w.offset, v.offset, 7 * sizeof *w.offset) == 0 &&
                  memcmp(w.text, v.text, v.offset[6]) == 0);
            amp_vocab_free(&w);
        }
        amp_vocab_meta_free(meta);
    }
    /* greedy longest match: "abcab" + "a" + 0xff; the empty token never matches */
    int32_t ids[16];
    CHECK_EQ_INT(amp_vocab_encode(&v, "abcaba\xff", 7, ids, 16), 4);
    CHECK(ids[0] == 5 && ids[1] == 2 && ids[2] == 3 && ids[3] == 1);
    CHECK_EQ_INT(amp_vocab_encode(&v, "abz", 3, ids, 16), -1); /* no token for 'z' */
    CHECK_EQ_INT(amp_vocab_encode(&v, "aaa", 3, ids, 2), -1);   /* cap */
    size_t len = 9;
    CHECK(amp_vocab_token(&v, 6, &len) == NULL && len == 0);
    CHECK(amp_vocab_token(&v, 5, &len) != NULL && len == 3);
    amp_vocab_free(&v);
    char msg[160];
    CHECK_EQ_INT(amp_vocab_from_meta("61,6g", &w, msg, sizeof msg), AMP_ERR_FORMAT);
    CHECK_EQ_INT(amp_vocab_from_meta("61,616", &w, msg, sizeof msg), AMP_ERR_FORMAT);
    CHECK_MSG(strstr(msg, "odd") != NULL, "message: %s", msg);
    CHECK_EQ_INT(amp_vocab_from_meta("61 62", &w, msg, sizeof msg), AMP_ERR_FORMAT);
    CHECK(w.size == 0 && w.offset == NULL);
    CHECK_EQ_INT(amp_vocab_to_meta(v.offset, NULL, 0, &meta), AMP_ERR_NULL_POINTER);

    /* against the corpus loader: the byte table of a text spells it back with the corpus's ids */
    char dir[64], path[160], err[256];
    snprintf(dir, sizeof dir, "/tmp/amp_vocab_XXXXXX");
    if (!CHECK(mkdtemp(dir) != NULL)) return;
    snprintf(path, sizeof path, "%s/t.txt", dir);
    const char *text = "The cat sat on the mat, and the dog sat too.\n";
    const size_t n = strlen(text);
    amp_text_corpus c;
    if (CHECK(test_write_file(path, text, n, false)) &&
        CHECK(amp_text_corpus_load(path, 0.0, NULL, &c, err, sizeof err) == AMP_OK)) {
        if (CHECK(amp_vocab_to_meta(c.token_offset, c.token_text, c.vocab_size, &meta) == AMP_OK) &&
            CHECK(amp_vocab_from_meta(meta, &w, NULL, 0) == AMP_OK)) {
            CHECK_EQ_INT(amp_vocab_encode(&w, text, n, ids, 0) , -1);
            int32_t all[64];
            CHECK_EQ_INT(amp_vocab_encode(&w, text, n, all, 64), (int64_t)c.train_len);
            CHECK(memcmp(all, c.train, (size_t)c.train_len * sizeof *all) == 0);
            amp_vocab_free(&w);
        }
        amp_vocab_meta_free(meta);
        amp_text_corpus_free(&c);
    }
    remove(path);
    rmdir(dir);
}

/* ---- refused allocations: every heap allocation of the generator and the vocabulary codec refused in
 * turn gives AMP_ERR_OUT_OF_MEMORY (or -1 from the sampler) and leaks nothing ---- */

typedef struct counting_heap {
    long calls, fail_at, live;
    bool refused;
} counting_heap;

static counting_heap g_count;

static void *c_malloc(size_t size, void *user) {
    (void)user;
    if (g_count.calls++ == g_count.fail_at) return g_count.refused = true, NULL;
    void *p = malloc(size);
    g_count.live += p != NULL;
    return p;
}

static void *c_realloc(void *ptr, size_t size, void *user) {
    (void)user;
    if (g_count.calls++ == g_count.fail_at) return g_count.refused = true, NULL;
    void *p = realloc(ptr, size);
    g_count.live += p && !ptr;
    return p;
}

static void *c_aligned(size_t align, size_t size, void *user) {
    (void)user;
    void *p = NULL;
    if (g_count.calls++ == g_count.fail_at) return g_count.refused = true, NULL;
    if (posix_memalign(&p, align, size) != 0) return NULL;
    g_count.live++;
    return p;
}

static void c_free(void *ptr, void *user) {
    (void)user;
    g_count.live -= ptr != NULL;
    free(ptr);
}

/* One run of everything that allocates: a generator's whole life, the vocabulary both ways, a
 * top-k draw through the sort. AMP_OK, or the first failure (-1 from the sampler counts as one). */
static int alloc_scenario(gen_fixture *f) {
    amp_generator *g = NULL;
    float logits[300];
    const int32_t seq[3] = {1, 2, 3};
    int st = amp_generator_create(f->m, AMP_BF16, &g);
    if (st == AMP_OK) st = amp_generator_feed(g, seq, 2, logits);
    if (st == AMP_OK) st = amp_generator_append(g, seq, 3, logits);
    amp_generator_free(g);
    char *meta = NULL;
    amp_vocab v = {0};
    const uint32_t off[4] = {0, 1, 3, 4};
    if (st == AMP_OK) st = amp_vocab_to_meta(off, "abcd", 3, &meta);
    if (st == AMP_OK) st = amp_vocab_from_meta(meta, &v, NULL, 0);
    amp_vocab_meta_free(meta);
    amp_vocab_free(&v);
    for (int i = 0; i < 300; i++) logits[i] = (float)(i % 17);
    amp_rng rng;
    amp_rng_seed(&rng, 1);
    if (st == AMP_OK && amp_sample_token(logits, 300, &(amp_sampling){.temperature = 1, .top_k = 100}, &rng) < 0)
        st = AMP_ERR_OUT_OF_MEMORY;
    return st;
}

void test_generate_alloc_fail(void) {
    gen_fixture f;
    if (make_gpt(&f, 13, 8, 16, 1, 2, 3) && CHECK(alloc_scenario(&f) == AMP_OK)) { /* the warm-up */
        const amp_heap_allocator heap = {c_malloc, c_realloc, c_aligned, c_free, NULL};
        long k = 0;
        for (; k < 1000; k++) {
            g_count = (counting_heap){.fail_at = k};
            amp_set_allocator(&heap);
            const int st = alloc_scenario(&f);
            amp_set_allocator(NULL);
            CHECK_MSG(g_count.live == 0, "allocation %ld refused: %ld blocks leaked", k, g_count.live);
            if (!g_count.refused) {
                CHECK_EQ_INT(st, AMP_OK);
                break;
            }
            CHECK_MSG(st == AMP_ERR_OUT_OF_MEMORY, "allocation %ld refused: status %d", k, st);
        }
        harness_note("%ld allocations, each refused once", k);
        CHECK(k > 5 && k < 1000);
    }
    free_fixture(&f);
}
