/* Misuse: the mistakes a newcomer makes with amp as a library, each run in a child process. The
 * child reports what the misuse returned (a status and the message recorded in the context or the
 * scaler) and whether what must not change stayed as it was (weights after a refused step, gradients
 * after a refused backward); the parent checks that the child exited normally (never a signal), that
 * the status and a piece of the message are the expected ones, and that nothing changed. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "amp.h"
#include "harness.h"
#include "tests.h"

/* What a misuse case reports from the child. */
typedef struct outcome {
    int status;         /* what the misuse returned */
    char message[512];  /* the error it recorded */
    int intact;         /* 1 while what must not change has not */
    char note[256];     /* what changed, or which check in the child failed */
} outcome;

typedef void (*misuse_fn)(outcome *o);

/* The first failed condition in a child: noted, and the outcome is no longer intact. */
#define REQUIRE(o, cond)                                                                      \
    do {                                                                                      \
        if (!(cond) && (o)->intact) {                                                         \
            (o)->intact = 0;                                                                  \
            snprintf((o)->note, sizeof (o)->note, "line %d: %s is false", __LINE__, #cond); \
        }                                                                                     \
    } while (0)

static void take(outcome *o, int status, const char *message) {
    o->status = status;
    snprintf(o->message, sizeof o->message, "%s", message ? message : "");
}
static void take_ctx(outcome *o, int status, const amp_ctx *ctx) { take(o, status, amp_ctx_error(ctx)); }

/* Runs fn in a child process and reads its outcome; false (a failed check) when the child did not
 * exit normally or sent nothing. */
static bool run_child(const char *name, misuse_fn fn, outcome *o) {
    memset(o, 0, sizeof *o);
    int fd[2];
    if (!CHECK(pipe(fd) == 0)) return false;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        outcome r;
        memset(&r, 0, sizeof r);
        r.intact = 1;
        fn(&r);
        const ssize_t w = write(fd[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 3);
    }
    close(fd[1]);
    size_t got = 0;
    while (pid > 0 && got < sizeof *o) {
        const ssize_t n = read(fd[0], (char *)o + got, sizeof *o - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd[0]);
    int st = 0;
    if (!CHECK(pid > 0) || !CHECK(waitpid(pid, &st, 0) == pid)) return false;
    if (!CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the child %s %d", name,
                   WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
                   WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st)))
        return false;
    return CHECK_MSG(got == sizeof *o, "%s: the child sent %zu of %zu bytes", name, got, sizeof *o);
}

/* One case: the status, a piece of the message, nothing changed. */
static void expect(const char *name, misuse_fn fn, int want_status, const char *want_text) {
    outcome o;
    if (!run_child(name, fn, &o)) return;
    CHECK_MSG(o.status == want_status, "%s: status %d (%s), want %d (%s); message \"%s\"", name, o.status,
              amp_status_str(o.status), want_status, amp_status_str(want_status), o.message);
    CHECK_MSG(strstr(o.message, want_text) != NULL, "%s: message \"%s\" does not say \"%s\"", name, o.message,
              want_text);
    CHECK_MSG(o.intact, "%s: %s", name, o.note);
}

/* ---- a small model: 8 -> 16 -> LayerNorm -> GELU -> 4, fp32 parameters ---- */

enum { B = 6, IN = 8, HID = 16, OUT = 4 };

typedef struct net {
    amp_ctx *ctx;
    amp_tensor *w1, *b1, *g, *be, *w2;
    amp_optimizer *opt;
    amp_scaler *scaler;
} net;

static void net_declare(net *n) {
    memset(n, 0, sizeof *n);
    amp_ctx_create(NULL, &n->ctx);
    n->w1 = amp_param_new(n->ctx, "fc1.weight", AMP_F32, 2, (const int64_t[]){HID, IN});
    n->b1 = amp_param_new(n->ctx, "fc1.bias", AMP_F32, 1, (const int64_t[]){HID});
    n->g = amp_param_new(n->ctx, "ln.weight", AMP_F32, 1, (const int64_t[]){HID});
    n->be = amp_param_new(n->ctx, "ln.bias", AMP_F32, 1, (const int64_t[]){HID});
    n->w2 = amp_param_new(n->ctx, "fc2.weight", AMP_F32, 2, (const int64_t[]){OUT, HID});
}

