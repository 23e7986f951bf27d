/* `amp sample`: text from a trained gpt or gpt2 checkpoint, or llm.c's GPT-2 model file
 * (amp/generate.h), decoded with the vocabulary the checkpoint carries (amp/vocab.h), a tiktoken rank
 * file or llm.c's tokenizer file; tokens/s on stderr. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp.h"
#include "bench_util.h"
#include "commands.h"
#include "train_flags.h"

/* llm.c's tokenizer file: 256 uint32 of header (magic, version, vocabulary size, end-of-text id in
 * version 2), then per token a length byte and its bytes. */
enum { LLMC_TOKENIZER_MAGIC = 20240328, LLMC_HEADER_WORDS = 256, LLMC_EOT_V1 = 50256 };

static void print_help(void) {
    printf("usage: amp sample --checkpoint FILE [--tokenizer FILE [--pattern gpt2|cl100k]] [--prompt TEXT]\n"
           "                  [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
           "                  [--precision fp32|amp-bf16|amp-fp16] [--threads N] [--no-cache] [--heads N] [--quiet]\n"
           "Generates text with a gpt or gpt2 checkpoint written by `amp train --checkpoint FILE`, or llm.c's\n"
           "GPT-2 model file (gpt2_124M.bin), one token at a time with a key/value cache (past the model's\n"
           "context the window slides: the last context/2 tokens are fed again). The text goes to stdout,\n"
           "tokens/s to stderr.\n\n"
           "  --checkpoint FILE  the checkpoint (required); its vocabulary decodes the text (an llm.c model file\n"
           "                     has none: give --tokenizer gpt2_tokenizer.bin)\n"
           "  --tokenizer FILE   decode and encode with a tiktoken rank file (BPE) or llm.c's tokenizer file\n"
           "                     (gpt2_tokenizer.bin) instead; without any vocabulary, token ids are printed\n"
           "  --pattern P        a rank file's pre-tokenization pattern: gpt2 (default) or cl100k\n"
           "  --prompt TEXT      start from TEXT, encoded with the same vocabulary (printed before the sample;\n"
           "                     default: one newline token, or llm.c's end-of-text token)\n"
           "  --tokens N         tokens to generate (default 256)\n"
           "  --temperature T    0: greedy (the most likely token); > 0: softmax(logits / T) (default 1)\n"
           "  --top-k K          draw only among the K most likely tokens (default 0: all)\n"
           "  --seed S           the draws' seed: the same seed gives the same text (default 0)\n"
           "  --precision P      fp32 (default), amp-bf16 or amp-fp16: compute as that preset's autocast\n"
           "  --threads N        threads (default: AMP_NUM_THREADS or the online cores)\n"
           "  --no-cache         recompute the whole window for every token (llm.c's way; for comparison)\n"
           "  --heads N          the head count of a checkpoint that does not record its sizes\n"
           "  --quiet            no tokens/s line\n"
           "Exit status: 0 success, 1 failure while generating, 2 bad usage or a bad checkpoint or tokenizer.\n");
}

typedef struct sample_options {
    const char *checkpoint, *tokenizer, *pattern, *prompt;
    long tokens, top_k, threads, heads;
    double temperature;
    uint64_t seed;
    amp_dtype compute;
    bool no_cache, quiet;
} sample_options;

