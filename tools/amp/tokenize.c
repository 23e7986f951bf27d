/* `amp tokenizer train`, `amp tokenize`, `amp detokenize`: byte-level BPE (amp/tokenizer.h) from the
 * command line. Each input file is one document, encoded whole; a shard holds the documents' tokens
 * back to back. Outputs are written atomically (nothing on failure). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "amp.h"
#include "commands.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The whole file into *buf (malloc); 0, or -1 with a message printed. */
static int slurp(const char *path, uint8_t **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "amp: %s: cannot open (%s)\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 20, n = 0;
    uint8_t *b = malloc(cap);
    for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(b, 2 * cap);
            if (!nb) free(b);
            b = nb, cap *= 2;
        }
    }
    const int bad = ferror(f);
    fclose(f);
    if (!b || bad) {
        fprintf(stderr, "amp: %s: %s\n", path, b ? "read error" : "out of memory");
        free(b);
        return -1;
    }
    *buf = b, *len = n;
    return 0;
}

/* --pattern NAME to its pattern; NULL after a usage error. */
static const char *pattern_arg(const char *cmd, const char *name) {
    const char *p = amp_tokenizer_pattern_named(name);
    if (!p) amp_usage_error(cmd, "--pattern must be gpt2 or cl100k, not '%s'", name);
    return p;
}

/* ---- amp tokenizer train ---- */

static void train_help(void) {
    printf("usage: amp tokenizer train --vocab N [--pattern gpt2|cl100k] FILE... -o RANKS\n"
           "Trains a byte-level BPE: the 256 byte tokens, then merges of the most frequent adjacent pair of\n"
           "tokens within the pattern's pieces of the files (default pattern cl100k) until N tokens; ties go to\n"
           "the pair with the smallest token ids. RANKS is written in tiktoken's format (base64 of a token's\n"
           "bytes, a space, its rank; one a line), atomically.\n");
}

int amp_cmd_tokenizer(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        if (argc < 2) return amp_usage_error("tokenizer", "expected a subcommand: train");
        train_help();
        return AMP_EXIT_OK;
    }
    if (strcmp(argv[1], "train") != 0) return amp_usage_error("tokenizer", "unknown subcommand '%s' (expected train)", argv[1]);
    const char *out = NULL, *pattern = amp_tokenizer_pattern_named("cl100k");
    long vocab = 0;
    int n_files = 0;
    char **files = argv + 2;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            train_help();
            return AMP_EXIT_OK;
        } else if ((strcmp(a, "--vocab") == 0 || strcmp(a, "--pattern") == 0 || strcmp(a, "-o") == 0) && i + 1 >= argc) {
            return amp_usage_error("tokenizer", "%s needs a value", a);
        } else if (strcmp(a, "--vocab") == 0) {
            char *end;
            vocab = strtol(argv[++i], &end, 10);
            if (*end || vocab < 256 || vocab > 1 << 24)
                return amp_usage_error("tokenizer", "--vocab must be an integer in [256, 16777216], not '%s'", argv[i]);
        } else if (strcmp(a, "--pattern") == 0) {
            if (!(pattern = pattern_arg("tokenizer", argv[++i]))) return AMP_EXIT_USAGE;
        } else if (strcmp(a, "-o") == 0) {
            out = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            return amp_usage_error("tokenizer", "unknown option '%s'", a);
        } else {
            files[n_files++] = argv[i]; /* compacts the file names into argv's own slots */
        }
    }
    if (!vocab) return amp_usage_error("tokenizer", "--vocab N is required");
    if (!out) return amp_usage_error("tokenizer", "-o RANKS is required");
    if (!n_files) return amp_usage_error("tokenizer", "no input file");
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    const double t0 = now_s();
    uint8_t **texts = calloc((size_t)n_files, sizeof *texts);
    size_t *lens = calloc((size_t)n_files, sizeof *lens), total = 0;
    int rc = texts && lens ? AMP_EXIT_OK : AMP_EXIT_FAILURE;
    for (int i = 0; i < n_files && rc == AMP_EXIT_OK; i++) {
        if (slurp(files[i], &texts[i], &lens[i]) != 0) rc = AMP_EXIT_USAGE;
        total += lens[i];
    }
    amp_tokenizer *t = NULL;
    char err[512];
    const double t1 = now_s();
    if (rc == AMP_EXIT_OK &&
        amp_tokenizer_train((const uint8_t *const *)texts, lens, (size_t)n_files, (uint32_t)vocab, pattern, &t, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "amp: %s\n", err);
        rc = AMP_EXIT_FAILURE;
    }
    const double t2 = now_s();
    if (rc == AMP_EXIT_OK && amp_tokenizer_save(t, out, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "amp: %s\n", err);
        rc = AMP_EXIT_FAILURE;
    }
    if (rc == AMP_EXIT_OK)
        printf("%s: %u tokens from %zu bytes in %d file%s; read %.2f s, trained %.2f s\n", out, amp_tokenizer_n_tokens(t),
               total, n_files, n_files == 1 ? "" : "s", t1 - t0, t2 - t1);
    amp_tokenizer_free(t);
    for (int i = 0; texts && i < n_files; i++) free(texts[i]);
    free(texts), free(lens);
    return rc;
}