/* Declared, allocated and filled, with an AdamW optimizer and a dynamic scaler. */
static void net_make(net *n) {
    net_declare(n);
    amp_ctx_alloc_params(n->ctx);
    for (size_t i = 0; i < amp_ctx_num_params(n->ctx); i++) {
        amp_tensor *p = amp_ctx_param(n->ctx, i);
        for (int64_t k = 0; k < amp_tensor_numel(p); k++)
            ((float *)p->data)[k] = 0.05f * (float)((k * 7 + (int64_t)i * 3) % 11) - 0.25f;
    }
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_ADAMW);
    amp_optimizer_create(n->ctx, &oc, &n->opt);
    amp_scaler_create(NULL, &n->scaler);
}

static void net_free(net *n) {
    amp_scaler_free(n->scaler);
    amp_optimizer_free(n->opt);
    amp_ctx_free(n->ctx);
}

static amp_tensor *net_input(amp_ctx *ctx) {
    float x[B * IN];
    for (int i = 0; i < B * IN; i++) x[i] = (float)((i * 5) % 13) / 13.0f - 0.4f;
    return amp_tensor_from(ctx, AMP_F32, 2, (const int64_t[]){B, IN}, x, AMP_F32);
}

static const int32_t targets[B] = {0, 1, 2, 3, 1, 2};

static amp_tensor *net_loss(net *n, amp_tensor *x) {
    amp_tensor *h = amp_linear(n->ctx, x, n->w1, n->b1);
    h = amp_gelu(n->ctx, amp_layer_norm(n->ctx, h, n->g, n->be, 1e-5f));
    return amp_cross_entropy(n->ctx, amp_linear(n->ctx, h, n->w2, NULL), targets);
}

/* A copy of the parameter (or gradient) buffer, to compare bit for bit. */
static unsigned char *snapshot(net *n, bool grads) {
    size_t bytes = 0;
    const void *src = grads ? amp_ctx_grad_memory(n->ctx, &bytes) : amp_ctx_param_memory(n->ctx, &bytes);
    unsigned char *copy = malloc(bytes ? bytes : 1);
    if (copy) memcpy(copy, src, bytes);
    return copy;
}
static bool same_as(net *n, bool grads, const unsigned char *copy) {
    size_t bytes = 0;
    const void *now = grads ? amp_ctx_grad_memory(n->ctx, &bytes) : amp_ctx_param_memory(n->ctx, &bytes);
    return copy && memcmp(now, copy, bytes) == 0;
}

/* ---- stale tensors ---- */

/* The case: a tensor made before amp_ctx_reset, one new tensor after it, then an op with the
 * old one and a backward. */
static void stale_input(outcome *o) {
    net n;
    net_make(&n);
    amp_tensor *x = net_input(n.ctx);
    amp_ctx_reset(n.ctx);
    amp_tensor *y = net_input(n.ctx);
    REQUIRE(o, y != NULL);
    amp_tensor *h = amp_linear(n.ctx, x, n.w1, n.b1);
    take_ctx(o, amp_ctx_status(n.ctx), n.ctx);
    REQUIRE(o, h == NULL);
    REQUIRE(o, amp_backward(n.ctx, h, NULL) == AMP_ERR_STATE); /* the op's error, again */
    REQUIRE(o, amp_ctx_reset(n.ctx) == AMP_OK && amp_linear(n.ctx, net_input(n.ctx), n.w1, n.b1) != NULL);
    net_free(&n);
}