static int parse_value(const char *a, const char *v, sample_options *o) {
    long n;
    if (strcmp(a, "--checkpoint") == 0) o->checkpoint = v;
    else if (strcmp(a, "--tokenizer") == 0) o->tokenizer = v;
    else if (strcmp(a, "--prompt") == 0) o->prompt = v;
    else if (strcmp(a, "--pattern") == 0) {
        if (!amp_tokenizer_pattern_named(v)) return amp_usage_error("sample", "--pattern must be gpt2 or cl100k, not '%s'", v);
        o->pattern = v;
    } else if (strcmp(a, "--precision") == 0) {
        if (strcmp(v, "fp32") == 0) o->compute = AMP_F32;
        else if (strcmp(v, "amp-bf16") == 0) o->compute = AMP_BF16;
        else if (strcmp(v, "amp-fp16") == 0) o->compute = AMP_F16;
        else return amp_usage_error("sample", "--precision wants fp32, amp-bf16 or amp-fp16, not '%s'", v);
    } else if (strcmp(a, "--temperature") == 0) {
        if (amp_cli_parse_double(v, &o->temperature) != 0 || o->temperature < 0 || o->temperature > 1e6)
            return amp_usage_error("sample", "--temperature wants a number in [0, 1e6], not '%s'", v);
    } else if (strcmp(a, "--seed") == 0) {
        if (amp_cli_parse_u64(v, &o->seed) != 0) return amp_usage_error("sample", "--seed wants an integer >= 0, not '%s'", v);
    } else {
        const long lo = strcmp(a, "--top-k") == 0 ? 0 : 1;
        const long hi = strcmp(a, "--threads") == 0 ? AMP_MAX_THREADS : 1L << 24;
        if (amp_parse_long(v, lo, hi, &n) != 0)
            return amp_usage_error("sample", "%s wants an integer in [%ld, %ld], not '%s'", a, lo, hi, v);
        if (strcmp(a, "--tokens") == 0) o->tokens = n;
        else if (strcmp(a, "--top-k") == 0) o->top_k = n;
        else if (strcmp(a, "--threads") == 0) o->threads = n;
        else o->heads = n;
    }
    return AMP_EXIT_OK;
}

/* -1: go on; else the exit status (help, or a usage error). */
static int parse_options(int argc, char **argv, sample_options *o) {
    *o = (sample_options){.pattern = "gpt2", .tokens = 256, .temperature = 1.0, .compute = AMP_F32};
    static const char *const with_value[] = {"--checkpoint", "--tokenizer", "--pattern", "--prompt", "--tokens",
                                             "--temperature", "--top-k", "--seed", "--precision", "--threads",
                                             "--heads"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_help();
            return AMP_EXIT_OK;
        }
        if (strcmp(a, "--no-cache") == 0) { o->no_cache = true; continue; }
        if (strcmp(a, "--quiet") == 0) { o->quiet = true; continue; }
        if (strncmp(a, "--", 2) != 0) return amp_usage_error("sample", "unexpected argument '%s'", a);
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= strcmp(a, with_value[k]) == 0;
        if (!known) return amp_usage_error("sample", "unknown option '%s'", a);
        if (i + 1 >= argc) return amp_usage_error("sample", "%s needs a value", a);
        const int st = parse_value(a, argv[++i], o);
        if (st != AMP_EXIT_OK) return st;
    }
    if (!o->checkpoint) return amp_usage_error("sample", "--checkpoint FILE is required");
    return -1;
}

/* ---- the model ---- */

typedef struct sampler_model {
    amp_ctx *ctx;
    amp_model *model;
} sampler_model;

/* The model's kind and sizes: the checkpoint's train.model and train.model_sizes, else (a gpt
 * checkpoint from before they were recorded) its tensors' shapes and --heads; the parameters' dtype
 * is wte's (fp32, or bf16/fp16 from the pure presets, whose forward runs in it). */
