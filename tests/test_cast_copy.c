/* Cast copies (amp_ctx_keep_cast_copies): a model trained with them and its twin trained without
 * give the same bits, step after step, for bf16 and fp16 autocast; the copies are taken (autocast's
 * copy hits) where they hold the parameters' values and not where they do not: a parameter written
 * between steps through amp_tensor_write, through its data and amp_tensor_bump_version, through
 * amp_optimizer_master or by a checkpoint load; an optimizer step made before the backward of the
 * graph that took the copy (forward, step, backward); an autocast region open across a step (its
 * cache keeps the cast it made). Each of these, were the copy taken, would give the old values' cast:
 * different bits from the twin. And a head that reads a prefix view of a padded weight's cast (GPT-2's
 * tied head) takes the copy every step after the first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "tests.h"
#include "amp.h"
#include "../src/autocast/autocast_internal.h"

enum { IN = 24, HID = 40, OUT = 8, ROWS = 6 };

typedef struct twin {
    amp_ctx *ctx;
    amp_optimizer *opt;
    amp_tensor *w1, *b1, *w2, *b2;
    float y[ROWS * OUT]; /* the last forward's output, as fp32 */
    float loss;
} twin;

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}
static float rnd(uint64_t *s) { return (float)((double)rng_next(s) / 2147483648.0 - 0.5); }

static void fill(amp_tensor *t, uint64_t *s, float scale) {
    for (int64_t i = 0; i < amp_tensor_numel(t); i++) ((float *)t->data)[i] = scale * rnd(s);
}

static bool twin_make(twin *m, amp_dtype copies, uint64_t seed) {
    memset(m, 0, sizeof *m);
    amp_ctx_config cfg = amp_ctx_default_config();
    cfg.arena_bytes = 1 << 20;
    if (!CHECK(amp_ctx_create(&cfg, &m->ctx) == AMP_OK)) return false;
    m->w1 = amp_param_new(m->ctx, "w1", AMP_F32, 2, (const int64_t[]){HID, IN});
    m->b1 = amp_param_new(m->ctx, "b1", AMP_F32, 1, (const int64_t[]){HID});
    m->w2 = amp_param_new(m->ctx, "w2", AMP_F32, 2, (const int64_t[]){OUT, HID});
    m->b2 = amp_param_new(m->ctx, "b2", AMP_F32, 1, (const int64_t[]){OUT});
    if (!CHECK(amp_ctx_alloc_params(m->ctx) == AMP_OK)) return false;
    uint64_t s = seed;
    fill(m->w1, &s, 0.5f), fill(m->b1, &s, 0.1f), fill(m->w2, &s, 0.5f), fill(m->b2, &s, 0.1f);
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_ADAMW);
    oc.lr = 1e-2f;
    if (!CHECK(amp_optimizer_create(m->ctx, &oc, &m->opt) == AMP_OK)) return false;
    return CHECK(amp_ctx_keep_cast_copies(m->ctx, copies) == AMP_OK);
}

static void twin_free(twin *m) {
    amp_optimizer_free(m->opt);
    amp_ctx_free(m->ctx);
}

/* Forward of step k under autocast to dt (the region left open when keep_region): the loss. */
static amp_tensor *forward(twin *m, amp_dtype dt, int k, bool keep_region) {
    float x[ROWS * IN], t[ROWS * OUT];
    uint64_t s = 77 + (uint64_t)k;
    for (int i = 0; i < ROWS * IN; i++) x[i] = rnd(&s);
    for (int i = 0; i < ROWS * OUT; i++) t[i] = rnd(&s);
    amp_tensor *xt = amp_tensor_from(m->ctx, AMP_F32, 2, (const int64_t[]){ROWS, IN}, x, AMP_F32);
    amp_tensor *tt = amp_tensor_from(m->ctx, AMP_F32, 2, (const int64_t[]){ROWS, OUT}, t, AMP_F32);
    CHECK(amp_autocast_enter(dt) == AMP_OK);
    amp_tensor *h = amp_gelu(m->ctx, amp_linear(m->ctx, xt, m->w1, m->b1));
    amp_tensor *y = amp_linear(m->ctx, h, m->w2, m->b2);
    amp_tensor *loss = amp_mse_loss(m->ctx, y, tt);
    if (!keep_region) CHECK(amp_autocast_exit() == AMP_OK);
    if (!CHECK_MSG(loss != NULL, "forward: %s", amp_ctx_error(m->ctx))) return NULL;
    CHECK(amp_tensor_read(y, m->y, AMP_F32) == AMP_OK);
    m->loss = amp_tensor_get(loss, 0);
    return loss;
}