/* The same under autocast, with the stale tensor an op's result (it has a node on the old tape). */
static void stale_result(outcome *o) {
    net n;
    net_make(&n);
    amp_autocast_enter(AMP_F16);
    amp_tensor *h = amp_gelu(n.ctx, amp_linear(n.ctx, net_input(n.ctx), n.w1, n.b1));
    amp_autocast_exit();
    amp_ctx_reset(n.ctx);
    amp_zero_grad(n.ctx);
    unsigned char *g0 = snapshot(&n, true);
    amp_autocast_enter(AMP_F16);
    amp_tensor *logits = amp_linear(n.ctx, h, n.w2, NULL);
    amp_tensor *loss = amp_cross_entropy(n.ctx, logits, targets);
    amp_autocast_exit();
    take_ctx(o, amp_ctx_status(n.ctx), n.ctx);
    REQUIRE(o, logits == NULL && loss == NULL);
    REQUIRE(o, amp_backward(n.ctx, loss, NULL) != AMP_OK);
    REQUIRE(o, same_as(&n, true, g0));
    free(g0);
    net_free(&n);
}

/* A loss kept from the last step, backpropagated after the reset. */
static void stale_loss(outcome *o) {
    net n;
    net_make(&n);
    amp_tensor *loss = net_loss(&n, net_input(n.ctx));
    amp_ctx_reset(n.ctx);
    amp_zero_grad(n.ctx);
    amp_tensor *other = net_loss(&n, net_input(n.ctx)); /* this step's tape and tensors */
    REQUIRE(o, other != NULL);
    take_ctx(o, amp_backward(n.ctx, loss, NULL), n.ctx);
    net_free(&n);
}

/* Random layouts of the stale case (the fuzzing that found the crash): tensors before the
 * stale one, its kind (input, input that requires grad, op result under autocast), tensors made
 * after the reset, autocast on the use or not. Every one must be refused with the stale message. */
static void stale_layouts(outcome *o) {
    static float data[64 * 64];
    for (int i = 0; i < 64 * 64; i++) data[i] = (float)(i % 17) / 17.0f - 0.4f;
    int refused = 0;
    for (unsigned seed = 0; seed < 48; seed++) {
        srand(seed);
        net n;
        net_make(&n);
        for (int i = rand() % 3; i > 0; i--)
            amp_tensor_from(n.ctx, AMP_F32, 1, (const int64_t[]){1 + rand() % 200}, data, AMP_F32);
        amp_tensor *x = amp_tensor_from(n.ctx, AMP_F32, 2, (const int64_t[]){B, IN}, data, AMP_F32);
        const int kind = rand() % 3;
        if (kind == 1) amp_tensor_set_requires_grad(x, true);
        if (kind == 2) {
            amp_autocast_enter(AMP_F16);
            x = amp_linear(n.ctx, amp_gelu(n.ctx, amp_linear(n.ctx, x, n.w1, n.b1)), amp_transpose(n.ctx, n.w1, 0, 1),
                           NULL);
            amp_autocast_exit();
        }
        amp_ctx_reset(n.ctx);
        amp_zero_grad(n.ctx);
        for (int i = 1 + rand() % 2; i > 0; i--)
            amp_tensor_from(n.ctx, AMP_F32, 2, (const int64_t[]){1 + rand() % 64, 1 + rand() % 64}, data, AMP_F32);
        const bool ac = rand() % 2;
        if (ac) amp_autocast_enter(AMP_F16);
        amp_tensor *loss = net_loss(&n, x);
        if (ac) amp_autocast_exit();
        const int st = amp_backward(n.ctx, loss, NULL);
        if (loss == NULL && st == AMP_ERR_STATE && strstr(amp_ctx_error(n.ctx), "before the last amp_ctx_reset"))
            refused++;
        else if (o->intact)
            snprintf(o->message, sizeof o->message, "seed %u: status %d, %s", seed, st, amp_ctx_error(n.ctx));
        net_free(&n);
    }
    if (refused == 48) take(o, AMP_ERR_STATE, "all 48 refused as stale");
    else o->status = AMP_OK;
}

/* A tensor from two steps back whose header no tensor of this step has taken: still refused. */
static void stale_two_steps(outcome *o) {
    net n;
    net_make(&n);
    amp_tensor *x = net_input(n.ctx);
    amp_ctx_reset(n.ctx);
    amp_ctx_reset(n.ctx);
    amp_tensor *h = amp_relu(n.ctx, x);
    take_ctx(o, amp_ctx_status(n.ctx), n.ctx);
    REQUIRE(o, h == NULL);
    net_free(&n);
}

