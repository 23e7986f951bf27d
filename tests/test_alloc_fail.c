/* Failing-allocation loops: every create/load entry point runs with heap allocation number k refused,
 * for k = 0, 1, 2, ... until a run refuses nothing. Each run that hit the refusal must return an error
 * status (AMP_ERR_OUT_OF_MEMORY) with a message, not crash, and leave no amp allocation live once the
 * matching free/destroy calls are made. The heap is amp's process-wide one (amp/alloc.h), replaced by
 * a tracker that remembers every block it handed out, so "leaked" is exact and independent of amp's
 * own bookkeeping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "test_util.h"
#include "tests.h"

enum { ERR_SIZE = 512, MAX_TRIES = 20000 };

/* ---- the tracking heap ------------------------------------------------------------------------- */

/* Blocks are tracked in a plain array from the C library's malloc (outside the hooks). Blocks amp
 * allocated before the tracker was installed (the GEMM's packing buffers of an earlier test) are
 * "foreign": freed or grown through the C library without being counted. */
typedef struct tracker {
    void **live;
    size_t n_live, cap;
    long calls;    /* allocation calls since the last reset */
    long fail_at;  /* the call to refuse (-1: none) */
    bool refused;  /* fail_at was reached */
    bool broken;   /* the tracker itself ran out of memory */
} tracker;

static tracker g_heap;

static bool track(void *p) {
    if (g_heap.n_live == g_heap.cap) {
        const size_t cap = g_heap.cap ? 2 * g_heap.cap : 256;
        void **grown = realloc(g_heap.live, cap * sizeof *grown);
        if (!grown) return !(g_heap.broken = true);
        g_heap.live = grown;
        g_heap.cap = cap;
    }
    g_heap.live[g_heap.n_live++] = p;
    return true;
}

/* Removes p from the live set; false if it was not there (a foreign block). */
static bool untrack(void *p) {
    for (size_t i = g_heap.n_live; i-- > 0;)
        if (g_heap.live[i] == p) {
            g_heap.live[i] = g_heap.live[--g_heap.n_live];
            return true;
        }
    return false;
}

static bool refuse_now(void) {
    if (g_heap.calls++ != g_heap.fail_at) return false;
    g_heap.refused = true;
    return true;
}

static void *t_malloc(size_t size, void *user) {
    (void)user;
    if (refuse_now()) return NULL;
    void *p = malloc(size);
    if (p) track(p);
    return p;
}

static void *t_realloc(void *ptr, size_t size, void *user) {
    (void)user;
    if (refuse_now()) return NULL;
    const bool ours = ptr == NULL || untrack(ptr);
    void *p = realloc(ptr, size);
    if (p && ours) track(p);
    if (!p && ptr && ours) track(ptr); /* realloc failed: the old block stays live */
    return p;
}

static void *t_aligned(size_t align, size_t size, void *user) {
    (void)user;
    if (refuse_now()) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align, size) != 0) return NULL;
    track(p);
    return p;
}

static void t_free(void *ptr, void *user) {
    (void)user;
    untrack(ptr);
    free(ptr);
}

static const amp_heap_allocator tracking_heap = {t_malloc, t_realloc, t_aligned, t_free, NULL};

/* ---- the loop ---------------------------------------------------------------------------------- */

/* A scenario makes the calls under test and then frees everything it made, successful or not. It
 * returns the first failing status (or AMP_OK) and leaves a message in err. */
typedef int (*scenario_fn)(void *arg, char *err);

/* Runs fn with allocation k refused for k = 0, 1, ... until a run makes no refused call. Returns the
 * number of allocations the full run made (0 on a failed check). */
static long fail_loop(const char *name, scenario_fn fn, void *arg) {
    char err[ERR_SIZE];
    /* Warm-up with the real heap: fills the caches that outlive a call (GEMM packing buffers,
     * autocast cache) so that the counted runs do not grow them. */
    err[0] = 0;
    if (!CHECK_MSG(fn(arg, err) == AMP_OK, "%s: the plain run failed: %s", name, err)) return 0;
    amp_set_allocator(&tracking_heap);
    long k = 0, failures = 0, total = 0;
    for (; k < MAX_TRIES; k++) {
        g_heap.calls = 0;
        g_heap.fail_at = k;
        g_heap.refused = false;
        err[0] = 0;
        const int st = fn(arg, err);
        const size_t leaked = g_heap.n_live;
        g_heap.n_live = 0; /* leaked blocks stay allocated: freeing them could hide a double free */
        if (!CHECK_MSG(leaked == 0, "%s: allocation %ld refused: %zu blocks leaked (status %d)", name, k, leaked, st))
            failures++;
        if (!g_heap.refused) {
            CHECK_MSG(st == AMP_OK, "%s: nothing refused but status %d: %s", name, st, err);
            total = g_heap.calls;
            break;
        }
        if (!CHECK_MSG(st == AMP_ERR_OUT_OF_MEMORY && err[0] != 0,
                       "%s: allocation %ld refused: status %d (%s), want AMP_ERR_OUT_OF_MEMORY with a message",
                       name, k, st, err))
            failures++;
        if (failures > 5) break; /* one bug, reported a few times, is enough */
    }
    amp_set_allocator(NULL);
    CHECK_MSG(!g_heap.broken, "%s: the tracker ran out of memory", name);
    CHECK_MSG(k < MAX_TRIES, "%s: still refusing after %d allocations", name, MAX_TRIES);
    harness_note("%s: %ld allocations, each refused once", name, total);
    return total;
}