static int model_config(amp_st_file *f, const char *path, long heads, amp_model_config *c, char *err, size_t n) {
    const char *kind = amp_safetensors_meta_get(f, "train.model");
    amp_model_kind k = AMP_MODEL_GPT;
    if (kind && (amp_model_kind_from_name(kind, &k) != AMP_OK || (k != AMP_MODEL_GPT && k != AMP_MODEL_GPT2))) {
        snprintf(err, n, "%s: a %.40s checkpoint cannot sample (only gpt and gpt2 have a key/value cache)", path, kind);
        return AMP_ERR_INVALID_ARGUMENT;
    }
    *c = amp_model_default_config(k);
    const amp_st_info *wte = amp_safetensors_find(f, "wte.weight"), *wpe = amp_safetensors_find(f, "wpe.weight");
    if (wte && (wte->dtype == AMP_F16 || wte->dtype == AMP_BF16)) c->param_dtype = (amp_dtype)wte->dtype;
    const char *sizes = amp_safetensors_meta_get(f, "train.model_sizes");
    long long v = 0, t = 0, h = 0, l = 0, nh = 0, e = 0, vp = 0, np = 0;
    const int got = sizes ? sscanf(sizes, "vocab=%lld,context=%lld,hidden=%lld,layers=%lld,heads=%lld,embed=%lld,"
                                          "vocab_padded=%lld,positions=%lld",
                                   &v, &t, &h, &l, &nh, &e, &vp, &np)
                          : 0;
    if (got >= 6) {
        c->vocab = v, c->context = t, c->hidden = h, c->layers = l, c->heads = heads > 0 ? heads : nh;
        if (got == 8) c->vocab_padded = vp, c->positions = np;
        return AMP_OK;
    }
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || k != AMP_MODEL_GPT) {
        snprintf(err, n, "%s: not a gpt checkpoint amp can size (no train.model_sizes, wte.weight and wpe.weight)", path);
        return AMP_ERR_INVALID_ARGUMENT;
    }
    c->vocab = wte->shape[0], c->hidden = wte->shape[1], c->context = wpe->shape[0];
    char name[64];
    for (c->layers = 0; c->layers < 1000; c->layers++) {
        snprintf(name, sizeof name, "h.%lld.ln_1.weight", (long long)c->layers);
        if (!amp_safetensors_find(f, name)) break;
    }
    if (heads > 0) c->heads = heads;
    return AMP_OK;
}

/* True when path starts with llm.c's model magic (a gpt2_*.bin file). */
static bool is_llmc_model(const char *path) {
    FILE *fp = fopen(path, "rb");
    int32_t magic = 0;
    const bool yes = fp && fread(&magic, sizeof magic, 1, fp) == 1 && magic == AMP_LLMC_MODEL_MAGIC;
    if (fp) fclose(fp);
    return yes;
}

/* The model of a checkpoint (f open) or of llm.c's model file (f NULL: the file's sizes, its window
 * its maxT). */
static int load_model(const sample_options *o, sampler_model *sm, amp_st_file *f, char *err, size_t n) {
    amp_model_config c;
    amp_llmc_header h;
    int st = AMP_OK;
    if (f) {
        st = model_config(f, o->checkpoint, o->heads, &c, err, n);
    } else if ((st = amp_llmc_read_header(o->checkpoint, &h, err, n)) == AMP_OK) {
        c = amp_model_default_config(AMP_MODEL_GPT2);
        amp_llmc_model_config(&h, &c);
        c.context = h.max_seq_len;
    }
    if (st != AMP_OK) return st;
    amp_ctx_config cc = amp_ctx_default_config();
    if ((st = amp_ctx_create(&cc, &sm->ctx)) != AMP_OK) {
        snprintf(err, n, "cannot create a context: %s", amp_status_str(st));
        return st;
    }
    if ((st = amp_model_create(sm->ctx, &c, &sm->model)) != AMP_OK) {
        snprintf(err, n, "%s: model sizes: %s", o->checkpoint, amp_ctx_error(sm->ctx));
        return AMP_ERR_INVALID_ARGUMENT;
    }
    if ((st = amp_ctx_alloc_params(sm->ctx)) != AMP_OK) {
        snprintf(err, n, "cannot allocate the model: %s", amp_status_str(st));
        return st;
    }
    char msg[400];
    st = f ? amp_checkpoint_load(o->checkpoint, sm->ctx, NULL, NULL, NULL, msg, sizeof msg)
           : amp_llmc_load(o->checkpoint, sm->ctx, NULL, msg, sizeof msg);
    if (st != AMP_OK) snprintf(err, n, "%s", msg);
    return st;
}

/* ---- the vocabulary ---- */

typedef struct sampler_vocab {
    amp_vocab table;     /* size 0: none (ids are printed) */
    amp_tokenizer *bpe;  /* encodes prompts when the table came with merge ranks; else greedy match */
    int32_t start;       /* the token a prompt-less sample starts from */
} sampler_vocab;