typedef enum order { PLAIN, STEP_BEFORE_BACKWARD, REGION_ACROSS_STEP, SECOND_FORWARD } order;

static void step(twin *m, amp_dtype dt, int k, order o) {
    CHECK(amp_ctx_reset(m->ctx) == AMP_OK);
    amp_zero_grad(m->ctx);
    amp_tensor *loss = forward(m, dt, k, o == REGION_ACROSS_STEP);
    if (!loss) return;
    if (o == STEP_BEFORE_BACKWARD || o == SECOND_FORWARD)
        CHECK(amp_optimizer_step(m->opt) == AMP_OK); /* zero gradients: decay only */
    if (o == SECOND_FORWARD) { /* the new weights' casts, while the first graph holds the old ones */
        float first[ROWS * OUT];
        memcpy(first, m->y, sizeof first);
        CHECK(forward(m, dt, k + 1000, false) != NULL);
        memcpy(m->y, first, sizeof first);
    }
    CHECK(amp_backward(m->ctx, loss, NULL) == AMP_OK);
    CHECK(amp_optimizer_step(m->opt) == AMP_OK);
    if (o == REGION_ACROSS_STEP) {
        /* the region's cache hands out the casts it made before the step (PyTorch's stale ones) */
        amp_tensor *again = forward(m, dt, k + 1000, false);
        CHECK(again != NULL);
        CHECK(amp_autocast_exit() == AMP_OK);
    }
}

typedef enum event { NONE, WRITE, DIRECT, MASTER, CHECKPOINT } event;

static const char *event_name(event e) {
    static const char *names[] = {"none", "amp_tensor_write", "data + bump_version", "amp_optimizer_master", "checkpoint"};
    return names[e];
}

/* Between steps: new values for w1 (and b2), the same in both twins. */
static void write_event(twin *m, event e, const char *ckpt, int k) {
    float v[HID * IN];
    uint64_t s = 991 + (uint64_t)k;
    for (int i = 0; i < HID * IN; i++) v[i] = 0.4f * rnd(&s);
    char err[256];
    switch (e) {
    case NONE: break;
    case WRITE: CHECK(amp_tensor_write(m->w1, v, AMP_F32) == AMP_OK); break;
    case DIRECT:
        memcpy(m->w1->data, v, sizeof v);
        ((float *)m->b2->data)[3] = 0.75f;
        amp_tensor_bump_version(m->w1);
        amp_tensor_bump_version(m->b2);
        break;
    case MASTER: amp_optimizer_master(m->opt, 0)[5] = -1.5f; break; /* w1 is parameter 0 */
    case CHECKPOINT: CHECK_MSG(amp_checkpoint_load(ckpt, m->ctx, m->opt, NULL, NULL, err, sizeof err) == AMP_OK, "%s", err); break;
    }
}

static bool same_params(const twin *a, const twin *b) {
    const amp_tensor *pa[4] = {a->w1, a->b1, a->w2, a->b2}, *pb[4] = {b->w1, b->b1, b->w2, b->b2};
    for (int i = 0; i < 4; i++)
        if (memcmp(pa[i]->data, pb[i]->data, (size_t)amp_tensor_numel(pa[i]) * 4)) return false;
    return true;
}

/* Trains both twins 6 steps under dt (copies in `copies`), with event e before step 3 and step 3 in
 * order o; returns the copy hits of the twin with copies. */
static unsigned long long run_pair(amp_dtype dt, amp_dtype copies, event e, order o) {
    char ckpt[64];
    snprintf(ckpt, sizeof ckpt, "/tmp/amp_cast_copy_%d.st", (int)getpid());
    twin with, without;
    if (!twin_make(&with, copies, 5) || !twin_make(&without, AMP_F32, 5)) return 0;
    unsigned long long hits0 = amp_autocast_copy_hits(), hits = 0;
    for (int k = 0; k < 6; k++) {
        if (k == 1 && e == CHECKPOINT)
            CHECK(amp_checkpoint_save(ckpt, with.ctx, with.opt, NULL, NULL, NULL, 0) == AMP_OK);
        if (k == 3) {
            write_event(&with, e, ckpt, k);
            write_event(&without, e, ckpt, k);
        }
        const unsigned long long before = amp_autocast_copy_hits();
        step(&with, dt, k, k == 3 ? o : PLAIN);
        const unsigned long long taken = amp_autocast_copy_hits() - before;
        step(&without, dt, k, k == 3 ? o : PLAIN);
        CHECK_MSG(amp_autocast_copy_hits() - before == taken, "the twin without copies took none");
        CHECK_MSG(!memcmp(with.y, without.y, sizeof with.y) && with.loss == without.loss && same_params(&with, &without),
                  "%s, order %d, %s: step %d differs with cast copies (%llu taken)", amp_dtype_name(dt), (int)o,
                  event_name(e), k, taken);
    }
    hits = amp_autocast_copy_hits() - hits0;
    if (copies != AMP_F32) CHECK(amp_ctx_cast_copy_bytes(with.ctx) == (size_t)(1920 + 128 + 640 + 64));
    twin_free(&with);
    twin_free(&without);
    if (e == CHECKPOINT) remove(ckpt);
    return hits;
}

