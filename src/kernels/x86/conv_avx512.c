/* AVX-512 versions of conv2d's stride-1 padded-plane im2col and col2im (kernels/conv_kernels.h): the
 * same elements written, and the same fp32 additions in the same order, as amp_conv_im2col_padded_ref
 * and amp_conv_col2im_padded_ref, so the same bits (tests/test_ops_conv_pool.c compares them).
 *
 * im2col: the columns of row (c, ky, kx) for one image are the P = OH*OW outputs in order, element
 * e = oy*OW + ox reading the padded plane at (oy + ky)*Wp + ox + kx. Instead of one short copy per
 * output row (14 elements in the cnn: a 28-byte copy, 14 per row of col), each full vector of the
 * destination (32 bf16 or 16 fp32 outputs, spanning 2-4 output rows) is one permute of the 128
 * bytes of the padded plane that hold its sources: the permutation and the window's start depend on
 * the block only, not on (c, ky, kx), so they are worked out once per call. When some block's
 * sources span more than two vectors (a narrow output in a wide plane), the call copies rows.
 * col2im: one masked load-add-store per output row and (c, ky, kx), in the reference's order (rows
 * of the same (ky, kx) do not overlap, so consecutive stores never feed the next load). */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "../conv_kernels.h"
#include "tile_avx512.h"

/* the most destination blocks of one image the permute path handles (the plane's bound allows up to
 * AMP_CONV_PAD_PLANE_BYTES / 4 / 16 = 256 fp32 blocks) */
#define MAX_BLOCKS 256

static inline __mmask64 byte_mask(size_t n) { return n >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << n) - 1; }

/* d[0, n) = s[0, n) in bytes, under masks */
static inline void copy_masked(unsigned char *d, const unsigned char *s, size_t n) {
    size_t i = 0;
    for (; i + 64 <= n; i += 64) _mm512_storeu_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
    if (i < n) {
        const __mmask64 k = byte_mask(n - i);
        _mm512_mask_storeu_epi8(d + i, k, _mm512_maskz_loadu_epi8(k, s + i));
    }
}

void amp_conv_im2col_padded_avx512(const amp_conv_geom *g, const void *x, size_t es, int64_t b0, int64_t nb, int64_t b,
                                   void *col) {
    const int64_t p_img = g->oh * g->ow, ld = nb * p_img, wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    const int lanes = es == 2 ? 32 : 16; /* outputs per vector */
    const int64_t blocks = (p_img + lanes - 1) / lanes;
    /* the plane, and two vectors of slack that the last block's window may read (never used) */
    _Alignas(64) unsigned char pad[AMP_CONV_PAD_PLANE_BYTES + 128];
    memset(pad, 0, (size_t)(hp * wp) * es + 128); /* the border stays zero; the interior is rewritten per plane */

    /* per block: the window's start (in elements of the plane) and the permutation into it */
    _Alignas(64) union {
        uint16_t e16[MAX_BLOCKS * 32];
        uint32_t e32[MAX_BLOCKS * 16];
    } idx;
    int32_t base[MAX_BLOCKS];
    bool permute = blocks <= MAX_BLOCKS;
    for (int64_t t = 0; permute && t < blocks; t++) {
        const int64_t e0 = t * lanes;
        base[t] = (int32_t)(e0 / g->ow * wp + e0 % g->ow);
        for (int l = 0; l < lanes; l++) {
            const int64_t e = e0 + l < p_img ? e0 + l : e0; /* past the end: any lane, not stored */
            const int64_t off = e / g->ow * wp + e % g->ow - base[t];
            if (off >= 2 * lanes) permute = false;
            if (es == 2) idx.e16[t * 32 + l] = (uint16_t)off;
            else idx.e32[t * 16 + l] = (uint32_t)off;
        }
    }
    const int64_t tail = p_img - (blocks - 1) * lanes; /* outputs in the last block, 1..lanes */

    for (int64_t c = 0; c < g->c; c++) {
        const unsigned char *plane = (const unsigned char *)x + (size_t)(((b0 + b) * g->c + c) * g->h * g->w) * es;
        for (int64_t iy = 0; iy < g->h; iy++)
            copy_masked(pad + (size_t)((iy + g->pad) * wp + g->pad) * es, plane + (size_t)(iy * g->w) * es,
                        (size_t)g->w * es);
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const int64_t r = (c * g->kh + ky) * g->kw + kx;
                unsigned char *dst = (unsigned char *)col + (size_t)(r * ld + b * p_img) * es;
                const unsigned char *src = pad + (size_t)(ky * wp + kx) * es;
                if (!permute) {
                    for (int64_t oy = 0; oy < g->oh; oy++)
                        copy_masked(dst + (size_t)(oy * g->ow) * es, src + (size_t)(oy * wp) * es, (size_t)g->ow * es);
                    continue;
                }
                for (int64_t t = 0; t < blocks; t++) {
                    const unsigned char *s = src + (size_t)base[t] * es;
                    const __m512i lo = _mm512_loadu_si512((const void *)s);
                    const __m512i hi = _mm512_loadu_si512((const void *)(s + 64));
                    const __m512i v =
                        es == 2 ? _mm512_permutex2var_epi16(lo, _mm512_load_si512((const void *)(idx.e16 + t * 32)), hi)
                                : _mm512_permutex2var_epi32(lo, _mm512_load_si512((const void *)(idx.e32 + t * 16)), hi);
                    unsigned char *d = dst + (size_t)(t * lanes) * es;
                    if (t + 1 < blocks) _mm512_storeu_si512((void *)d, v);
                    else _mm512_mask_storeu_epi8(d, byte_mask((size_t)tail * es), v);
                }
            }
    }
}