/* Copies a status message into err when the callee has not written one (amp_ctx errors). */
static int note(char *err, int st, const char *what) {
    if (st != AMP_OK && !err[0]) snprintf(err, ERR_SIZE, "%s: %s", what, amp_status_str(st));
    return st;
}

/* ---- scenarios --------------------------------------------------------------------------------- */

static int sc_ctx(void *arg, char *err) {
    (void)arg;
    amp_ctx *ctx = NULL;
    int st = amp_ctx_create(NULL, &ctx);
    if (st != AMP_OK) return note(err, st, "amp_ctx_create");
    /* Enough parameters to grow the parameter table, and an arena small enough to grow. */
    for (int i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        amp_param_new(ctx, name, i % 2 ? AMP_BF16 : AMP_F32, 2, (int64_t[]){3, 5});
    }
    amp_buffer_new(ctx, "running", AMP_F32, 1, (int64_t[]){7});
    if ((st = amp_ctx_status(ctx)) == AMP_OK) st = amp_ctx_alloc_params(ctx);
    if (st == AMP_OK) {
        amp_tensor *x = amp_tensor_new(ctx, AMP_F32, 2, (int64_t[]){256, 1024});
        if (!x) st = amp_ctx_status(ctx);
    }
    if (st != AMP_OK) snprintf(err, ERR_SIZE, "%s", amp_ctx_error(ctx));
    amp_ctx_free(ctx);
    return note(err, st, "ctx");
}

/* One of the four models: create, allocate, init, a forward and backward pass. */
static int sc_model(void *arg, char *err) {
    const amp_model_kind kind = *(const amp_model_kind *)arg;
    amp_model_config mc = amp_model_default_config(kind);
    const bool text = amp_model_is_text(kind);
    mc.hidden = 8, mc.image_rows = 8, mc.image_cols = 8, mc.classes = 3;
    mc.conv1_channels = 2, mc.conv2_channels = 2, mc.kernel = 3;
    mc.vocab = 5, mc.context = 4, mc.embed = 4, mc.layers = 1, mc.heads = 2;
    amp_ctx_config cc = amp_ctx_default_config();
    cc.arena_bytes = 4096; /* small: the passes below grow it */
    amp_ctx *ctx = NULL;
    amp_model *m = NULL;
    int st = amp_ctx_create(&cc, &ctx);
    if (st != AMP_OK) return note(err, st, "amp_ctx_create");
    if ((st = amp_model_create(ctx, &mc, &m)) == AMP_OK && (st = amp_ctx_alloc_params(ctx)) == AMP_OK &&
        (st = amp_model_init(m, 1)) == AMP_OK) {
        const int64_t batch = 2;
        int32_t tokens[2 * 4] = {0, 1, 2, 3, 4, 0, 1, 2};
        int32_t labels[2 * 4] = {1, 2, 3, 4, 0, 1, 2, 3};
        amp_tensor *x = NULL;
        if (!text) {
            static const float zeros[2 * 64];
            x = amp_tensor_from(ctx, AMP_F32, 4, (int64_t[]){batch, 1, 8, 8}, zeros, AMP_F32);
        }
        amp_tensor *logits = (text || x) ? amp_model_forward(m, ctx, x, text ? tokens : NULL, batch, true) : NULL;
        amp_tensor *loss = logits ? amp_cross_entropy(ctx, logits, labels) : NULL;
        if (loss) amp_backward(ctx, loss, NULL);
        st = amp_ctx_status(ctx);
    }
    if (st != AMP_OK && !err[0]) snprintf(err, ERR_SIZE, "%s", amp_ctx_error(ctx));
    amp_model_free(m);
    amp_ctx_free(ctx);
    return note(err, st, amp_model_kind_name(kind));
}