/* Parameters and buffers outlive every reset. */
static void params_survive_reset(outcome *o) {
    net n;
    net_make(&n);
    amp_ctx_reset(n.ctx);
    amp_ctx_reset(n.ctx);
    amp_tensor *loss = net_loss(&n, net_input(n.ctx));
    take(o, amp_backward(n.ctx, loss, NULL), "parameters were accepted after two resets");
    net_free(&n);
}

/* ---- one backward per graph ---- */

static void backward_twice(outcome *o) {
    net n;
    net_make(&n);
    amp_zero_grad(n.ctx);
    amp_tensor *loss = net_loss(&n, net_input(n.ctx));
    REQUIRE(o, amp_backward(n.ctx, loss, NULL) == AMP_OK);
    unsigned char *g = snapshot(&n, true);
    take_ctx(o, amp_backward(n.ctx, loss, NULL), n.ctx);
    REQUIRE(o, same_as(&n, true, g));
    free(g);
    net_free(&n);
}

/* The same through the scaler (its backward is amp_backward_scaled). */
static void scaler_backward_twice(outcome *o) {
    net n;
    net_make(&n);
    amp_zero_grad(n.ctx);
    amp_autocast_enter(AMP_F16);
    amp_tensor *loss = net_loss(&n, net_input(n.ctx));
    amp_autocast_exit();
    REQUIRE(o, amp_scaler_backward(n.scaler, n.ctx, loss) == AMP_OK);
    unsigned char *g = snapshot(&n, true);
    take_ctx(o, amp_scaler_backward(n.scaler, n.ctx, loss), n.ctx);
    REQUIRE(o, same_as(&n, true, g));
    free(g);
    net_free(&n);
}

/* A second loss through the first one's hidden layer: its nodes went once already. */
static void backward_shared_trunk(outcome *o) {
    net n;
    net_make(&n);
    amp_zero_grad(n.ctx);
    amp_tensor *h = amp_gelu(n.ctx, amp_linear(n.ctx, net_input(n.ctx), n.w1, n.b1));
    amp_tensor *l1 = amp_mean_all(n.ctx, amp_mul(n.ctx, h, h));
    amp_tensor *l2 = amp_cross_entropy(n.ctx, amp_linear(n.ctx, h, n.w2, NULL), targets);
    REQUIRE(o, amp_backward(n.ctx, l1, NULL) == AMP_OK);
    unsigned char *g = snapshot(&n, true);
    take_ctx(o, amp_backward(n.ctx, l2, NULL), n.ctx);
    REQUIRE(o, same_as(&n, true, g));
    free(g);
    net_free(&n);
}

/* What stays allowed: the same two losses with the graph retained, and two losses sharing only the
 * cast weights of one autocast region (PyTorch keeps nothing for a cast either). */
static void backward_allowed(outcome *o) {
    net n;
    net_make(&n);
    amp_zero_grad(n.ctx);
    amp_tensor *h = amp_gelu(n.ctx, amp_linear(n.ctx, net_input(n.ctx), n.w1, n.b1));
    amp_tensor *l1 = amp_mean_all(n.ctx, amp_mul(n.ctx, h, h));
    amp_tensor *l2 = amp_cross_entropy(n.ctx, amp_linear(n.ctx, h, n.w2, NULL), targets);
    amp_set_retain_graph(n.ctx, true);
    REQUIRE(o, amp_backward(n.ctx, l1, NULL) == AMP_OK);
    amp_set_retain_graph(n.ctx, false);
    REQUIRE(o, amp_backward(n.ctx, l2, NULL) == AMP_OK);
    amp_ctx_reset(n.ctx);
    amp_zero_grad(n.ctx);
    amp_autocast_enter(AMP_F16);
    amp_tensor *a = net_loss(&n, net_input(n.ctx));
    amp_tensor *b = net_loss(&n, amp_scale(n.ctx, net_input(n.ctx), 0.5f));
    amp_autocast_exit();
    REQUIRE(o, amp_backward(n.ctx, a, NULL) == AMP_OK);
    take_ctx(o, amp_backward(n.ctx, b, NULL), n.ctx);
    net_free(&n);
}

/* ---- the scaler ---- */

