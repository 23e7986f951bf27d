/* `amp inspect FILE [--json]`: a safetensors file's tensors (name, dtype, shape, bytes) and metadata.
 * The file is validated first (amp_safetensors_open); a malformed one exits 2 with one line. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "amp.h"
#include "commands.h"

static void print_help(void) {
    printf("usage: amp inspect FILE [--json]\n"
           "Lists the tensors (name, dtype, shape, bytes) and the metadata of a safetensors file, such as an amp\n"
           "checkpoint. --json prints one JSON object instead. A malformed file exits with status 2.\n");
}

static int print_json(const amp_st_file *f) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_CreateObject();
    cJSON *tensors = cJSON_CreateArray();
    if (!root || !meta || !tensors) goto oom;
    cJSON_AddItemToObject(root, "file", cJSON_CreateString(amp_safetensors_path(f)));
    cJSON_AddItemToObject(root, "header_bytes", cJSON_CreateNumber((double)amp_safetensors_header_bytes(f)));
    uint64_t total = 0;
    for (size_t i = 0; i < amp_safetensors_num_tensors(f); i++) {
        const amp_st_info *t = amp_safetensors_tensor(f, i);
        cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
        if (!o || !shape) {
            cJSON_Delete(o);
            cJSON_Delete(shape);
            goto oom;
        }
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToObject(o, "name", cJSON_CreateString(t->name));
        cJSON_AddItemToObject(o, "dtype", cJSON_CreateString(t->dtype_name));
        cJSON_AddItemToObject(o, "shape", shape);
        cJSON_AddItemToObject(o, "bytes", cJSON_CreateNumber((double)t->bytes));
        cJSON_AddItemToArray(tensors, o);
        total += t->bytes;
    }
    cJSON_AddItemToObject(root, "data_bytes", cJSON_CreateNumber((double)total));
    for (size_t i = 0; i < amp_safetensors_num_meta(f); i++) {
        const amp_st_meta *m = amp_safetensors_meta(f, i);
        cJSON_AddItemToObject(meta, m->key, cJSON_CreateString(m->value));
    }
    cJSON_AddItemToObject(root, "metadata", meta);
    cJSON_AddItemToObject(root, "tensors", tensors);
    meta = tensors = NULL;
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text) goto oom;
    printf("%s\n", text);
    cJSON_free(text);
    return AMP_EXIT_OK;
oom:
    cJSON_Delete(root);
    cJSON_Delete(meta);
    cJSON_Delete(tensors);
    fprintf(stderr, "amp: inspect: out of memory\n");
    return AMP_EXIT_FAILURE;
}

static void print_text(const amp_st_file *f) {
    size_t n = amp_safetensors_num_tensors(f), name_w = 4;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const amp_st_info *t = amp_safetensors_tensor(f, i);
        size_t len = strlen(t->name);
        if (len > name_w) name_w = len;
        total += t->bytes;
    }
    if (name_w > 60) name_w = 60;
    printf("%s: %zu tensors, %" PRIu64 " bytes of data, %" PRIu64 "-byte header\n", amp_safetensors_path(f), n, total,
           amp_safetensors_header_bytes(f));
    printf("metadata:%s\n", amp_safetensors_num_meta(f) ? "" : " (none)");
    for (size_t i = 0; i < amp_safetensors_num_meta(f); i++) {
        const amp_st_meta *m = amp_safetensors_meta(f, i);
        printf("  %s = %s\n", m->key, m->value);
    }
    printf("tensors:\n  %-*s %-8s %-20s %s\n", (int)name_w, "name", "dtype", "shape", "bytes");
    for (size_t i = 0; i < n; i++) {
        const amp_st_info *t = amp_safetensors_tensor(f, i);
        char shape[200] = "[";
        for (int d = 0; d < t->ndim; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%" PRId64, d ? ", " : "", t->shape[d]);
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "]");
        printf("  %-*s %-8s %-20s %" PRIu64 "\n", (int)name_w, t->name, t->dtype_name, shape, t->bytes);
    }
}

int amp_cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help();
            return AMP_EXIT_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return amp_usage_error("inspect", "unknown option '%s'", argv[i]);
        } else if (path) {
            return amp_usage_error("inspect", "more than one file ('%s' and '%s')", path, argv[i]);
        } else {
            path = argv[i];
        }
    }
    if (!path) return amp_usage_error("inspect", "no file given");
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    char err[512];
    amp_st_file *f = NULL;
    int rc = amp_safetensors_open(path, &f, err, sizeof err);
    if (rc != AMP_OK) {
        fprintf(stderr, "amp: %s\n", err);
        return AMP_EXIT_USAGE;
    }
    int exit_code = AMP_EXIT_OK;
    if (json) exit_code = print_json(f);
    else print_text(f);
    amp_safetensors_close(f);
    return exit_code;
}
