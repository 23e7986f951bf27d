#include "amp/version.h"

const char *amp_version(void) { return AMP_VERSION_STRING; }