/* amp_scaler_step after amp_zero_grad with no backward: PyTorch's "No inf checks", weights as they
 * were, the optimizer not stepped. */
static void step_without_backward(outcome *o) {
    net n;
    net_make(&n);
    amp_zero_grad(n.ctx);
    amp_tensor *loss = net_loss(&n, net_input(n.ctx));
    amp_scaler_backward(n.scaler, n.ctx, loss);
    amp_scaler_step(n.scaler, n.opt, NULL);
    amp_scaler_update(n.scaler);
    amp_ctx_reset(n.ctx);
    amp_zero_grad(n.ctx); /* ... and no backward this time */
    unsigned char *w = snapshot(&n, false);
    const int64_t steps = amp_optimizer_step_count(n.opt);
    take(o, amp_scaler_step(n.scaler, n.opt, NULL), amp_scaler_error(n.scaler));
    REQUIRE(o, same_as(&n, false, w));
    REQUIRE(o, amp_optimizer_step_count(n.opt) == steps);
    free(w);
    net_free(&n);
}

/* The fused step refuses the same (its flat pass would decay the weights as if the gradients were
 * zeros). */
static void step_fused_without_backward(outcome *o) {
    net n;
    net_make(&n);
    amp_scaler_scale(n.scaler);
    amp_zero_grad(n.ctx);
    unsigned char *w = snapshot(&n, false);
    take(o, amp_scaler_step_fused(n.scaler, n.opt, 0.0f, NULL), amp_scaler_error(n.scaler));
    REQUIRE(o, same_as(&n, false, w));
    REQUIRE(o, amp_optimizer_step_count(n.opt) == 0);
    free(w);
    net_free(&n);
}

/* The scaler's errors name amp's function, then PyTorch's words. */
static void scaler_before_backward(outcome *o) {
    net n;
    net_make(&n);
    take(o, amp_scaler_step(n.scaler, n.opt, NULL), amp_scaler_error(n.scaler));
    net_free(&n);
}

static void scaler_unscale_twice(outcome *o) {
    net n;
    net_make(&n);
    amp_zero_grad(n.ctx);
    amp_scaler_backward(n.scaler, n.ctx, net_loss(&n, net_input(n.ctx)));
    REQUIRE(o, amp_scaler_unscale(n.scaler, n.opt) == AMP_OK);
    unsigned char *g = snapshot(&n, true);
    take(o, amp_scaler_unscale(n.scaler, n.opt), amp_scaler_error(n.scaler));
    REQUIRE(o, same_as(&n, true, g)); /* not unscaled twice */
    free(g);
    net_free(&n);
}

/* ---- autocast ---- */

/* A region entered every step and never exited: the next step's reset refuses, and so does every
 * op after it; the fp32 evaluation that would have run in fp16 runs nothing. */
static void autocast_never_exited(outcome *o) {
    net n;
    net_make(&n);
    amp_ctx_reset(n.ctx);
    amp_zero_grad(n.ctx);
    amp_autocast_enter(AMP_F16);
    amp_tensor *loss = net_loss(&n, net_input(n.ctx));
    REQUIRE(o, amp_scaler_backward(n.scaler, n.ctx, loss) == AMP_OK); /* backward inside: allowed */
    REQUIRE(o, amp_scaler_step(n.scaler, n.opt, NULL) == AMP_OK);
    amp_scaler_update(n.scaler);
    const int st = amp_ctx_reset(n.ctx); /* the next step, the region still open */
    take_ctx(o, st, n.ctx);
    REQUIRE(o, amp_autocast_depth() == 1);
    REQUIRE(o, amp_linear(n.ctx, net_input(n.ctx), n.w1, n.b1) == NULL);
    REQUIRE(o, amp_ctx_status(n.ctx) == AMP_ERR_STATE);
    amp_autocast_exit();
    REQUIRE(o, amp_ctx_reset(n.ctx) == AMP_OK);
    amp_tensor *y = amp_linear(n.ctx, net_input(n.ctx), n.w1, n.b1);
    REQUIRE(o, y && y->dtype == AMP_F32);
    net_free(&n);
}

