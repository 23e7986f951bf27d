/* amp status codes: 0 is success, every failure is negative.
 *
 * One X-macro table is the single source of truth for the codes and their messages (the zstd way),
 * so a new code cannot be added without its text. */
#ifndef AMP_STATUS_H
#define AMP_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_STATUS_LIST(X)                                                          \
    X(AMP_OK,                   0, "success")                                       \
    X(AMP_ERR_INVALID_ARGUMENT, -1, "invalid argument")                             \
    X(AMP_ERR_NULL_POINTER,     -2, "null pointer")                                 \
    X(AMP_ERR_UNSUPPORTED_DTYPE, -3, "unsupported dtype")                           \
    X(AMP_ERR_UNSUPPORTED_ISA,  -4, "instruction set not supported by this CPU")    \
    X(AMP_ERR_OUT_OF_MEMORY,    -5, "out of memory")                                \
    X(AMP_ERR_IO,               -6, "input/output error")                           \
    X(AMP_ERR_FORMAT,           -7, "malformed input")                              \
    X(AMP_ERR_STATE,            -8, "call not allowed in the current state")       \
    X(AMP_ERR_SCALE_FLOOR,      -9, "loss scale stuck at its floor")

typedef enum amp_status {
#define AMP_STATUS_ENUM_(name, value, text) name = value,
    AMP_STATUS_LIST(AMP_STATUS_ENUM_)
#undef AMP_STATUS_ENUM_
} amp_status;

/* A static, never-NULL English message for any status value; unknown values give "unknown status". */
const char *amp_status_str(int status);

#ifdef __cplusplus
}
#endif
#endif /* AMP_STATUS_H */