/* ---- amp tokenize ---- */

static void tokenize_help(void) {
    printf("usage: amp tokenize --ranks RANKS [--pattern gpt2|cl100k] [--threads N] IN... -o SHARD.bin\n"
           "Encodes each file (a document, encoded whole, as tiktoken encodes its bytes: invalid UTF-8 too)\n"
           "with the ranks and the pattern (default cl100k) and writes the tokens, the files' one after the\n"
           "other, as an llm.c token shard: a header of 256 int32 (magic 20240520, version, token count), then\n"
           "uint16 tokens (version 1) when the vocabulary fits in 65536, else uint32 tokens (version 2).\n"
           "--threads N encodes up to N files at once, or one file on N threads (cut where the pattern's\n"
           "search stands, so the tokens are the same; default 1). The shard is written atomically, with the\n"
           "vocabulary size in header int 3 (llm.c's readers ignore it).\n");
}

typedef struct {
    const amp_tokenizer *t;
    char **files;
    int n_files, next, failed;
    int inner_threads;  /* threads within one file (amp_tokenizer_encode_parallel) */
    amp_tokens *tokens; /* one array a file */
    size_t *bytes;
    pthread_mutex_t lock;
} encode_job;

static void *encode_worker(void *arg) {
    encode_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        const int i = j->failed ? j->n_files : j->next++;
        pthread_mutex_unlock(&j->lock);
        if (i >= j->n_files) return NULL;
        uint8_t *text = NULL;
        size_t len = 0;
        int bad = slurp(j->files[i], &text, &len) != 0;
        if (!bad && amp_tokenizer_encode_parallel(j->t, text, len, j->inner_threads, &j->tokens[i]) != AMP_OK) {
            fprintf(stderr, "amp: %s: encoding failed (out of memory)\n", j->files[i]);
            bad = 1;
        }
        j->bytes[i] = len;
        free(text);
        if (bad) {
            pthread_mutex_lock(&j->lock);
            j->failed = 1;
            pthread_mutex_unlock(&j->lock);
        }
    }
}

/* Encodes the files on up to n_threads threads: several files at once, or one file on all of them
 * (cut where the pre-tokenizer's search stands, so the tokens are the one-thread tokens); 0, or -1
 * after a message. */