/* amp_autocast_enter(AMP_F32): a disabled region, so one code path serves every precision. */
static void autocast_f32_region(outcome *o) {
    net n;
    net_make(&n);
    const int st = amp_autocast_enter(AMP_F32);
    amp_tensor *y = amp_linear(n.ctx, net_input(n.ctx), n.w1, n.b1);
    REQUIRE(o, y && y->dtype == AMP_F32 && y->compute_dtype == AMP_F32);
    REQUIRE(o, !amp_autocast_enabled() && amp_autocast_depth() == 1);
    REQUIRE(o, amp_autocast_exit() == AMP_OK && amp_autocast_depth() == 0);
    take(o, st, "entered");
    REQUIRE(o, amp_autocast_enter(AMP_F8E4M3) == AMP_ERR_UNSUPPORTED_DTYPE && amp_autocast_depth() == 0);
    REQUIRE(o, amp_autocast_exit() == AMP_ERR_INVALID_ARGUMENT);
    net_free(&n);
}

/* ---- element access ---- */

static void get_out_of_range(outcome *o) {
    net n;
    net_make(&n);
    amp_tensor *x = net_input(n.ctx);
    float v = 0.0f;
    REQUIRE(o, isnan(amp_tensor_get(x, B * IN)) && isnan(amp_tensor_get(x, -1)));
    REQUIRE(o, amp_tensor_get(x, 1) == amp_tensor_get(amp_transpose(n.ctx, x, 0, 1), B));
    REQUIRE(o, amp_tensor_get_checked(x, 3, &v) == AMP_OK && v == amp_tensor_get(x, 3));
    REQUIRE(o, amp_tensor_get_checked(NULL, 0, &v) == AMP_ERR_NULL_POINTER && isnan(v));
    REQUIRE(o, isnan(amp_tensor_get(NULL, 0)));
    const int st = amp_tensor_get_checked(x, B * IN, &v);
    take(o, st, isnan(v) ? "NaN" : "a number");
    net_free(&n);
}

/* A parameter read before amp_ctx_alloc_params: NaN, no crash. */
static void get_unallocated(outcome *o) {
    net n;
    net_declare(&n);
    float v = 0.0f;
    REQUIRE(o, isnan(amp_tensor_get(n.w1, 0)));
    const int st = amp_tensor_get_checked(n.w1, 0, &v);
    take(o, st, isnan(v) ? "NaN" : "a number");
    amp_ctx_free(n.ctx);
}

/* ---- errors and steps ---- */

/* One failed op: later ops of the step keep its message; the next step starts clean. */
static void error_ends_with_step(outcome *o) {
    net n;
    net_make(&n);
    amp_tensor *x = net_input(n.ctx);
    REQUIRE(o, amp_linear(n.ctx, x, n.w2, NULL) == NULL); /* [6, 8] against [4, 16] */
    char first[256];
    snprintf(first, sizeof first, "%s", amp_ctx_error(n.ctx));
    REQUIRE(o, amp_relu(n.ctx, x) == NULL && strcmp(amp_ctx_error(n.ctx), first) == 0);
    REQUIRE(o, amp_ctx_reset(n.ctx) == AMP_OK && amp_ctx_status(n.ctx) == AMP_OK);
    REQUIRE(o, amp_relu(n.ctx, net_input(n.ctx)) != NULL);
    take(o, AMP_ERR_INVALID_ARGUMENT, first);
    net_free(&n);
}

/* ---- parameters ---- */

static void unallocated_parameter(outcome *o) {
    net n;
    net_declare(&n);
    amp_tensor *y = amp_linear(n.ctx, net_input(n.ctx), n.w1, n.b1);
    take_ctx(o, amp_ctx_status(n.ctx), n.ctx);
    REQUIRE(o, y == NULL);
    amp_ctx_free(n.ctx);
}

static void declared_after_alloc(outcome *o) {
    net n;
    net_make(&n);
    amp_tensor *late = amp_param_new(n.ctx, "fc3.weight", AMP_F32, 2, (const int64_t[]){2, 2});
    take_ctx(o, amp_ctx_status(n.ctx), n.ctx);
    REQUIRE(o, late == NULL);
    net_free(&n);
}