/* llm.c's tokenizer file into v (the byte strings; the tokens but the end-of-text one are BPE ranks). */
static int load_llmc(FILE *fp, const char *path, const char *pattern, sampler_vocab *v, char *err, size_t n) {
    uint32_t h[LLMC_HEADER_WORDS];
    if (fread(h, sizeof h, 1, fp) != 1 || h[0] != LLMC_TOKENIZER_MAGIC || (h[1] != 1 && h[1] != 2) || h[2] < 1 ||
        h[2] > AMP_VOCAB_MAX_TOKENS) {
        snprintf(err, n, "%s: not an llm.c tokenizer file (magic %d, version 1 or 2)", path, LLMC_TOKENIZER_MAGIC);
        return AMP_ERR_FORMAT;
    }
    const uint32_t count = h[2], eot = h[1] == 2 ? h[3] : LLMC_EOT_V1;
    uint8_t *bytes = malloc((size_t)count * 256), **tok = malloc(count * sizeof *tok);
    size_t *lens = malloc(count * sizeof *lens);
    int st = bytes && tok && lens ? AMP_OK : AMP_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < count && st == AMP_OK; i++) {
        unsigned char len;
        tok[i] = bytes + (size_t)i * 256;
        if (fread(&len, 1, 1, fp) != 1 || len == 0 || fread(tok[i], 1, len, fp) != len) {
            snprintf(err, n, "%s: token %u is cut short or empty", path, i);
            st = AMP_ERR_FORMAT;
        }
        lens[i] = len;
    }
    if (st == AMP_OK) st = amp_vocab_from_tokens((const uint8_t *const *)tok, lens, count, &v->table);
    /* GPT-2's ranks are its ids: the table without end-of-text is its BPE (else greedy matching) */
    const uint32_t ranks = eot == count - 1 ? count - 1 : count;
    if (st == AMP_OK && amp_tokenizer_create((const uint8_t *const *)tok, lens, ranks, amp_tokenizer_pattern_named(pattern),
                                             &v->bpe, NULL, 0) != AMP_OK)
        v->bpe = NULL;
    v->start = eot < count ? (int32_t)eot : 0;
    if (st == AMP_ERR_OUT_OF_MEMORY) snprintf(err, n, "%s: out of memory", path);
    free(bytes), free(tok), free(lens);
    return st;
}

/* A rank file (amp_tokenizer_load) into v. */
static int load_ranks(const char *path, const char *pattern, sampler_vocab *v, char *err, size_t n) {
    int st = amp_tokenizer_load(path, amp_tokenizer_pattern_named(pattern), &v->bpe, err, n);
    if (st != AMP_OK) return st;
    const uint32_t count = amp_tokenizer_vocab_size(v->bpe);
    const uint8_t **tok = malloc(count * sizeof *tok);
    size_t *lens = malloc(count * sizeof *lens);
    st = tok && lens ? AMP_OK : AMP_ERR_OUT_OF_MEMORY;
    for (uint32_t i = 0; i < count && st == AMP_OK; i++) tok[i] = amp_tokenizer_token(v->bpe, i, &lens[i]);
    if (st == AMP_OK) st = amp_vocab_from_tokens(tok, lens, count, &v->table);
    if (st != AMP_OK) snprintf(err, n, "%s: out of memory", path);
    free(tok), free(lens);
    return st;
}

/* A BPE tokenizer whose ranks are the table's ids; NULL where the table is not one (a gap, a
 * missing byte), and prompts fall back to greedy matching. */
static amp_tokenizer *table_tokenizer(const amp_vocab *t, const char *pattern) {
    const uint8_t **tok = malloc((size_t)t->size * sizeof *tok);
    size_t *lens = malloc((size_t)t->size * sizeof *lens);
    amp_tokenizer *bpe = NULL;
    if (tok && lens) {
        for (int64_t i = 0; i < t->size; i++) tok[i] = amp_vocab_token(t, i, &lens[i]);
        if (amp_tokenizer_create(tok, lens, (uint32_t)t->size, amp_tokenizer_pattern_named(pattern), &bpe, NULL, 0) != AMP_OK)
            bpe = NULL;
    }
    free(tok), free(lens);
    return bpe;
}

