#include "amp/status.h"

const char *amp_status_str(int status) {
    switch (status) {
#define AMP_STATUS_CASE_(name, value, text) case value: return text;
        AMP_STATUS_LIST(AMP_STATUS_CASE_)
#undef AMP_STATUS_CASE_
    default: return "unknown status";
    }
}