void amp_conv_col2im_padded_avx512(const amp_conv_geom *g, const float *dcol, int64_t b0, int64_t nb, int64_t b,
                                   float *dx) {
    const int64_t p_img = g->oh * g->ow, ld = nb * p_img, wp = g->w + 2 * g->pad, hp = g->h + 2 * g->pad;
    _Alignas(64) float pad[AMP_CONV_PAD_PLANE_BYTES / sizeof(float)];
    const int64_t full = g->ow / 16 * 16;
    const __mmask16 km = (__mmask16)((1u << (g->ow - full)) - 1u);
    for (int64_t c = 0; c < g->c; c++) {
        memset(pad, 0, (size_t)(hp * wp) * sizeof *pad);
        for (int64_t ky = 0; ky < g->kh; ky++)
            for (int64_t kx = 0; kx < g->kw; kx++) {
                const int64_t r = (c * g->kh + ky) * g->kw + kx;
                const float *src = dcol + r * ld + b * p_img;
                for (int64_t oy = 0; oy < g->oh; oy++, src += g->ow) {
                    float *d = pad + (oy + ky) * wp + kx;
                    for (int64_t i = 0; i < full; i += 16)
                        _mm512_storeu_ps(d + i, _mm512_add_ps(_mm512_loadu_ps(d + i), _mm512_loadu_ps(src + i)));
                    if (km)
                        _mm512_mask_storeu_ps(
                            d + full, km,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(km, d + full), _mm512_maskz_loadu_ps(km, src + full)));
                }
            }
        float *plane = dx + ((b0 + b) * g->c + c) * g->h * g->w;
        for (int64_t iy = 0; iy < g->h; iy++)
            copy_masked((unsigned char *)(plane + iy * g->w), (const unsigned char *)(pad + (iy + g->pad) * wp + g->pad),
                        (size_t)g->w * sizeof *plane);
    }
}

/* ---- implicit GEMM panels ----
 * Each row of the panel (one k index p, or a pair of them for bf16) is r values from one or two
 * windows of 32 elements of the padded chunk, one per image the panel's pixels fall in: a permute
 * of the window(s) by the pixels' offsets (fixed for the panel), a blend when there are two, a
 * masked store. The bf16 permute interleaves the pair's two windows at once. */