/* A context with two parameters (one bf16, so the optimizer keeps fp32 master weights). */
static int small_ctx(amp_ctx **ctx) {
    int st = amp_ctx_create(NULL, ctx);
    if (st != AMP_OK) return st;
    amp_param_new(*ctx, "w", AMP_BF16, 2, (int64_t[]){4, 3});
    amp_param_new(*ctx, "b", AMP_F32, 1, (int64_t[]){4});
    amp_buffer_new(*ctx, "stat", AMP_F32, 1, (int64_t[]){2});
    if ((st = amp_ctx_status(*ctx)) != AMP_OK) return st;
    return amp_ctx_alloc_params(*ctx);
}

static int sc_optim_scaler(void *arg, char *err) {
    const amp_optim_kind kind = *(const amp_optim_kind *)arg;
    amp_ctx *ctx = NULL;
    amp_optimizer *opt = NULL;
    amp_scaler *s = NULL;
    int st = small_ctx(&ctx);
    if (st == AMP_OK) {
        amp_optim_config oc = amp_optim_default_config(kind);
        if ((st = amp_optimizer_create(ctx, &oc, &opt)) == AMP_OK) st = amp_scaler_create(NULL, &s);
        if (st == AMP_OK) st = amp_optimizer_step(opt);
    }
    if (st != AMP_OK && ctx && amp_ctx_status(ctx) != AMP_OK) snprintf(err, ERR_SIZE, "%s", amp_ctx_error(ctx));
    amp_scaler_free(s);
    amp_optimizer_free(opt);
    amp_ctx_free(ctx);
    return note(err, st, "optimizer/scaler");
}

static char g_dir[64];

static void path_in(char *buf, size_t size, const char *name) { snprintf(buf, size, "%s/%s", g_dir, name); }

static int sc_safetensors(void *arg, char *err) {
    (void)arg;
    char path[128];
    path_in(path, sizeof path, "t.safetensors");
    static const float a[6] = {1, 2, 3, 4, 5, 6};
    static const uint16_t b[2] = {0x3C00, 0xC000};
    const amp_st_tensor ts[2] = {{"alpha", AMP_F32, 2, (int64_t[]){2, 3}, a}, {"beta", AMP_F16, 1, (int64_t[]){2}, b}};
    const amp_st_meta meta[2] = {{"k1", "v1"}, {"k2", "v2"}};
    int st = amp_safetensors_write(path, ts, 2, meta, 2, err, ERR_SIZE);
    if (st != AMP_OK) return st;
    amp_st_file *f = NULL;
    if ((st = amp_safetensors_open(path, &f, err, ERR_SIZE)) == AMP_OK) {
        float got[6];
        st = amp_safetensors_read(f, "alpha", got, AMP_F32, 2, (int64_t[]){2, 3}, err, ERR_SIZE);
        if (st == AMP_OK && memcmp(got, a, sizeof a) != 0) st = AMP_ERR_FORMAT;
    }
    amp_safetensors_close(f);
    return st;
}

static int sc_checkpoint(void *arg, char *err) {
    (void)arg;
    char path[128];
    path_in(path, sizeof path, "ckpt.safetensors");
    amp_ctx *ctx = NULL, *ctx2 = NULL;
    amp_optimizer *opt = NULL, *opt2 = NULL;
    amp_scaler *s = NULL, *s2 = NULL;
    const amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_ADAMW);
    const amp_st_meta user[1] = {{"note", "x"}};
    const amp_checkpoint_info info = {.step = 3, .epoch = 1, .n_rng = 1, .rng = {42}, .user = user, .n_user = 1};
    int st = small_ctx(&ctx);
    if (st == AMP_OK) st = amp_optimizer_create(ctx, &oc, &opt);
    if (st == AMP_OK) st = amp_scaler_create(NULL, &s);
    if (st == AMP_OK) st = amp_checkpoint_save(path, ctx, opt, s, &info, err, ERR_SIZE);
    if (st == AMP_OK) st = small_ctx(&ctx2);
    if (st == AMP_OK) st = amp_optimizer_create(ctx2, &oc, &opt2);
    if (st == AMP_OK) st = amp_scaler_create(NULL, &s2);
    amp_checkpoint_info back;
    if (st == AMP_OK) st = amp_checkpoint_load(path, ctx2, opt2, s2, &back, err, ERR_SIZE);
    if (st == AMP_OK && (back.step != 3 || back.rng[0] != 42)) st = AMP_ERR_FORMAT;
    amp_scaler_free(s);
    amp_scaler_free(s2);
    amp_optimizer_free(opt);
    amp_optimizer_free(opt2);
    amp_ctx_free(ctx);
    amp_ctx_free(ctx2);
    return note(err, st, "checkpoint");
}

