/* llm.c's model files (amp/llmc.h): a tiny gpt2 written and read back bit for bit (fp32) and through
 * bf16 (version 5: each value rounded to nearest even, as PyTorch's .to(torch.bfloat16) writes them),
 * the layout checked at hand-computed offsets of llm.c's order (train_gpt2.c's
 * fill_in_parameter_sizes), and bad files refused with one-line errors before anything is written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"
#include "test_util.h"

enum { L = 2, C = 32, NH = 4, V = 100, VP = 128, MAXT = 16 };

typedef struct tiny {
    amp_ctx *ctx;
    amp_model *m;
} tiny;

static bool tiny_make(tiny *t, int layers, uint64_t seed) {
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = (size_t)1 << 20;
    t->ctx = NULL, t->m = NULL;
    amp_model_config cfg = amp_model_default_config(AMP_MODEL_GPT2);
    cfg.layers = layers, cfg.hidden = C, cfg.heads = NH, cfg.vocab = V, cfg.context = 8, cfg.positions = MAXT;
    return CHECK(amp_ctx_create(&cc, &t->ctx) == AMP_OK) && CHECK(amp_model_create(t->ctx, &cfg, &t->m) == AMP_OK) &&
           CHECK(amp_ctx_alloc_params(t->ctx) == AMP_OK) && CHECK(amp_model_init(t->m, seed) == AMP_OK);
}

static void tiny_free(tiny *t) {
    amp_model_free(t->m);
    amp_ctx_free(t->ctx);
}

static amp_llmc_header tiny_header(int version) {
    return (amp_llmc_header){version, MAXT, V, L, NH, C, VP};
}

static void tmp_path(char *buf, size_t n, const char *leaf) {
    snprintf(buf, n, "/tmp/amp_test_llmc_%ld_%s", (long)getpid(), leaf);
}

static void spit(const char *path, const unsigned char *p, long len) {
    FILE *f = fopen(path, "wb");
    if (CHECK(f != NULL)) {
        CHECK(fwrite(p, 1, (size_t)len, f) == (size_t)len);
        fclose(f);
    }
}

static float f32_at(const unsigned char *p, int64_t index) {
    float v;
    memcpy(&v, p + 1024 + 4 * index, 4);
    return v;
}

static bool same_params(amp_ctx *a, amp_ctx *b, amp_dtype through) {
    bool same = amp_ctx_num_params(a) == amp_ctx_num_params(b);
    for (size_t i = 0; same && i < amp_ctx_num_params(a); i++) {
        const amp_tensor *x = amp_ctx_param(a, i), *y = amp_ctx_param(b, i);
        for (int64_t j = 0; same && j < amp_tensor_numel(x); j++) {
            float want = amp_tensor_get(x, j);
            if (through == AMP_BF16) want = amp_bf16_to_fp32(amp_bf16_from_fp32(want));
            const float got = amp_tensor_get(y, j);
            same = memcmp(&want, &got, 4) == 0;
            if (!same) CHECK_MSG(false, "%s[%lld]: %a, want %a", x->name, (long long)j, (double)got, (double)want);
        }
    }
    return same;
}

void test_llmc_round_trip(void) {
    char path[256];
    tmp_path(path, sizeof path, "rt.bin");
    tiny a = {0}, b = {0};
    char err[256];
    if (tiny_make(&a, L, 1) && tiny_make(&b, L, 2)) {
        for (int version = 3; version <= 5; version += 2) {
            const amp_llmc_header h = tiny_header(version);
            CHECK_EQ_INT(amp_llmc_num_params(&h), amp_model_num_params(a.m));
            if (!CHECK_MSG(amp_llmc_save(path, a.ctx, &h, err, sizeof err) == AMP_OK, "%s", err)) continue;
            amp_llmc_header got;
            CHECK_MSG(amp_llmc_read_header(path, &got, err, sizeof err) == AMP_OK, "%s", err);
            CHECK(got.version == h.version && got.max_seq_len == h.max_seq_len && got.vocab == h.vocab &&
                  got.layers == h.layers && got.heads == h.heads && got.channels == h.channels &&
                  got.padded_vocab == h.padded_vocab);
            amp_model_config cfg = amp_model_default_config(AMP_MODEL_GPT);
            amp_llmc_model_config(&got, &cfg);
            CHECK(cfg.kind == AMP_MODEL_GPT2 && cfg.layers == L && cfg.heads == NH && cfg.hidden == C &&
                  cfg.vocab == V && cfg.vocab_padded == VP && cfg.positions == MAXT);
            CHECK_MSG(amp_llmc_load(path, b.ctx, NULL, err, sizeof err) == AMP_OK, "%s", err);
            CHECK_MSG(same_params(a.ctx, b.ctx, version == 5 ? AMP_BF16 : AMP_F32), "version %d round trip", version);
        }
        /* llm.c's layout at hand-computed offsets (fp32 file): wte [Vp, C] first, then wpe [maxT, C],
         * ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C], ... lnfb [C] last */
        const amp_llmc_header h = tiny_header(3);
        long len = 0;
        unsigned char *p = amp_llmc_save(path, a.ctx, &h, err, sizeof err) == AMP_OK ? test_read_file(path, &len) : NULL;
        const int64_t n = amp_llmc_num_params(&h);
        CHECK_EQ_INT(len, 1024 + 4 * n);
        if (CHECK(p != NULL) && len == 1024 + 4 * n) {
            int32_t hdr[8];
            memcpy(hdr, p, sizeof hdr);
            CHECK(hdr[0] == 20240326 && hdr[1] == 3 && hdr[2] == MAXT && hdr[3] == V && hdr[4] == L && hdr[5] == NH &&
                  hdr[6] == C && hdr[7] == VP);
            amp_tensor *wte = amp_model_tensor(a.m, 0), *lnfb = amp_model_tensor(a.m, amp_model_num_tensors(a.m) - 1);
            CHECK(f32_at(p, 127 * C + 5) == amp_tensor_get(wte, 127 * C + 5)); /* a padded row */
            const int64_t qkvw = (int64_t)VP * C + MAXT * C + 2 * L * C;       /* after wte, wpe, ln1w, ln1b */
            const amp_tensor *qkv1 = NULL;
            for (size_t i = 0; i < amp_model_num_tensors(a.m); i++)
                if (!strcmp(amp_model_tensor(a.m, i)->name, "h.1.attn.c_attn.weight")) qkv1 = amp_model_tensor(a.m, i);
            if (CHECK(qkv1 != NULL)) /* layer 1, row 70 (of 3C), column 9 */
                CHECK(f32_at(p, qkvw + 3 * C * C + 70 * C + 9) == amp_tensor_get(qkv1, 70 * C + 9));
            CHECK(f32_at(p, n - 1) == amp_tensor_get(lnfb, C - 1));
        }
        free(p);
    }
    unlink(path);
    tiny_free(&a), tiny_free(&b);
}