static void alloc_twice(outcome *o) {
    net n;
    net_make(&n);
    take_ctx(o, amp_ctx_alloc_params(n.ctx), n.ctx);
    net_free(&n);
}

static void optimizer_before_alloc(outcome *o) {
    net n;
    net_declare(&n);
    amp_optim_config oc = amp_optim_default_config(AMP_OPTIM_ADAMW);
    amp_optimizer *opt = NULL;
    take_ctx(o, amp_optimizer_create(n.ctx, &oc, &opt), n.ctx);
    REQUIRE(o, opt == NULL);
    amp_ctx_free(n.ctx);
}

/* ---- shapes, NULLs ---- */

static void shape_mismatch(outcome *o) {
    net n;
    net_make(&n);
    REQUIRE(o, amp_linear(n.ctx, net_input(n.ctx), n.w2, NULL) == NULL);
    take_ctx(o, amp_ctx_status(n.ctx), n.ctx);
    net_free(&n);
}

static void bad_dimension(outcome *o) {
    net n;
    net_make(&n);
    REQUIRE(o, amp_tensor_new(n.ctx, AMP_F32, 2, (const int64_t[]){3, -1}) == NULL);
    take_ctx(o, amp_ctx_status(n.ctx), n.ctx);
    net_free(&n);
}

static void target_out_of_range(outcome *o) {
    net n;
    net_make(&n);
    const int32_t bad[B] = {0, 1, 2, 3, 4, 0};
    amp_tensor *logits = amp_linear(n.ctx, amp_layer_norm(n.ctx, amp_linear(n.ctx, net_input(n.ctx), n.w1, n.b1),
                                                           n.g, n.be, 1e-5f),
                                    n.w2, NULL);
    REQUIRE(o, amp_cross_entropy(n.ctx, logits, bad) == NULL);
    take_ctx(o, amp_ctx_status(n.ctx), n.ctx);
    net_free(&n);
}

/* A NULL context anywhere: a status, never a dereference. */
static void null_context(outcome *o) {
    amp_tensor *t = NULL;
    REQUIRE(o, amp_ctx_reset(NULL) == AMP_ERR_NULL_POINTER);
    amp_ctx_clear_error(NULL);
    amp_zero_grad(NULL);
    REQUIRE(o, amp_ctx_alloc_params(NULL) == AMP_ERR_NULL_POINTER);
    REQUIRE(o, amp_param_new(NULL, "w", AMP_F32, 1, (const int64_t[]){2}) == NULL);
    REQUIRE(o, amp_tensor_new(NULL, AMP_F32, 1, (const int64_t[]){2}) == NULL);
    REQUIRE(o, amp_relu(NULL, t) == NULL && amp_linear(NULL, t, t, NULL) == NULL);
    REQUIRE(o, amp_backward(NULL, t, NULL) == AMP_ERR_NULL_POINTER);
    REQUIRE(o, !amp_set_grad_enabled(NULL, true) && !amp_grad_enabled(NULL) && !amp_set_retain_graph(NULL, true));
    size_t bytes = 1;
    REQUIRE(o, amp_ctx_param_memory(NULL, &bytes) == NULL && bytes == 0);
    REQUIRE(o, amp_ctx_grad_memory(NULL, &bytes) == NULL && amp_ctx_num_params(NULL) == 0);
    REQUIRE(o, amp_ctx_arena_used(NULL) == 0 && amp_ctx_heap_allocations(NULL) == 0);
    REQUIRE(o, amp_ctx_status(NULL) == AMP_ERR_NULL_POINTER);
    REQUIRE(o, amp_scaler_backward(NULL, NULL, NULL) == AMP_ERR_NULL_POINTER);
    take(o, amp_ctx_status(NULL), amp_ctx_error(NULL));
}

/* A NULL input (a failed op's result passed on): the op returns NULL, the first error stays. */
static void null_input(outcome *o) {
    net n;
    net_make(&n);
    REQUIRE(o, amp_relu(n.ctx, NULL) == NULL);
    take_ctx(o, amp_ctx_status(n.ctx), n.ctx);
    REQUIRE(o, amp_backward(n.ctx, NULL, NULL) == AMP_ERR_NULL_POINTER);
    net_free(&n);
}