static int encode_files(const amp_tokenizer *t, char **files, int n_files, int n_threads, amp_tokens *tokens,
                        size_t *bytes) {
    encode_job j = {t, files, n_files, 0, 0, n_files == 1 ? n_threads : 1, tokens, bytes, PTHREAD_MUTEX_INITIALIZER};
    if (n_threads > n_files) n_threads = n_files;
    pthread_t th[64];
    int started = 0;
    for (int k = 1; k < n_threads; k++, started++)
        if (pthread_create(&th[started], NULL, encode_worker, &j) != 0) break;
    encode_worker(&j);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    return j.failed ? -1 : 0;
}

/* Parses the options shared by tokenize and detokenize; returns -1 after a usage error, 1 after --help. */
typedef struct {
    const char *ranks, *out, *pattern;
    int threads, n_in;
    char **in;
} tok_args;

static int parse_tok_args(const char *cmd, int argc, char **argv, tok_args *a, void (*help)(void)) {
    *a = (tok_args){NULL, NULL, amp_tokenizer_pattern_named("cl100k"), 1, 0, argv + 1};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            help();
            return 1;
        } else if ((strcmp(s, "--ranks") == 0 || strcmp(s, "--pattern") == 0 || strcmp(s, "-o") == 0 ||
                    strcmp(s, "--threads") == 0) && i + 1 >= argc) {
            amp_usage_error(cmd, "%s needs a value", s);
            return -1;
        } else if (strcmp(s, "--ranks") == 0) {
            a->ranks = argv[++i];
        } else if (strcmp(s, "-o") == 0) {
            a->out = argv[++i];
        } else if (strcmp(s, "--pattern") == 0) {
            if (!(a->pattern = pattern_arg(cmd, argv[++i]))) return -1;
        } else if (strcmp(s, "--threads") == 0 && strcmp(cmd, "tokenize") == 0) {
            char *end;
            const long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 64) {
                amp_usage_error(cmd, "--threads must be an integer in [1, 64], not '%s'", argv[i]);
                return -1;
            }
            a->threads = (int)n;
        } else if (s[0] == '-' && s[1]) {
            amp_usage_error(cmd, "unknown option '%s'", s);
            return -1;
        } else {
            a->in[a->n_in++] = argv[i];
        }
    }
    if (!a->ranks) {
        amp_usage_error(cmd, "--ranks RANKS is required");
        return -1;
    }
    return 0;
}

int amp_cmd_tokenize(int argc, char **argv) {
    tok_args a;
    const int p = parse_tok_args("tokenize", argc, argv, &a, tokenize_help);
    if (p) return p > 0 ? AMP_EXIT_OK : AMP_EXIT_USAGE;
    if (!a.out) return amp_usage_error("tokenize", "-o SHARD.bin is required");
    if (!a.n_in) return amp_usage_error("tokenize", "no input file");
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    char err[512];
    amp_tokenizer *t = NULL;
    const double t0 = now_s();
    if (amp_tokenizer_load(a.ranks, a.pattern, &t, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "amp: %s\n", err);
        return AMP_EXIT_USAGE;
    }
    const double t1 = now_s();
    amp_tokens *tokens = calloc((size_t)a.n_in, sizeof *tokens);
    size_t *bytes = calloc((size_t)a.n_in, sizeof *bytes);
    int rc = tokens && bytes ? AMP_EXIT_OK : AMP_EXIT_FAILURE;
    if (rc == AMP_EXIT_OK && encode_files(t, a.in, a.n_in, a.threads, tokens, bytes) != 0) rc = AMP_EXIT_USAGE;
    const double t2 = now_s();
    size_t total_bytes = 0, n_tokens = 0;
    for (int i = 0; rc == AMP_EXIT_OK && i < a.n_in; i++) total_bytes += bytes[i], n_tokens += tokens[i].len;
    const bool one = a.n_in == 1 && tokens && tokens[0].data; /* one file: its tokens as they are */
    uint32_t *all = rc != AMP_EXIT_OK ? NULL : one ? tokens[0].data : malloc((n_tokens ? n_tokens : 1) * sizeof *all);
    if (rc == AMP_EXIT_OK && !all) rc = AMP_EXIT_FAILURE;
    for (size_t i = 0, at = 0; rc == AMP_EXIT_OK && !one && i < (size_t)a.n_in; at += tokens[i].len, i++)
        if (tokens[i].len) memcpy(all + at, tokens[i].data, tokens[i].len * sizeof *all);
    if (rc == AMP_EXIT_OK &&
        amp_token_shard_write(a.out, all, n_tokens, amp_tokenizer_vocab_size(t), err, sizeof err) != AMP_OK) {
        fprintf(stderr, "amp: %s\n", err);
        rc = AMP_EXIT_FAILURE;
    }
    if (rc == AMP_EXIT_OK)
        printf("%s: %zu tokens from %zu bytes in %d file%s (%.3f bytes/token); ranks %.3f s, encode %.3f s\n", a.out,
               n_tokens, total_bytes, a.n_in, a.n_in == 1 ? "" : "s", n_tokens ? (double)total_bytes / (double)n_tokens : 0.0,
               t1 - t0, t2 - t1);
    if (!one) free(all);
    for (int i = 0; tokens && i < a.n_in; i++) amp_tokens_free(&tokens[i]);
    free(tokens), free(bytes);
    amp_tokenizer_free(t);
    return rc;
}