/* Each bad file gives its status and a one-line message naming the file; the model is unchanged. */
void test_llmc_bad_files(void) {
    char good[256], bad[256], err[256];
    tmp_path(good, sizeof good, "good.bin");
    tmp_path(bad, sizeof bad, "bad.bin");
    tiny a = {0}, b = {0}, other = {0};
    if (!tiny_make(&a, L, 1) || !tiny_make(&b, L, 2) || !tiny_make(&other, L + 1, 3)) goto done;
    const amp_llmc_header h = tiny_header(3);
    long len = 0;
    unsigned char *p = amp_llmc_save(good, a.ctx, &h, err, sizeof err) == AMP_OK ? test_read_file(good, &len) : NULL;
    if (!CHECK(p != NULL)) goto done;
    size_t bytes_b = 0, bytes_o = 0;
    const void *mb = amp_ctx_param_memory(b.ctx, &bytes_b), *mo = amp_ctx_param_memory(other.ctx, &bytes_o);
    unsigned char *b_before = malloc(bytes_b), *o_before = malloc(bytes_o);
    if (!CHECK(b_before && o_before && mb && mo)) goto done;
    memcpy(b_before, mb, bytes_b), memcpy(o_before, mo, bytes_o);
    struct {
        const char *what;
        int field;      /* header int to change, or -1 */
        int32_t value;
        long cut;       /* bytes to keep (0: all), or -1: one byte appended */
        int status;
    } cases[] = {
        {"magic", 0, 20240327, 0, AMP_ERR_FORMAT},   {"version 4", 1, 4, 0, AMP_ERR_FORMAT},
        {"NH not dividing C", 5, 5, 0, AMP_ERR_FORMAT}, {"Vp < V", 7, 64, 0, AMP_ERR_FORMAT},
        {"L = 0", 4, 0, 0, AMP_ERR_FORMAT},           {"huge C", 6, 1 << 30, 0, AMP_ERR_FORMAT},
        {"truncated", -1, 0, len - 4, AMP_ERR_FORMAT}, {"header only", -1, 0, 1024, AMP_ERR_FORMAT},
        {"short header", -1, 0, 100, AMP_ERR_FORMAT},  {"trailing byte", -1, 0, -1, AMP_ERR_FORMAT},
        {"other L", 4, L + 1, 0, AMP_ERR_FORMAT}, /* the length no longer matches */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        unsigned char *q = malloc((size_t)len + 1);
        if (!CHECK(q != NULL)) break;
        memcpy(q, p, (size_t)len);
        q[len] = 0;
        if (cases[k].field >= 0) memcpy(q + 4 * cases[k].field, &cases[k].value, 4);
        spit(bad, q, cases[k].cut > 0 ? cases[k].cut : cases[k].cut < 0 ? len + 1 : len);
        free(q);
        const int st = amp_llmc_load(bad, b.ctx, NULL, err, sizeof err);
        CHECK_MSG(st == cases[k].status, "%s: status %d (%s)", cases[k].what, st, err);
        CHECK_MSG(strstr(err, bad) && !strchr(err, '\n'), "%s: message '%s'", cases[k].what, err);
    }
    CHECK(amp_llmc_load("/nonexistent/amp.bin", b.ctx, NULL, err, sizeof err) == AMP_ERR_IO);
    /* a model of another shape (one more layer): refused before anything is written */
    CHECK(amp_llmc_load(good, other.ctx, NULL, err, sizeof err) == AMP_ERR_INVALID_ARGUMENT);
    CHECK_MSG(strstr(err, "more layers") != NULL, "%s", err);
    size_t nb = 0, nb2 = 0;
    const void *bmem = amp_ctx_param_memory(b.ctx, &nb), *omem = amp_ctx_param_memory(other.ctx, &nb2);
    CHECK(bmem && !memcmp(bmem, b_before, nb) && omem && !memcmp(omem, o_before, nb2)); /* nothing written */
    free(b_before), free(o_before);
    /* save: a header that does not fit the model, or an unwritable place: the old file stays */
    amp_llmc_header h3 = h;
    h3.layers = L + 1;
    CHECK(amp_llmc_save(good, a.ctx, &h3, err, sizeof err) == AMP_ERR_INVALID_ARGUMENT);
    h3 = h, h3.version = 4;
    CHECK(amp_llmc_save(good, a.ctx, &h3, err, sizeof err) == AMP_ERR_INVALID_ARGUMENT);
    CHECK(amp_llmc_save("/nonexistent/dir/amp.bin", a.ctx, &h, err, sizeof err) == AMP_ERR_IO);
    long len2 = 0;
    unsigned char *p2 = test_read_file(good, &len2);
    CHECK(p2 && len2 == len && !memcmp(p, p2, (size_t)len));
    free(p2);
    free(p);
done:
    unlink(good), unlink(bad);
    tiny_free(&a), tiny_free(&b), tiny_free(&other);
}