static int load_vocab(const sample_options *o, amp_st_file *f, sampler_vocab *v, char *err, size_t n) {
    memset(v, 0, sizeof *v);
    if (o->tokenizer) {
        FILE *fp = fopen(o->tokenizer, "rb");
        uint32_t magic = 0;
        if (!fp) {
            snprintf(err, n, "%s: %s", o->tokenizer, strerror(errno));
            return AMP_ERR_IO;
        }
        const bool llmc = fread(&magic, sizeof magic, 1, fp) == 1 && magic == LLMC_TOKENIZER_MAGIC;
        rewind(fp);
        const int st = llmc ? load_llmc(fp, o->tokenizer, o->pattern, v, err, n) : AMP_OK;
        fclose(fp);
        return llmc ? st : load_ranks(o->tokenizer, o->pattern, v, err, n);
    }
    const char *meta = f ? amp_safetensors_meta_get(f, AMP_VOCAB_META_KEY) : NULL;
    if (!meta || !meta[0]) return AMP_OK;
    char msg[200];
    const int st = amp_vocab_from_meta(meta, &v->table, msg, sizeof msg);
    if (st != AMP_OK) snprintf(err, n, "%s: %s", o->checkpoint, msg);
    const char *pattern = amp_safetensors_meta_get(f, AMP_VOCAB_PATTERN_META_KEY);
    if (st == AMP_OK && pattern && amp_tokenizer_pattern_named(pattern)) /* BPE: ids are ranks */
        v->bpe = table_tokenizer(&v->table, pattern);
    for (int64_t id = 0; id < v->table.size; id++) {
        size_t len;
        const uint8_t *t = amp_vocab_token(&v->table, id, &len);
        if (len == 1 && t[0] == '\n') v->start = (int32_t)id;
    }
    return st;
}

static void free_vocab(sampler_vocab *v) {
    amp_vocab_free(&v->table);
    amp_tokenizer_free(v->bpe);
}

/* Writes token id: its bytes, or " <id>" without a vocabulary entry. */
static void put_token(const sampler_vocab *v, int32_t id) {
    size_t len;
    const uint8_t *t = amp_vocab_token(&v->table, id, &len);
    if (t) fwrite(t, 1, len, stdout);
    else printf(v->table.size ? "<%d>" : "%d\n", (int)id);
}

/* The prompt's ids into *out (malloc), *n of them. */
static int encode_prompt(const sample_options *o, const sampler_vocab *v, int64_t vocab, int32_t **out, int64_t *n,
                         char *err, size_t en) {
    const size_t len = o->prompt ? strlen(o->prompt) : 0;
    *out = malloc((len + 1) * sizeof **out);
    if (!*out) return AMP_ERR_OUT_OF_MEMORY;
    if (!o->prompt || !len) {
        (*out)[0] = v->start < vocab ? v->start : 0, *n = 1;
        return AMP_OK;
    }
    if (!v->table.size) {
        snprintf(err, en, "no vocabulary to encode --prompt with: the checkpoint has none, give --tokenizer FILE");
        return AMP_ERR_INVALID_ARGUMENT;
    }
    if (v->bpe) {
        amp_tokens t = {0};
        int st = amp_tokenizer_encode(v->bpe, o->prompt, len, &t);
        for (size_t i = 0; st == AMP_OK && i < t.len; i++) (*out)[i] = (int32_t)t.data[i];
        *n = (int64_t)t.len;
        amp_tokens_free(&t);
        if (st != AMP_OK) snprintf(err, en, "cannot encode the prompt: %s", amp_status_str(st));
        return st;
    }
    *n = amp_vocab_encode(&v->table, o->prompt, len, *out, (int64_t)len);
    if (*n < 0) {
        snprintf(err, en, "the prompt has a byte the vocabulary lacks (the training text never held it)");
        return AMP_ERR_INVALID_ARGUMENT;
    }
    return AMP_OK;
}