/* ---- amp detokenize ---- */

static void detokenize_help(void) {
    printf("usage: amp detokenize --ranks RANKS SHARD.bin [-o OUT]\n"
           "Decodes a token shard (version 1 or 2) back to bytes, to OUT (written atomically) or stdout. A shard\n"
           "whose header disagrees with its length, or a token the ranks do not hold, exits with status 2.\n");
}

/* bytes to path through a temp file renamed over it; 0, or -1 after a message */
static int write_atomic(const char *path, const uint8_t *b, size_t n) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(b, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "amp: %s: cannot write (%s); the previous file, if any, is unchanged\n", path, strerror(errno));
        if (f) remove(tmp);
        return -1;
    }
    return 0;
}

int amp_cmd_detokenize(int argc, char **argv) {
    tok_args a;
    const int p = parse_tok_args("detokenize", argc, argv, &a, detokenize_help);
    if (p) return p > 0 ? AMP_EXIT_OK : AMP_EXIT_USAGE;
    if (a.n_in != 1) return amp_usage_error("detokenize", a.n_in ? "one shard at a time" : "no shard given");
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    char err[512];
    amp_tokenizer *t = NULL;
    if (amp_tokenizer_load(a.ranks, a.pattern, &t, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "amp: %s\n", err);
        return AMP_EXIT_USAGE;
    }
    amp_tokens v = {0};
    uint8_t *bytes = NULL;
    size_t n = 0;
    int rc = AMP_EXIT_OK;
    if (amp_token_shard_read(a.in[0], &v, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "amp: %s\n", err);
        rc = AMP_EXIT_USAGE;
    } else if (amp_tokenizer_decode(t, v.data, v.len, &bytes, &n) != AMP_OK) {
        size_t i = 0;
        while (i < v.len && amp_tokenizer_token(t, v.data[i], NULL)) i++;
        fprintf(stderr, "amp: %s: token %zu is %u, which %s holds no token for\n", a.in[0], i, i < v.len ? v.data[i] : 0,
                a.ranks);
        rc = AMP_EXIT_USAGE;
    } else if (a.out) {
        if (write_atomic(a.out, bytes, n) != 0) rc = AMP_EXIT_FAILURE;
    } else if (fwrite(bytes, 1, n, stdout) != n || fflush(stdout) != 0) {
        fprintf(stderr, "amp: detokenize: cannot write to stdout\n");
        rc = AMP_EXIT_FAILURE;
    }
    amp_tokenizer_bytes_free(bytes);
    amp_tokens_free(&v);
    amp_tokenizer_free(t);
    return rc;
}