/* Hugging Face's layout: names, shapes, the Conv1D transposes, wte without its padding, no lm_head. */
void test_llmc_hf_layout(void) {
    char path[256], err[256];
    tmp_path(path, sizeof path, "hf.safetensors");
    tiny a = {0};
    amp_st_file *f = NULL;
    const amp_llmc_header h = tiny_header(3);
    if (tiny_make(&a, L, 4) && CHECK_MSG(amp_llmc_save_hf(path, a.ctx, &h, err, sizeof err) == AMP_OK, "%s", err) &&
        CHECK_MSG(amp_safetensors_open(path, &f, err, sizeof err) == AMP_OK, "%s", err)) {
        CHECK_EQ_INT(amp_safetensors_num_tensors(f), 4 + 12 * L);
        CHECK(amp_safetensors_find(f, "lm_head.weight") == NULL);
        const amp_st_info *wte = amp_safetensors_find(f, "transformer.wte.weight");
        const amp_st_info *qkv = amp_safetensors_find(f, "transformer.h.1.attn.c_attn.weight");
        const amp_st_info *fcp = amp_safetensors_find(f, "transformer.h.0.mlp.c_proj.weight");
        CHECK(wte && wte->ndim == 2 && wte->shape[0] == V && wte->shape[1] == C);
        CHECK(qkv && qkv->ndim == 2 && qkv->shape[0] == C && qkv->shape[1] == 3 * C);
        CHECK(fcp && fcp->ndim == 2 && fcp->shape[0] == 4 * C && fcp->shape[1] == C);
        static float q[C * 3 * C];
        const amp_tensor *src = NULL;
        for (size_t i = 0; i < amp_model_num_tensors(a.m); i++)
            if (!strcmp(amp_model_tensor(a.m, i)->name, "h.1.attn.c_attn.weight")) src = amp_model_tensor(a.m, i);
        if (qkv && src &&
            CHECK(amp_safetensors_read(f, "transformer.h.1.attn.c_attn.weight", q, AMP_F32, 2, qkv->shape, err,
                                       sizeof err) == AMP_OK))
            for (int r = 0; r < 3 * C; r += 7) /* amp's [3C, C] row r, column c is HF's [C, 3C] row c, column r */
                for (int c = 0; c < C; c += 5)
                    CHECK(q[c * 3 * C + r] == amp_tensor_get(src, r * C + c));
    }
    amp_safetensors_close(f);
    unlink(path);
    tiny_free(&a);
}