static int sc_images(void *arg, char *err) {
    (void)arg;
    amp_image_dataset d;
    const int st = amp_image_dataset_load(g_dir, true, NULL, &d, err, ERR_SIZE);
    amp_image_dataset_free(&d);
    return st;
}

static int sc_images_gz(void *arg, char *err) {
    (void)arg;
    amp_image_dataset d;
    const int st = amp_image_dataset_load(g_dir, false, NULL, &d, err, ERR_SIZE);
    amp_image_dataset_free(&d);
    return st;
}

/* float32 images (the raw bytes and the fp32 values are separate allocations) in g_dir/float. */
static int sc_images_float(void *arg, char *err) {
    (void)arg;
    char dir[128];
    path_in(dir, sizeof dir, "float");
    amp_image_dataset d;
    const int st = amp_image_dataset_load(dir, true, NULL, &d, err, ERR_SIZE);
    amp_image_dataset_free(&d);
    return st;
}

static int sc_text(void *arg, char *err) {
    (void)arg;
    char path[128];
    path_in(path, sizeof path, "text.txt");
    amp_text_corpus c;
    const int st = amp_text_corpus_load(path, 0.1, NULL, &c, err, ERR_SIZE);
    amp_text_corpus_free(&c);
    return st;
}

static int sc_text_words(void *arg, char *err) {
    (void)arg;
    char path[128];
    path_in(path, sizeof path, "text.txt");
    amp_text_corpus c;
    const int st = amp_text_corpus_load_words(path, 0.1, 8, NULL, &c, err, ERR_SIZE);
    amp_text_corpus_free(&c);
    return st;
}

/* amp_train_run: a few steps of a tiny model with evaluation and a checkpoint; arg selects the mlp
 * (writing train.ckpt), the mlp resumed from train.ckpt, or the lstm on the text file. */
static int sc_train(void *arg, char *err) {
    const int which = *(const int *)arg;
    char ckpt[128], resumed[128], text[128];
    path_in(ckpt, sizeof ckpt, "train.ckpt");
    path_in(resumed, sizeof resumed, "resumed.ckpt");
    path_in(text, sizeof text, "text.txt");
    amp_train_config c = amp_train_default_config(which == 2 ? AMP_MODEL_LSTM : AMP_MODEL_MLP);
    c.data = which == 2 ? text : g_dir;
    c.model.hidden = 8;
    c.batch = 4;
    c.steps = which == 1 ? 3 : 2;
    c.threads = 1;
    c.checkpoint = which == 1 ? resumed : ckpt;
    c.resume = which == 1 ? ckpt : NULL;
    c.grad_stats_every = 1;
    if (which == 2) c.model.context = 8, c.model.embed = 4, c.eval_batches = 2, c.precision = AMP_PRECISION_AMP_BF16;
    amp_train_result r;
    return amp_train_run(&c, NULL, &r, err, ERR_SIZE);
}

/* ---- data files -------------------------------------------------------------------------------- */

static void be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static bool write_file(const char *name, const void *data, size_t n, bool gz) {
    char path[128];
    path_in(path, sizeof path, name);
    return test_write_file(path, data, n, gz);
}

/* 8 images of 4x4 with labels 0..3 (train plain, t10k gzipped) and a small text file. */
static bool write_data(void) {
    enum { N = 8, SIDE = 4 };
    uint8_t img[16 + N * SIDE * SIDE], lab[8 + N];
    be32(img, 0x803), be32(img + 4, N), be32(img + 8, SIDE), be32(img + 12, SIDE);
    be32(lab, 0x801), be32(lab + 4, N);
    for (int i = 0; i < N; i++) {
        lab[8 + i] = (uint8_t)(i % 4);
        for (int p = 0; p < SIDE * SIDE; p++) img[16 + i * SIDE * SIDE + p] = (uint8_t)(i * 31 + p * 7);
    }
    uint8_t fimg[16 + N * SIDE * SIDE * 4];
    be32(fimg, 0xD03), be32(fimg + 4, N), be32(fimg + 8, SIDE), be32(fimg + 12, SIDE);
    for (int i = 0; i < N * SIDE * SIDE; i++) be32(fimg + 16 + 4 * i, 0x3F000000u + (uint32_t)i); /* near 0.5 */
    char fdir[128];
    path_in(fdir, sizeof fdir, "float");
    if (mkdir(fdir, 0700) != 0) return false;
    char text[4096] = "";
    for (int i = 0; i < 40; i++) snprintf(text + strlen(text), sizeof text - strlen(text), "the lazy dog %d. ", i);
    return write_file("train-images-idx3-ubyte", img, sizeof img, false) &&
           write_file("train-labels-idx1-ubyte", lab, sizeof lab, false) &&
           write_file("t10k-images-idx3-ubyte.gz", img, sizeof img, true) &&
           write_file("t10k-labels-idx1-ubyte.gz", lab, sizeof lab, true) &&
           write_file("text.txt", text, strlen(text), false) &&
           write_file("float/train-images-idx3-ubyte", fimg, sizeof fimg, false) &&
           write_file("float/train-labels-idx1-ubyte", lab, sizeof lab, false);
}