void test_cast_copy_bits(void) {
    const amp_dtype dts[2] = {AMP_BF16, AMP_F16};
    for (int d = 0; d < 2; d++) {
        /* 6 steps, 4 casts each: the first step's are made, the other 5 steps' are the copies */
        unsigned long long hits = run_pair(dts[d], dts[d], NONE, PLAIN);
        CHECK_MSG(hits == 20, "%s: %llu copies taken (20 expected)", amp_dtype_name(dts[d]), hits);
        /* copies of the other dtype are never taken */
        hits = run_pair(dts[d], dts[1 - d], NONE, PLAIN);
        CHECK_MSG(hits == 0, "%s: %llu copies of the other dtype taken", amp_dtype_name(dts[d]), hits);
    }
}

void test_cast_copy_writes(void) {
    /* step 3 casts afresh what was written before it (w1; DIRECT: b2 too), takes the rest */
    const struct { event e; unsigned long long hits; } cases[] = {
        {WRITE, 19}, {DIRECT, 18}, {MASTER, 19}, {CHECKPOINT, 16}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const unsigned long long hits = run_pair(AMP_BF16, AMP_BF16, cases[i].e, PLAIN);
        CHECK_MSG(hits == cases[i].hits, "%s: %llu copies taken (%llu expected)", event_name(cases[i].e), hits,
                  cases[i].hits);
    }
}

void test_cast_copy_live_graph(void) {
    /* step 3's update before its backward must not rewrite the copies its graph reads (backward would
     * see the new weights); the update after the backward, the graph spent, writes them again */
    unsigned long long hits = run_pair(AMP_BF16, AMP_BF16, NONE, STEP_BEFORE_BACKWARD);
    CHECK_MSG(hits == 20, "forward, step, backward: %llu copies taken (20 expected)", hits);
    /* a second forward after that update, before the first graph's backward: its casts must not go
     * into the copies the first graph reads; the next step's casts do */
    hits = run_pair(AMP_BF16, AMP_BF16, NONE, SECOND_FORWARD);
    CHECK_MSG(hits == 16, "forward, step, forward, backward: %llu copies taken (16 expected)", hits);
    /* a region open across step 3's update: its second forward takes the cache's casts (no new hit),
     * and step 4 casts afresh */
    hits = run_pair(AMP_BF16, AMP_BF16, NONE, REGION_ACROSS_STEP);
    CHECK_MSG(hits == 16, "a region across the step: %llu copies taken (16 expected)", hits);
}

/* The copies hold no arena memory: the cache's bytes leave them out; refusals. */
void test_cast_copy_memory(void) {
    twin m;
    if (!twin_make(&m, AMP_BF16, 9)) return;
    step(&m, AMP_BF16, 0, PLAIN);
    CHECK(amp_ctx_reset(m.ctx) == AMP_OK);
    CHECK(amp_autocast_enter(AMP_BF16) == AMP_OK);
    float x[ROWS * IN] = {0};
    amp_tensor *xt = amp_tensor_from(m.ctx, AMP_F32, 2, (const int64_t[]){ROWS, IN}, x, AMP_F32);
    CHECK(amp_linear(m.ctx, xt, m.w1, m.b1) != NULL);
    CHECK_EQ_INT((long long)amp_autocast_cache_bytes(), 0); /* both casts are the copies */
    CHECK(amp_linear(m.ctx, xt, m.w1, NULL) != NULL);
    CHECK(amp_autocast_exit() == AMP_OK);
    CHECK_EQ_INT(amp_ctx_keep_cast_copies(m.ctx, AMP_F8E4M3), AMP_ERR_UNSUPPORTED_DTYPE);
    CHECK_EQ_INT(amp_ctx_keep_cast_copies(m.ctx, AMP_F32), AMP_OK);
    CHECK_EQ_INT((long long)amp_ctx_cast_copy_bytes(m.ctx), 0);
    twin_free(&m);
    amp_ctx *bare = NULL;
    CHECK(amp_ctx_create(NULL, &bare) == AMP_OK);
    amp_param_new(bare, "p", AMP_F32, 1, (const int64_t[]){4});
    CHECK_EQ_INT(amp_ctx_keep_cast_copies(bare, AMP_BF16), AMP_ERR_STATE); /* before amp_ctx_alloc_params */
    amp_ctx_free(bare);
}