/* amp_train_run with init_from and save_llmc: the file's sizes become the model's (a context shorter
 * than its positions), its weights are the starting point, and with lr 0 the saved file holds exactly
 * the loaded weights: the round trip through a training run, bit for bit. */
void test_llmc_train_run(void) {
    char model[256], shard[256], val[256], out[256], err[256];
    tmp_path(model, sizeof model, "run_in.bin");
    tmp_path(shard, sizeof shard, "run_train.bin");
    tmp_path(val, sizeof val, "run_val.bin");
    tmp_path(out, sizeof out, "run_out.bin");
    tiny a = {0};
    const amp_llmc_header h = tiny_header(3);
    uint32_t ids[600];
    for (int i = 0; i < 600; i++) ids[i] = (uint32_t)((i * 37 + i / 7) % V);
    if (tiny_make(&a, L, 9) && CHECK_MSG(amp_llmc_save(model, a.ctx, &h, err, sizeof err) == AMP_OK, "%s", err) &&
        CHECK(amp_token_shard_write(shard, ids, 500, V, err, sizeof err) == AMP_OK) &&
        CHECK(amp_token_shard_write(val, ids + 500, 100, V, err, sizeof err) == AMP_OK)) {
        amp_train_config cfg = amp_train_default_config(AMP_MODEL_GPT2);
        cfg.model.layers = 1, cfg.model.hidden = 8, cfg.model.heads = 2; /* replaced by the file's */
        cfg.model.context = 8, cfg.batch = 2, cfg.steps = 2, cfg.eval = false, cfg.threads = 1;
        cfg.data = shard, cfg.val_data = val, cfg.vocab = V;
        cfg.precision = AMP_PRECISION_FP32;
        cfg.optim.lr = 0.0f;
        cfg.data_order = AMP_DATA_ORDER_SEQUENTIAL;
        cfg.init_from = model, cfg.save_llmc = out;
        amp_train_result r;
        if (CHECK_MSG(amp_train_run(&cfg, NULL, &r, err, sizeof err) == AMP_OK, "%s", err)) {
            CHECK_EQ_INT(r.num_params, amp_llmc_num_params(&h));
            long n1 = 0, n2 = 0;
            unsigned char *p1 = test_read_file(model, &n1), *p2 = test_read_file(out, &n2);
            CHECK_MSG(p1 && p2 && n1 == n2 && !memcmp(p1, p2, (size_t)n1), "the saved file differs from the loaded one");
            free(p1), free(p2);
        }
        cfg.model.context = MAXT + 1; /* longer than the file's positions: refused */
        CHECK(amp_train_run(&cfg, NULL, &r, err, sizeof err) == AMP_ERR_INVALID_ARGUMENT);
        CHECK_MSG(strstr(err, "positions") != NULL, "%s", err);
    }
    unlink(model), unlink(shard), unlink(val), unlink(out);
    tiny_free(&a);
}