static void remove_data(void) {
    static const char *const names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "text.txt",
                                        "t.safetensors", "ckpt.safetensors", "train.ckpt", "resumed.ckpt",
                                        "float/train-images-idx3-ubyte", "float/train-labels-idx1-ubyte", "float"};
    char path[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        path_in(path, sizeof path, names[i]);
        if (unlink(path) != 0) rmdir(path);
    }
    rmdir(g_dir);
}

/* ---- tests ------------------------------------------------------------------------------------- */

void test_alloc_hooks(void) {
    amp_heap_allocator got;
    amp_get_allocator(&got);
    CHECK(got.malloc_fn && got.realloc_fn && got.aligned_fn && got.free_fn);
    amp_heap_allocator half = tracking_heap;
    half.free_fn = NULL;
    CHECK_EQ_INT(amp_set_allocator(&half), AMP_ERR_INVALID_ARGUMENT);
    amp_heap_allocator still;
    amp_get_allocator(&still);
    CHECK(still.malloc_fn == got.malloc_fn); /* a refused set changes nothing */
    CHECK_EQ_INT(amp_set_allocator(&tracking_heap), AMP_OK);
    amp_get_allocator(&still);
    CHECK(still.malloc_fn == t_malloc);
    /* The hooks see a context's allocations, and every one is returned. */
    g_heap.fail_at = -1;
    g_heap.calls = 0;
    amp_ctx *ctx = NULL;
    CHECK_EQ_INT(amp_ctx_create(NULL, &ctx), AMP_OK);
    CHECK(g_heap.calls > 0 && g_heap.n_live > 0);
    amp_ctx_free(ctx);
    CHECK_EQ_INT(g_heap.n_live, 0);
    CHECK_EQ_INT(amp_set_allocator(NULL), AMP_OK);
    amp_get_allocator(&still);
    CHECK(still.malloc_fn == got.malloc_fn);
}

void test_alloc_failure_loops(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/amp_test_alloc_XXXXXX");
    if (!CHECK(mkdtemp(g_dir) != NULL)) return;
    if (!CHECK(write_data())) {
        remove_data();
        return;
    }
    const int threads = amp_get_num_threads();
    amp_set_num_threads(1); /* the GEMM's packing buffers are per thread: keep them on this one */
    fail_loop("context, parameters, arena", sc_ctx, NULL);
    for (int k = 0; k < AMP_MODEL_COUNT; k++) {
        char name[64];
        const amp_model_kind kind = (amp_model_kind)k;
        snprintf(name, sizeof name, "model %s", amp_model_kind_name(kind));
        fail_loop(name, sc_model, (void *)&kind);
    }
    const amp_optim_kind sgd = AMP_OPTIM_SGD, adam = AMP_OPTIM_ADAM;
    fail_loop("SGD optimizer, scaler", sc_optim_scaler, (void *)&sgd);
    fail_loop("Adam optimizer, scaler", sc_optim_scaler, (void *)&adam);
    fail_loop("safetensors write/open/read", sc_safetensors, NULL);
    fail_loop("checkpoint save/load", sc_checkpoint, NULL);
    fail_loop("IDX images (plain)", sc_images, NULL);
    fail_loop("IDX images (gzip)", sc_images_gz, NULL);
    fail_loop("IDX float32 images", sc_images_float, NULL);
    fail_loop("text corpus", sc_text, NULL);
    fail_loop("text corpus, words", sc_text_words, NULL);
    static const int mlp = 0, resume = 1, lstm = 2;
    fail_loop("amp_train_run (mlp, 2 steps, checkpoint)", sc_train, (void *)&mlp);
    fail_loop("amp_train_run (mlp, resumed)", sc_train, (void *)&resume);
    fail_loop("amp_train_run (lstm, amp-bf16, text)", sc_train, (void *)&lstm);
    amp_set_num_threads(threads);
    remove_data();
}