bool amp_conv_pack_panel_avx512(const amp_conv_implicit *ci, void *dst, int64_t i0, int64_t rows, int64_t p0,
                                int64_t kc, int r) {
    const amp_conv_geom *g = ci->g;
    const int64_t p_img = g->oh * g->ow;
    if (r > 16 || rows < 1 || rows > r) return false;
    const int64_t b_first = i0 / p_img, b_last = (i0 + rows - 1) / p_img;
    if (b_last - b_first > 1) return false;
    const int split = b_last == b_first ? (int)rows : (int)((b_first + 1) * p_img - i0); /* lanes of image b_first */
    const int64_t base_a = ci->pix[i0];
    const int64_t base_b = split < rows ? ci->pix[i0 + split] : base_a;
    int32_t off[16] = {0};
    for (int ii = 0; ii < rows; ii++) {
        const int64_t o = ci->pix[i0 + ii] - (ii < split ? base_a : base_b);
        if (o < 0 || o >= 32) return false;
        off[ii] = (int32_t)o;
    }
    const __mmask16 k_rows = (__mmask16)((1u << rows) - 1u), k_b = (__mmask16)(k_rows & ~((1u << split) - 1u));
    const __mmask16 k_store = (__mmask16)((1u << r) - 1u);
    if (ci->es == 4) {
        const __m512i idx = _mm512_loadu_si512((const void *)off);
        const float *xa = (const float *)ci->xp + base_a, *xb = (const float *)ci->xp + base_b;
        float *d = dst;
        for (int64_t p = 0; p < kc; p++, d += r) {
            const int32_t ko = ci->koff[p0 + p];
            __m512 v = _mm512_maskz_permutex2var_ps(k_rows, _mm512_loadu_ps(xa + ko), idx, _mm512_loadu_ps(xa + ko + 16));
            if (k_b)
                v = _mm512_mask_blend_ps(k_b, v,
                                         _mm512_permutex2var_ps(_mm512_loadu_ps(xb + ko), idx, _mm512_loadu_ps(xb + ko + 16)));
            _mm512_mask_storeu_ps(d, k_store, v);
        }
        return true;
    }
    /* bf16 pairs: lane 2ii takes the even k's window at off[ii], lane 2ii + 1 the odd one's (32 + off) */
    uint16_t idx16[32];
    for (int ii = 0; ii < 16; ii++) idx16[2 * ii] = (uint16_t)off[ii], idx16[2 * ii + 1] = (uint16_t)(32 + off[ii]);
    const __m512i idx = _mm512_loadu_si512((const void *)idx16);
    uint32_t kr = 0, kb = 0;
    for (int ii = 0; ii < rows; ii++) kr |= 3u << (2 * ii);
    for (int ii = split; ii < rows; ii++) kb |= 3u << (2 * ii);
    const __mmask32 k_rows2 = kr, k_b2 = kb, k_store2 = r == 16 ? 0xFFFFFFFFu : (1u << (2 * r)) - 1u;
    const uint16_t *xa = (const uint16_t *)ci->xp + base_a, *xb = (const uint16_t *)ci->xp + base_b;
    uint16_t *d = dst;
    for (int64_t q = 0; 2 * q < kc; q++, d += 2 * r) {
        const int64_t p = p0 + 2 * q;
        const bool odd = 2 * q + 1 < kc;
        const int32_t ke = ci->koff[p], ko = odd ? ci->koff[p + 1] : 0;
        const __m512i zero = _mm512_setzero_si512();
        __m512i v = _mm512_maskz_permutex2var_epi16(k_rows2, _mm512_loadu_si512((const void *)(xa + ke)), idx,
                                                    odd ? _mm512_loadu_si512((const void *)(xa + ko)) : zero);
        if (k_b2)
            v = _mm512_mask_blend_epi16(k_b2, v,
                                        _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)(xb + ke)), idx,
                                                                  odd ? _mm512_loadu_si512((const void *)(xb + ko)) : zero));
        _mm512_mask_storeu_epi16(d, k_store2, v);
    }
    return true;
}

/* The weight gradient's panels (rows: k indices, columns: pixels), bf16 pairs: each pair of
 * pixels (p, p + 1) in one output row reads one 64-element window of the padded chunk per channel
 * the panel's rows fall in, and a permute picks lane 2ii = the row's offset, lane 2ii + 1 = the
 * same + 1 (the next pixel); pairs that straddle an output row or image, and an odd last pixel,
 * are gathered one element at a time. */
/* fp32: each pixel reads a 64-element window of the padded chunk per channel the panel's rows fall
 * in (its first row's offset + the pixel's), as two pairs of vectors; a permute of each pair picks
 * the lanes whose offsets fall in its half, a blend joins them. */
