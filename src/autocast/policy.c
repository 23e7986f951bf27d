/* The autocast policy tables: PyTorch's CUDA and CPU lists restricted to amp's ops, and amp's
 * process-wide active table. Source: PyTorch's aten/src/ATen/autocast_mode.{h,cpp} (the lists of
 * ops per cast policy, CUDA and CPU). */
#include <stdatomic.h>

#include "amp/autocast.h"
#include "amp/status.h"

#define L AMP_POLICY_LOWER
#define F AMP_POLICY_FP32
#define P AMP_POLICY_PROMOTE
#define N AMP_POLICY_NONE

/* PyTorch's CUDA lists. sum/softmax/log_softmax are "fp32_set_opt_dtype" there (computed in fp32
 * with an fp32 result, inputs not cast), which for amp's ops (that compute in fp32 anyway and cast
 * exactly) is the same as FP32. add/sub/mul/div/cat are unlisted: they follow native type promotion. */
static const amp_cast_policy cuda_table[AMP_OP_COUNT] = {
    [AMP_OP_MATMUL] = L,      [AMP_OP_LINEAR] = L,      [AMP_OP_CONV2D] = L,    [AMP_OP_LSTM_CELL] = L,
    [AMP_OP_ATTENTION] = L,   [AMP_OP_POW] = F,         [AMP_OP_EXP] = F,       [AMP_OP_LOG] = F,
    [AMP_OP_SUM] = F,         [AMP_OP_SOFTMAX] = F,     [AMP_OP_LOG_SOFTMAX] = F, [AMP_OP_LAYER_NORM] = F,
    [AMP_OP_CROSS_ENTROPY] = F, [AMP_OP_MSE_LOSS] = F,
};

/* PyTorch's CPU lists: only GEMM-like ops go low, losses go fp32, cat promotes; pow/exp/log/sum/
 * softmax/layer_norm are unlisted (they run in their inputs' dtype); lstm_cell is unlisted (CPU lists
 * mkldnn_rnn_layer, the fused nn.LSTM, instead). */
static const amp_cast_policy cpu_table[AMP_OP_COUNT] = {
    [AMP_OP_MATMUL] = L,  [AMP_OP_LINEAR] = L,        [AMP_OP_CONV2D] = L,     [AMP_OP_ATTENTION] = L,
    [AMP_OP_CROSS_ENTROPY] = F, [AMP_OP_MSE_LOSS] = F, [AMP_OP_CONCAT] = P,
};

/* amp's default: the CUDA table, plus mean in fp32 (a mean is a sum), plus PROMOTE named explicitly
 * for the multi-input elementwise ops (the same result as native promotion, but visible in the table
 * and changeable). */
static amp_cast_policy default_policy(amp_op op) {
    switch (op) {
    case AMP_OP_MEAN: return F;
    case AMP_OP_ADD: case AMP_OP_SUB: case AMP_OP_MUL: case AMP_OP_DIV: case AMP_OP_CONCAT: return P;
    default: return cuda_table[op];
    }
}

static _Atomic int active[AMP_OP_COUNT];
static atomic_int initialized;

static void ensure_init(void) {
    if (atomic_load_explicit(&initialized, memory_order_acquire)) return;
    for (int op = 0; op < AMP_OP_COUNT; op++) atomic_store(&active[op], (int)default_policy((amp_op)op));
    atomic_store_explicit(&initialized, 1, memory_order_release);
}

amp_cast_policy amp_autocast_get_policy(amp_op op) {
    if ((unsigned)op >= AMP_OP_COUNT) return AMP_POLICY_NONE;
    ensure_init();
    return (amp_cast_policy)atomic_load_explicit(&active[op], memory_order_relaxed);
}

/* Casts and views are how autocast itself works (and what views share): they always run as given. */
static bool fixed_policy(amp_op op) {
    return op == AMP_OP_NONE || op == AMP_OP_CAST || op == AMP_OP_CONTIGUOUS || op == AMP_OP_RESHAPE ||
           op == AMP_OP_TRANSPOSE;
}

int amp_autocast_set_policy(amp_op op, amp_cast_policy policy) {
    if ((unsigned)op >= AMP_OP_COUNT || (unsigned)policy >= AMP_POLICY_COUNT) return AMP_ERR_INVALID_ARGUMENT;
    if (fixed_policy(op) && policy != AMP_POLICY_NONE) return AMP_ERR_INVALID_ARGUMENT;
    ensure_init();
    atomic_store(&active[op], (int)policy);
    return AMP_OK;
}

int amp_autocast_load_policy_table(amp_policy_table table) {
    if (table != AMP_POLICY_TABLE_CUDA && table != AMP_POLICY_TABLE_CPU) return AMP_ERR_INVALID_ARGUMENT;
    ensure_init();
    for (int op = 0; op < AMP_OP_COUNT; op++)
        atomic_store(&active[op], (int)(table == AMP_POLICY_TABLE_CPU ? cpu_table[op] : default_policy((amp_op)op)));
    return AMP_OK;
}

amp_cast_policy amp_autocast_pytorch_policy(amp_policy_table table, amp_op op) {
    if ((unsigned)op >= AMP_OP_COUNT) return AMP_POLICY_NONE;
    return table == AMP_POLICY_TABLE_CPU ? cpu_table[op] : cuda_table[op];
}

const char *amp_autocast_policy_note(amp_op op) {
    switch (op) {
    case AMP_OP_MEAN:
        return "PyTorch leaves mean unlisted (fp16 in, fp16 out); amp computes it in fp32 like sum";
    case AMP_OP_ADD: case AMP_OP_SUB: case AMP_OP_MUL: case AMP_OP_DIV: case AMP_OP_CONCAT:
        return "PyTorch: native type promotion (the same result; cat is listed as promote on CPU); f16 with "
               "bf16 gives f32";
    case AMP_OP_SUM: case AMP_OP_SOFTMAX: case AMP_OP_LOG_SOFTMAX:
        return "PyTorch CUDA: fp32_set_opt_dtype (fp32 result without casting the input): the same values";
    case AMP_OP_BATCH_NORM:
        return "unlisted in PyTorch; amp's batch_norm keeps its statistics in fp32 whatever the input dtype";
    case AMP_OP_LSTM_CELL:
        return "PyTorch CPU lists mkldnn_rnn_layer (nn.LSTM) instead of lstm_cell";
    default: return "";
    }
}

const char *amp_cast_policy_name(amp_cast_policy policy) {
    switch (policy) {
    case AMP_POLICY_NONE: return "none";
    case AMP_POLICY_LOWER: return "lower";
    case AMP_POLICY_FP32: return "fp32";
    case AMP_POLICY_PROMOTE: return "promote";
    default: return "invalid";
    }
}