void test_misuse_lifetime(void) {
    expect("stale input", stale_input, AMP_ERR_STATE,
           "linear: an input (a [6, 8] f32 tensor) was made before the last amp_ctx_reset and is no longer valid");
    expect("stale op result", stale_result, AMP_ERR_STATE, "the [6, 16] f16 result of gelu) was made before");
    expect("stale loss", stale_loss, AMP_ERR_STATE, "amp_backward: the loss (the [] f32 result of cross_entropy)");
    expect("stale layouts", stale_layouts, AMP_ERR_STATE, "all 48 refused");
    expect("stale two steps", stale_two_steps, AMP_ERR_STATE, "relu: an input (a [6, 8] f32 tensor) was made before");
    expect("parameters survive reset", params_survive_reset, AMP_OK, "accepted");
    expect("parameter before alloc", unallocated_parameter, AMP_ERR_STATE,
           "linear: parameter 'fc1.weight' ([16, 8] f32) has no storage: call amp_ctx_alloc_params");
    expect("parameter declared after alloc", declared_after_alloc, AMP_ERR_INVALID_ARGUMENT,
           "amp_param_new: 'fc3.weight' is declared after amp_ctx_alloc_params");
    expect("alloc twice", alloc_twice, AMP_ERR_INVALID_ARGUMENT, "amp_ctx_alloc_params: the parameters are already");
    expect("optimizer before alloc", optimizer_before_alloc, AMP_ERR_INVALID_ARGUMENT,
           "amp_optimizer_create: the parameters have no storage yet: call amp_ctx_alloc_params");
}

void test_misuse_backward(void) {
    expect("backward twice", backward_twice, AMP_ERR_STATE,
           "amp_backward: Trying to backward through the graph a second time: its cross_entropy node");
    expect("scaler backward twice", scaler_backward_twice, AMP_ERR_STATE,
           "amp_backward_scaled: Trying to backward through the graph a second time");
    expect("backward through a shared trunk", backward_shared_trunk, AMP_ERR_STATE, "its gelu node already ran");
    expect("retained graph, shared casts", backward_allowed, AMP_OK, "");
}

void test_misuse_scaler(void) {
    expect("scaler step without backward", step_without_backward, AMP_ERR_STATE,
           "amp_scaler_step: No inf checks were recorded for this optimizer.");
    expect("scaler fused step without backward", step_fused_without_backward, AMP_ERR_STATE,
           "amp_scaler_step_fused: No inf checks were recorded for this optimizer.");
    expect("scaler step before backward", scaler_before_backward, AMP_ERR_STATE,
           "amp_scaler_step: Attempted step but _scale is None.  This may indicate your script did not use "
           "amp_scaler_backward");
    expect("scaler unscale twice", scaler_unscale_twice, AMP_ERR_STATE,
           "amp_scaler_unscale: unscale_() has already been called on this optimizer since the last update().");
}

void test_misuse_state(void) {
    expect("autocast never exited", autocast_never_exited, AMP_ERR_STATE,
           "amp_ctx_reset: 1 autocast region is still open in this thread");
    expect("autocast f32 region", autocast_f32_region, AMP_OK, "entered");
    expect("get out of range", get_out_of_range, AMP_ERR_INVALID_ARGUMENT, "NaN");
    expect("get before alloc", get_unallocated, AMP_ERR_NULL_POINTER, "NaN");
    expect("error ends with its step", error_ends_with_step, AMP_ERR_INVALID_ARGUMENT,
           "linear: input [6, 8] does not match weight [4, 16]");
    expect("shape mismatch", shape_mismatch, AMP_ERR_INVALID_ARGUMENT, "linear: input [6, 8] does not match weight");
    expect("bad dimension", bad_dimension, AMP_ERR_INVALID_ARGUMENT, "bad tensor dimension -1");
    expect("target out of range", target_out_of_range, AMP_ERR_INVALID_ARGUMENT, "cross_entropy: target 4");
    expect("null context", null_context, AMP_ERR_NULL_POINTER, "null context");
    expect("null input", null_input, AMP_ERR_NULL_POINTER, "relu: an input is NULL");
}
