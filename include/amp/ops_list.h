/* The list of amp's operations, one X-macro table: enum value, name. Autocast's policy table, the
 * tape, anomaly reports and `amp policy` all index by this enum. */
#ifndef AMP_OPS_LIST_H
#define AMP_OPS_LIST_H

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_OP_LIST(X)                       \
    X(AMP_OP_NONE, "none")                   \
    X(AMP_OP_CAST, "cast")                   \
    X(AMP_OP_CONTIGUOUS, "contiguous")       \
    X(AMP_OP_RESHAPE, "reshape")             \
    X(AMP_OP_TRANSPOSE, "transpose")         \
    X(AMP_OP_CONCAT, "concat")               \
    X(AMP_OP_ADD, "add")                     \
    X(AMP_OP_SUB, "sub")                     \
    X(AMP_OP_MUL, "mul")                     \
    X(AMP_OP_DIV, "div")                     \
    X(AMP_OP_SCALE, "scale")                 \
    X(AMP_OP_SUM, "sum")                     \
    X(AMP_OP_MEAN, "mean")                   \
    X(AMP_OP_MATMUL, "matmul")               \
    X(AMP_OP_LINEAR, "linear")               \
    X(AMP_OP_RELU, "relu")                   \
    X(AMP_OP_GELU, "gelu")                   \
    X(AMP_OP_TANH, "tanh")                   \
    X(AMP_OP_SIGMOID, "sigmoid")             \
    X(AMP_OP_POW, "pow")                     \
    X(AMP_OP_EXP, "exp")                     \
    X(AMP_OP_LOG, "log")                     \
    X(AMP_OP_DROPOUT, "dropout")             \
    X(AMP_OP_SOFTMAX, "softmax")             \
    X(AMP_OP_LOG_SOFTMAX, "log_softmax")     \
    X(AMP_OP_CROSS_ENTROPY, "cross_entropy") \
    X(AMP_OP_MSE_LOSS, "mse_loss")           \
    X(AMP_OP_LAYER_NORM, "layer_norm")       \
    X(AMP_OP_BATCH_NORM, "batch_norm")       \
    X(AMP_OP_EMBEDDING, "embedding")         \
    X(AMP_OP_CONV2D, "conv2d")               \
    X(AMP_OP_MAX_POOL2D, "max_pool2d")       \
    X(AMP_OP_AVG_POOL2D, "avg_pool2d")       \
    X(AMP_OP_LSTM_CELL, "lstm_cell")         \
    X(AMP_OP_ATTENTION, "attention")

typedef enum amp_op {
#define AMP_OP_ENUM_(e, name) e,
    AMP_OP_LIST(AMP_OP_ENUM_)
#undef AMP_OP_ENUM_
    AMP_OP_COUNT
} amp_op;

/* "matmul", ...; "invalid" outside the enum. */
const char *amp_op_name(amp_op op);

#ifdef __cplusplus
}
#endif
#endif /* AMP_OPS_LIST_H */