/* A head that reads the first OUT rows of a padded weight's cast (amp_narrow_rows of autocast's cast:
 * GPT-2's tied head): its weight gradient goes straight into the master's, past the view and the
 * cast, which stay unspent; the optimizer must still write the copy (the view's backward reads no
 * values), so every step after the first takes it, with the bits of a twin without copies. */
enum { PAD_ROWS = 4 };

static float narrowed_step(amp_ctx *ctx, amp_optimizer *opt, amp_tensor *w, int k, float *y_out) {
    float x[ROWS * HID], t[ROWS * OUT];
    uint64_t s = 313 + (uint64_t)k;
    for (int i = 0; i < ROWS * HID; i++) x[i] = rnd(&s);
    for (int i = 0; i < ROWS * OUT; i++) t[i] = rnd(&s);
    CHECK(amp_ctx_reset(ctx) == AMP_OK);
    amp_zero_grad(ctx);
    amp_tensor *xt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){ROWS, HID}, x, AMP_F32);
    amp_tensor *tt = amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){ROWS, OUT}, t, AMP_F32);
    CHECK(amp_autocast_enter(AMP_BF16) == AMP_OK);
    amp_tensor *cast = amp_autocast_weight(ctx, AMP_OP_LINEAR, w);
    amp_tensor *y = cast ? amp_linear(ctx, xt, amp_narrow_rows(ctx, cast, OUT), NULL) : NULL;
    amp_tensor *loss = amp_mse_loss(ctx, y, tt);
    CHECK(amp_autocast_exit() == AMP_OK);
    if (!CHECK_MSG(loss != NULL, "narrowed head: %s", amp_ctx_error(ctx))) return 0.0f;
    CHECK(amp_tensor_read(y, y_out, AMP_F32) == AMP_OK);
    CHECK(amp_backward(ctx, loss, NULL) == AMP_OK);
    CHECK(amp_optimizer_step(opt) == AMP_OK);
    return amp_tensor_get(loss, 0);
}

void test_cast_copy_narrowed_view(void) {
    amp_ctx *ctx[2] = {NULL, NULL};
    amp_optimizer *opt[2] = {NULL, NULL};
    amp_tensor *w[2] = {NULL, NULL};
    for (int m = 0; m < 2; m++) { /* m = 0 keeps bf16 copies, m = 1 none */
        amp_ctx_config cfg = amp_ctx_default_config();
        cfg.arena_bytes = 1 << 20;
        if (!CHECK(amp_ctx_create(&cfg, &ctx[m]) == AMP_OK)) goto done;
        w[m] = amp_param_new(ctx[m], "w", AMP_F32, 2, (const int64_t[]){OUT + PAD_ROWS, HID});
        if (!CHECK(amp_ctx_alloc_params(ctx[m]) == AMP_OK)) goto done;
        uint64_t s = 17;
        fill(w[m], &s, 0.5f);
        amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_ADAMW);
        oc.lr = 1e-2f;
        if (!CHECK(amp_optimizer_create(ctx[m], &oc, &opt[m]) == AMP_OK)) goto done;
        CHECK(amp_ctx_keep_cast_copies(ctx[m], m == 0 ? AMP_BF16 : AMP_F32) == AMP_OK);
    }
    for (int k = 0; k < 4; k++) {
        float y[2][ROWS * OUT];
        const unsigned long long before = amp_autocast_copy_hits();
        const float l0 = narrowed_step(ctx[0], opt[0], w[0], k, y[0]);
        const unsigned long long taken = amp_autocast_copy_hits() - before;
        const float l1 = narrowed_step(ctx[1], opt[1], w[1], k, y[1]);
        CHECK_MSG(taken == (k > 0), "step %d: %llu copies taken (%d expected)", k, taken, k > 0);
        CHECK_MSG(l0 == l1 && !memcmp(y[0], y[1], sizeof y[0]) &&
                      !memcmp(w[0]->data, w[1]->data, (size_t)amp_tensor_numel(w[0]) * sizeof(float)),
                  "step %d differs with cast copies", k);
    }
done:
    for (int m = 0; m < 2; m++) {
        amp_optimizer_free(opt[m]);
        amp_ctx_free(ctx[m]);
    }
}