static bool pack_panel_k_f32(const amp_conv_implicit *ci, float *dst, int64_t j0, int64_t rows, int64_t p0, int64_t kc,
                             int r, int split) {
    const int32_t k_a = ci->koff[j0], k_b = split < rows ? ci->koff[j0 + split] : k_a;
    int32_t idx32[16] = {0};
    unsigned lo_a = 0, hi_a = 0, lo_b = 0, hi_b = 0;
    for (int ii = 0; ii < rows; ii++) {
        const int32_t o = ci->koff[j0 + ii] - (ii < split ? k_a : k_b);
        if (o < 0 || o > 63) return false;
        idx32[ii] = o & 31;
        const unsigned bit = 1u << ii;
        unsigned *lanes = ii < split ? (o < 32 ? &lo_a : &hi_a) : (o < 32 ? &lo_b : &hi_b);
        *lanes |= bit;
    }
    const __m512i idx = _mm512_loadu_si512((const void *)idx32);
    const __mmask16 k_store = (__mmask16)((1u << r) - 1u);
    const float *xp = ci->xp;
    for (int64_t p = 0; p < kc; p++, dst += r) {
        const float *wa = xp + ci->pix[p0 + p] + k_a, *wb = xp + ci->pix[p0 + p] + k_b;
        __m512 v = _mm512_maskz_permutex2var_ps((__mmask16)lo_a, _mm512_loadu_ps(wa), idx, _mm512_loadu_ps(wa + 16));
        if (hi_a)
            v = _mm512_mask_blend_ps((__mmask16)hi_a, v,
                                     _mm512_permutex2var_ps(_mm512_loadu_ps(wa + 32), idx, _mm512_loadu_ps(wa + 48)));
        if (lo_b)
            v = _mm512_mask_blend_ps((__mmask16)lo_b, v,
                                     _mm512_permutex2var_ps(_mm512_loadu_ps(wb), idx, _mm512_loadu_ps(wb + 16)));
        if (hi_b)
            v = _mm512_mask_blend_ps((__mmask16)hi_b, v,
                                     _mm512_permutex2var_ps(_mm512_loadu_ps(wb + 32), idx, _mm512_loadu_ps(wb + 48)));
        _mm512_mask_storeu_ps(dst, k_store, v);
    }
    return true;
}

bool amp_conv_pack_panel_k_avx512(const amp_conv_implicit *ci, void *dst, int64_t j0, int64_t rows, int64_t p0,
                                  int64_t kc, int r) {
    const amp_conv_geom *g = ci->g;
    const int64_t khw = g->kh * g->kw;
    if ((ci->es != 2 && ci->es != 4) || r > 16 || rows < 1 || rows > r) return false;
    const int64_t c_first = j0 / khw, c_last = (j0 + rows - 1) / khw;
    if (c_last - c_first > 1) return false;
    const int split = c_last == c_first ? (int)rows : (int)((c_first + 1) * khw - j0); /* rows in channel c_first */
    if (ci->es == 4) return pack_panel_k_f32(ci, dst, j0, rows, p0, kc, r, split);
    const int32_t k_a = ci->koff[j0], k_b = split < rows ? ci->koff[j0 + split] : k_a;
    uint16_t idx16[32] = {0};
    uint32_t kr = 0, kb = 0;
    for (int ii = 0; ii < rows; ii++) {
        const int32_t o = ci->koff[j0 + ii] - (ii < split ? k_a : k_b);
        if (o < 0 || o > 62) return false;
        idx16[2 * ii] = (uint16_t)o, idx16[2 * ii + 1] = (uint16_t)(o + 1);
        kr |= 3u << (2 * ii);
        if (ii >= split) kb |= 3u << (2 * ii);
    }
    const __m512i idx = _mm512_loadu_si512((const void *)idx16);
    const __mmask32 k_rows2 = kr, k_b2 = kb, k_store2 = r == 16 ? 0xFFFFFFFFu : (1u << (2 * r)) - 1u;
    const uint16_t *xp = ci->xp;
    uint16_t *d = dst;
    for (int64_t q = 0; 2 * q < kc; q++, d += 2 * r) {
        const int64_t p = p0 + 2 * q;
        const int32_t po = ci->pix[p];
        const bool has_next = 2 * q + 1 < kc;
        if (has_next && ci->pix[p + 1] == po + 1) {
            const uint16_t *wa = xp + po + k_a;
            __m512i v = _mm512_maskz_permutex2var_epi16(k_rows2, _mm512_loadu_si512((const void *)wa), idx,
                                                        _mm512_loadu_si512((const void *)(wa + 32)));
            if (k_b2) {
                const uint16_t *wb = xp + po + k_b;
                v = _mm512_mask_blend_epi16(k_b2, v,
                                            _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)wb), idx,
                                                                      _mm512_loadu_si512((const void *)(wb + 32))));
            }
            _mm512_mask_storeu_epi16(d, k_store2, v);
            continue;
        }
        const int32_t po1 = has_next ? ci->pix[p + 1] : 0;
        for (int ii = 0; ii < r; ii++) {
            const bool real = ii < rows;
            const int32_t ko = real ? ci->koff[j0 + ii] : 0;
            d[2 * ii] = real ? xp[po + ko] : 0;
            d[2 * ii + 1] = real && has_next ? xp[po1 + ko] : 0;
        }
    }
    return true;
}

