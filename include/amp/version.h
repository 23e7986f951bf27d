#ifndef AMP_VERSION_H
#define AMP_VERSION_H

#define AMP_VERSION_MAJOR 0
#define AMP_VERSION_MINOR 1
#define AMP_VERSION_PATCH 0
#define AMP_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif
/* The version of the library actually linked, which may differ from the header's. */
const char *amp_version(void);
#ifdef __cplusplus
}
#endif
#endif /* AMP_VERSION_H */
