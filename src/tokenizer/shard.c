/* llm.c's token shards, and the atomic write that rank files and shards share. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/alloc_internal.h"
#include "../core/status_internal.h"
#include "tokenizer_internal.h"

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        const ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w == 0) errno = EIO; /* no progress and no error code: say so rather than leave a stale one */
        if (w <= 0) return -1;
        c += w, n -= (size_t)w;
    }
    return 0;
}

int amp_tok_write_atomic(const char *path, const void *head, size_t head_len, const void *body, size_t body_len,
                         char *err, size_t err_size) {
    const size_t tmp_len = strlen(path) + 32;
    char *tmp = amp_malloc(tmp_len);
    if (!tmp) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    snprintf(tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());
    const char *what = "cannot create temp file";
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    if (ok) {
        what = "write failed";
        ok = write_all(fd, head, head_len) == 0 && (!body_len || write_all(fd, body, body_len) == 0);
        if (ok) what = "fsync failed", ok = fsync(fd) == 0;
        int saved = errno;
        if (close(fd) != 0 && ok) what = "close failed", ok = false, saved = errno;
        errno = saved;
    }
    if (ok) what = "rename failed", ok = rename(tmp, path) == 0;
    int rc = AMP_OK;
    if (!ok) {
        const int saved = errno;
        if (fd >= 0) unlink(tmp);
        rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: %s (%s); the previous file, if any, is unchanged", path,
                         what, strerror(saved));
    }
    amp_free(tmp);
    return rc;
}

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int amp_token_shard_write(const char *path, const uint32_t *tokens, size_t n, uint32_t vocab_size, char *err,
                          size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (!path || (n && !tokens)) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_token_shard_write: NULL argument");
    if (n > (size_t)INT32_MAX)
        return amp_err_fmt(err, err_size, AMP_ERR_INVALID_ARGUMENT, "%s: %zu tokens; a shard holds at most 2^31 - 1", path, n);
    bool narrow = vocab_size <= 65536;
    for (size_t i = 0; i < n && narrow; i++) narrow = tokens[i] < 65536;
    const size_t width = narrow ? 2 : 4;
    uint8_t header[4 * AMP_SHARD_HEADER_INTS] = {0};
    put_le32(header, AMP_SHARD_MAGIC);
    put_le32(header + 4, narrow ? 1 : 2);
    put_le32(header + 8, (uint32_t)n);
    put_le32(header + 4 * AMP_SHARD_VOCAB_INT, vocab_size);
    uint8_t *body = amp_malloc(n * width + 1);
    if (!body) return amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        if (narrow) body[2 * i] = (uint8_t)tokens[i], body[2 * i + 1] = (uint8_t)(tokens[i] >> 8);
        else put_le32(body + 4 * i, tokens[i]);
    }
    const int rc = amp_tok_write_atomic(path, header, sizeof header, body, n * width, err, err_size);
    amp_free(body);
    return rc;
}

int amp_token_shard_read(const char *path, amp_tokens *out, char *err, size_t err_size) {
    return amp_token_shard_read_vocab(path, out, NULL, err, err_size);
}

int amp_token_shard_read_vocab(const char *path, amp_tokens *out, uint32_t *vocab_size, char *err, size_t err_size) {
    if (err && err_size) err[0] = '\0';
    if (vocab_size) *vocab_size = 0;
    if (!path || !out) return amp_err_fmt(err, err_size, AMP_ERR_NULL_POINTER, "amp_token_shard_read: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    uint8_t header[4 * AMP_SHARD_HEADER_INTS] = {0};
    int rc = AMP_OK;
    long size = -1;
    if (fread(header, 1, sizeof header, f) != sizeof header) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: shorter than a shard's 1024-byte header", path);
    } else if (get_le32(header) != AMP_SHARD_MAGIC) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: not a token shard (magic %u, expected %d)", path,
                         get_le32(header), AMP_SHARD_MAGIC);
    } else if (get_le32(header + 4) != 1 && get_le32(header + 4) != 2) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT, "%s: shard version %u (amp reads 1 and 2)", path, get_le32(header + 4));
    } else if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, (long)sizeof header, SEEK_SET) != 0) {
        rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: cannot seek (%s)", path, strerror(errno));
    }
    const size_t width = get_le32(header + 4) == 1 ? 2 : 4;
    const uint64_t count = get_le32(header + 8);
    if (rc == AMP_OK && (uint64_t)size != sizeof header + count * width)
        rc = amp_err_fmt(err, err_size, AMP_ERR_FORMAT,
                         "%s: the header says %llu tokens (%llu bytes), the file holds %ld bytes after the header",
                         path, (unsigned long long)count, (unsigned long long)(count * width), size - (long)sizeof header);
    uint8_t *body = rc == AMP_OK ? amp_malloc(count * width + 1) : NULL;
    if (rc == AMP_OK && !body) rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    if (rc == AMP_OK && fread(body, 1, count * width, f) != count * width)
        rc = amp_err_fmt(err, err_size, AMP_ERR_IO, "%s: read error", path);
    fclose(f);
    const size_t start = out->len;
    for (uint64_t i = 0; rc == AMP_OK && i < count; i++) {
        const uint32_t v = width == 2 ? (uint32_t)body[2 * i] | (uint32_t)body[2 * i + 1] << 8 : get_le32(body + 4 * i);
        if (amp_tokens_push(out, v) != AMP_OK) {
            out->len = start;
            rc = amp_err_fmt(err, err_size, AMP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        }
    }
    amp_free(body);
    if (rc == AMP_OK && vocab_size) *vocab_size = get_le32(header + 4 * AMP_SHARD_VOCAB_INT);
    return rc;
}