/* ---- the bias gradient's sums ----
 * amp_conv_sum_bf16_x4_ref's 32 partial sums (4 rows x 8) in two registers, rows 0 and 1 in one,
 * 2 and 3 in the other: each lane adds its elements in the reference's order (element i of a row
 * into lane i % 8), then the same combination and tail, in scalar code. */
void amp_conv_sum_bf16_x4_avx512(const uint16_t *v, int64_t stride, int64_t n, float out[4]) {
    __m512 a01 = _mm512_setzero_ps(), a23 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i r01 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const void *)(v + i))),
                                                    _mm_loadu_si128((const void *)(v + stride + i)), 1);
        const __m256i r23 =
            _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const void *)(v + 2 * stride + i))),
                                    _mm_loadu_si128((const void *)(v + 3 * stride + i)), 1);
        /* bf16 -> fp32 exactly: the bits shifted into the top half */
        a01 = _mm512_add_ps(a01, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(r01), 16)));
        a23 = _mm512_add_ps(a23, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(r23), 16)));
    }
    float acc[32]; /* row j's partial sums at 8j */
    _mm512_storeu_ps(acc, a01);
    _mm512_storeu_ps(acc + 16, a23);
    for (int j = 0; j < 4; j++) {
        const float *a = acc + 8 * j;
        float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        for (int64_t t = i; t < n; t++) {
            const uint32_t u = (uint32_t)v[j * stride + t] << 16;
            float f;
            memcpy(&f, &u, sizeof f);
            s += f;
        }
        out[j] = s;
    }
}

/* ---- the forward's store ---- */

/* out[i] = bf16(y[i] + bias): the fp32 add, then amp_convert's bf16 rounding (to nearest even on the
 * bits; NaN -> sign | 0x7FC0), in one pass. */
void amp_conv_store_bf16_avx512(uint16_t *out, const float *y, float bias, int64_t n) {
    const __m512 vb = _mm512_set1_ps(bias);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = (__mmask16)(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1u);
        const __m512i x = _mm512_castps_si512(_mm512_add_ps(_mm512_maskz_loadu_ps(k, y + i), vb));
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
        const __mmask16 nan =
            _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
        r = _mm512_mask_mov_epi32(
            r, nan, _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(x, 31), 15), _mm512_set1_epi32(0x7FC0)));
        _mm256_mask_storeu_epi16(out + i, k, _mm512_cvtepi32_epi16(r));
    }
}

/* ---- the direct tile: the implicit GEMM's C^T tile without packing its pixel panel ----
 * The 12 x 32 tile of gemm_avx512.c's ukernel_ct (12 pixels x 32 output channels, VDPBF16PS or
 * FMA, 24 accumulators), whose broadcast operand is read straight from the padded chunk instead of
 * a packed panel: row ii's value at step p is xp[rows[ii] + steps[p]] (the forward's: rows are pixels,
 * steps k indices; the weight gradient's: rows are k indices, steps pixels), broadcast as the panel's
 * element would be. fp32: one element. bf16 pairs: the pair (p, p + 1) is one unaligned 32-bit
 * word where steps[p + 1] = steps[p] + 1 (within a kernel row: 80% of the forward's pairs; within
 * an output row: all of the cnn's weight gradient's), else its two halves joined; an odd kc's last
 * pair has a zero second half, as the packed panel's pad. Same values in the same order as packing
 * the panel (amp_conv_pack_panel_ref) and running ukernel_ct: the same bits. The packed panels
 * cost a noticeable share of a convolution's step (two loads, a permute and a store per 12-pixel
 * row, bound by the loads); the broadcasts here come from the same few L1 lines the panel's
 * permutes read. The transpose and store are gemm_avx512.c's (tile_avx512.h). */
enum { DMR = AMP_TILE_MR, DNR = 32 };

/* acc[i][h] += pair word a[i] x b_h (VDPBF16PS), for the 12 rows */
#define D_BF16_STEP(LOAD)                                                                                              \
    do {                                                                                                               \
        UNROLL_ALL                                                                                                     \
        for (int i = 0; i < DMR; i++) {                                                                                \
            const __m512bh ai = (__m512bh)_mm512_set1_epi32(LOAD);                                                     \
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);                                                           \
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);                                                           \
        }                                                                                                              \
    } while (0)

static inline int32_t d_word(const uint16_t *s) { /* unaligned 32-bit read: the pair s[0], s[1] */
    int32_t w;
    memcpy(&w, s, sizeof w);
    return w;
}