/* ---- generation ---- */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prompt (printed) and o->tokens more, printed as they come; tokens/s on stderr. */
static int generate(const sample_options *o, sampler_model *sm, const sampler_vocab *v, const int32_t *prompt,
                    int64_t np, char *err, size_t n) {
    const int64_t V = amp_model_get_config(sm->model)->vocab, total = np + o->tokens;
    for (int64_t i = 0; i < np; i++)
        if (prompt[i] < 0 || prompt[i] >= V) {
            snprintf(err, n, "prompt token %d is outside the model's vocabulary of %lld", (int)prompt[i], (long long)V);
            return AMP_ERR_INVALID_ARGUMENT;
        }
    int32_t *seq = malloc((size_t)total * sizeof *seq);
    float *logits = malloc((size_t)V * sizeof *logits);
    amp_generator *g = NULL;
    int st = seq && logits ? amp_generator_create(sm->model, o->compute, &g) : AMP_ERR_OUT_OF_MEMORY;
    amp_rng rng;
    amp_rng_seed(&rng, o->seed);
    const amp_sampling s = {.temperature = (float)o->temperature, .top_k = o->top_k};
    if (st == AMP_OK) memcpy(seq, prompt, (size_t)np * sizeof *seq);
    if (st == AMP_OK && o->prompt)
        for (int64_t i = 0; i < np; i++) put_token(v, seq[i]);
    const double t0 = now_seconds();
    if (st == AMP_OK) st = amp_generator_recompute(g, seq, np, logits); /* the prefill (the last context tokens) */
    const double t1 = now_seconds();
    for (int64_t t = np; t < total && st == AMP_OK; t++) {
        seq[t] = amp_sample_token(logits, V, &s, &rng);
        put_token(v, seq[t]);
        if (t + 1 < total)
            st = o->no_cache ? amp_generator_recompute(g, seq, t + 1, logits) : amp_generator_append(g, seq, t + 1, logits);
    }
    const double t2 = now_seconds();
    if (v->table.size) putchar('\n');
    fflush(stdout);
    if (st != AMP_OK) snprintf(err, n, "generation: %s", amp_ctx_status(sm->ctx) ? amp_ctx_error(sm->ctx) : amp_status_str(st));
    else if (!o->quiet)
        fprintf(stderr, "amp: sample: %ld tokens in %.3f s: %.1f tokens/s (%s, %s, %d threads; prefill of %lld: %.3f s)\n",
                o->tokens, t2 - t1, (double)o->tokens / (t2 - t1 > 0 ? t2 - t1 : 1e-9), o->no_cache ? "no cache" : "kv cache",
                o->compute == AMP_F32 ? "fp32" : o->compute == AMP_BF16 ? "amp-bf16" : "amp-fp16", amp_get_num_threads(),
                (long long)np, t1 - t0);
    amp_generator_free(g);
    free(seq);
    free(logits);
    return st;
}

int amp_cmd_sample(int argc, char **argv) {
    sample_options o;
    const int parsed = parse_options(argc, argv, &o);
    if (parsed >= 0) return parsed;
    if (amp_cli_parse_only) return AMP_EXIT_OK;
    if (o.threads > 0) amp_set_num_threads((int)o.threads);
    char err[600] = "";
    amp_st_file *f = NULL;
    sampler_model sm = {0};
    sampler_vocab v = {0};
    int32_t *prompt = NULL;
    int64_t np = 0;
    bool running = false;
    int st = is_llmc_model(o.checkpoint) ? AMP_OK : amp_safetensors_open(o.checkpoint, &f, err, sizeof err);
    if (st == AMP_OK) st = load_model(&o, &sm, f, err, sizeof err);
    if (st == AMP_OK) st = load_vocab(&o, f, &v, err, sizeof err);
    if (st == AMP_OK) st = encode_prompt(&o, &v, amp_model_get_config(sm.model)->vocab, &prompt, &np, err, sizeof err);
    if (st == AMP_OK) {
        running = true;
        st = generate(&o, &sm, &v, prompt, np, err, sizeof err);
    }
    if (st != AMP_OK) fprintf(stderr, "amp: sample: %s\n", err[0] ? err : amp_status_str(st));
    amp_safetensors_close(f);
    free(prompt);
    free_vocab(&v);
    amp_ctx_free(sm.ctx);
    amp_model_free(sm.model);
    if (st == AMP_OK) return AMP_EXIT_OK;
    /* bad input: the files before generating, the prompt's ids while generating */
    const bool bad_input = running ? st == AMP_ERR_INVALID_ARGUMENT
                                   : st == AMP_ERR_IO || st == AMP_ERR_FORMAT || st == AMP_ERR_INVALID_ARGUMENT;
    return bad_input ? AMP_EXIT_USAGE : AMP_EXIT_FAILURE;
}