/* Both tiles' start: zero accumulators, and each row's offset from row 0's (the rows' indexes). */
static inline __attribute__((always_inline)) void direct_start(const int32_t po[DMR], __m512 acc[DMR][2],
                                                                 int64_t rel[DMR]) {
    UNROLL_ALL
    for (int i = 0; i < DMR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps(), rel[i] = (int64_t)po[i] - po[0];
}

/* fp32: the step's window pointer at row 0's offset as the base of every broadcast's address, the
 * other 11 rows' offsets from row 0 as indexes in registers (one general register fewer than a
 * pointer per row, so that no pointer spills to a vector register). */
static __attribute__((noinline)) void direct_tile_f32(const float *xp, const int32_t *ko, const int32_t po[12],
                                                      int64_t kc, const float *b, float *c, int64_t ldc, int m, int n,
                                                      float beta) {
    __m512 acc[DMR][2];
    int64_t rel[DMR];
    direct_start(po, acc, rel);
    const float *x0 = xp + po[0];
    for (int64_t p = 0; p < kc; p++, b += DNR) {
        const float *xe = x0 + ko[p];
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        UNROLL_ALL
        for (int i = 0; i < DMR; i++) {
            const __m512 ai = _mm512_set1_ps(i == 0 ? xe[0] : xe[rel[i]]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    store_tile_transposed(acc, c, ldc, m, n, 1.0f, beta);
}

/* bf16: as fp32, the step's window pointer at row 0's offset as the base, the other rows' offsets
 * from row 0 as indexes. The steps whose pair is one word run in a loop of their own: with one loop
 * and a branch, gcc computed all 12 addresses for both branches before it, spilling most of them. */
static __attribute__((noinline)) void direct_tile_bf16(const uint16_t *xp, const int32_t *ko, const int32_t po[12],
                                                       int64_t kc, const uint16_t *b, float *c, int64_t ldc, int m,
                                                       int n, float beta) {
    __m512 acc[DMR][2];
    int64_t rel[DMR];
    direct_start(po, acc, rel);
    const uint16_t *x0 = xp + po[0];
    const int64_t pairs = kc / 2; /* whole pairs; an odd kc's last element after them */
    int64_t q = 0;
    while (q < pairs) {
        for (; q < pairs && ko[2 * q + 1] == ko[2 * q] + 1; q++, b += 2 * DNR) {
            const uint16_t *xe = x0 + ko[2 * q];
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)b);
            const __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + DNR));
            D_BF16_STEP(d_word(xe + rel[i]));
        }
        if (q == pairs) break;
        const uint16_t *xe = x0 + ko[2 * q], *xo = x0 + ko[2 * q + 1];
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)b);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + DNR));
        D_BF16_STEP((int32_t)((uint32_t)xe[rel[i]] | (uint32_t)xo[rel[i]] << 16));
        q++, b += 2 * DNR;
    }
    if (kc & 1) { /* an odd kc's last pair: the pad's +0 second half */
        const uint16_t *xe = x0 + ko[2 * q];
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void *)b);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void *)(b + DNR));
        D_BF16_STEP((int32_t)xe[rel[i]]);
    }
    store_tile_transposed(acc, c, ldc, m, n, 1.0f, beta);
}

void amp_conv_direct_tile_avx512(const void *xp, size_t es, const int32_t *steps, const int32_t rows[12], int64_t kc,
                                 const void *bpanel, float *c, int64_t ldc, int m, int n, float beta) {
    if (es == 4)
        direct_tile_f32(xp, steps, rows, kc, bpanel, c, ldc, m, n, beta);
    else
        direct_tile_bf16(xp, steps, rows, kc, bpanel, c, ldc, m, n, beta);
}

/* The AVX-512 path's conv2d entries: every one, the direct tile for the flipped implicit products. */
void amp_conv_kernels_avx512(amp_conv_kernels *k) {
    k->im2col_padded = amp_conv_im2col_padded_avx512;
    k->col2im_padded = amp_conv_col2im_padded_avx512;
    k->sum_bf16_x4 = amp_conv_sum_bf16_x4_avx512;
    k->store_bf16 = amp_conv_store_bf16_avx512;
    k->pack_panel = amp_conv_pack_panel_avx512;
    k->pack_panel_k = amp_conv_pack_panel_k_avx512;
    k->direct_tile = amp_conv_direct_tile_avx512;
    k->direct_mr = DMR;
    k->direct_nr = DNR;
    k->direct_every = false;
}
