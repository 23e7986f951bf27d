/* Internal: the constants shared by the SIMD elementwise math kernels (kernels/vecmath.h), so the
 * AVX2 and AVX-512 paths evaluate the same approximations (their algorithms are described in
 * x86/vecmath_avx512.c; the AVX2 file differs only in how it scales by 2^n and picks table rows). */
#ifndef AMP_VECMATH_COEFFS_H
#define AMP_VECMATH_COEFFS_H

#define LOG2E 1.442695022e+00f
#define LN2_HI 0x1.62e4p-1f      /* 0.693145751953125: ln2 with its low 9 mantissa bits zero */
#define LN2_LO 0x1.7f7d1cp-20f   /* ln2 - LN2_HI */
/* e^r - 1 - r = r^2 (P0 + P1 r + ... + P5 r^5) on |r| <= ln2/2: least squares in relative error on
 * Chebyshev nodes, reweighted towards minimax (numpy + mpmath), rounded to fp32. */
#define P0 0.5f
#define P1 0x1.555556p-3f
#define P2 0x1.5554eap-5f
#define P3 0x1.11114cp-7f
#define P4 0x1.6d42dap-10f
#define P5 0x1.a07292p-13f
/* Below EXP_LO, e^x < 2^-150 rounds to +0; above EXP_HI it is past FLT_MAX. The clamp keeps n small
 * enough for exact Cody-Waite and lets VSCALEFPS produce the +0 and +inf. */
#define EXP_LO -104.0f
#define EXP_HI 89.0f
/* tanh |x| rounds to 1 from |x| = 9.01; clamping at 10 keeps E finite. */
#define TANH_SAT 10.0f

/* ---- erfc ----
 * |x| < 1/2:  erfc x = 1 - x P(x^2), erf x / x fitted as a degree-5 polynomial in x^2 (relative error
 *             5.2e-08), the subtraction one FMA (the result is > 0.47: no cancellation);
 * |x| >= 1/2: erfc |x| = e^(-x^2) F(|x|) with F = erfcx, piecewise degree-7 polynomials in |x| - mid
 *             on 12 intervals (width 1/2 up to 4, then 1, then [8, 10.125)), the coefficients picked
 *             per lane by VPERMPS from 16-entry tables; x^2 = h + l exactly (FMA), e^(-h-l) reduced
 *             as in exp with l folded into r, and one VSCALEFPS at the end (one rounding for the
 *             subnormal results near x = 10); erfc x = 2 - erfc |x| for x < 0;
 * |x| >= 10.125: +0 (erfc x < 2^-150 from x = 10.0542) or 2. NaN: NaN.
 * F's fits (relative error with the fp32 coefficients, fitted one coefficient at a time, each
 * rounded before the rest are refitted):
 * [0.5, 1) rel err 5.38e-08
 * [1, 1.5) rel err 3.10e-09
 * [1.5, 2) rel err 4.94e-08
 * [2, 2.5) rel err 2.70e-08
 * [2.5, 3) rel err 2.16e-08
 * [3, 3.5) rel err 2.47e-08
 * [3.5, 4) rel err 2.00e-08
 * [4, 5) rel err 8.77e-09
 * [5, 6) rel err 3.19e-08
 * [6, 7) rel err 7.91e-09
 * [7, 8) rel err 3.48e-08
 * [8, 10.125) rel err 2.44e-08
 */
#define ERFC_SMALL 0.5f
#define ERFC_BIG 10.125f
static const float erfc_small[6] = {0x1.20dd76p+0f, -0x1.812a22p-2f, 0x1.cf943ap-4f, -0x1.f5d1ap-6f, 0x1.6cb498p-6f, -0x1.c8e2ecp-6f};
static const float erfc_mid[16] = {0x1.8p-1f, 0x1.4p+0f, 0x1.cp+0f, 0x1.2p+1f, 0x1.6p+1f, 0x1.ap+1f, 0x1.ep+1f, 0x1.2p+2f, 0x1.6p+2f, 0x1.ap+2f, 0x1.ep+2f, 0x1.22p+3f, 0.0f, 0.0f, 0.0f, 0.0f};
static const float erfc_poly[8][16] = {
    {0x1.038d54p-1f, 0x1.78a692p-2f, 0x1.23cfc2p-2f, 0x1.d94446p-3f, 0x1.8c9eb6p-3f, 0x1.54a7ap-3f, 0x1.2a2af2p-3f, 0x1.f5b2ap-4f, 0x1.9d8a9p-4f, 0x1.5f75c4p-4f, 0x1.31743p-4f, 0x1.faf24ap-5f, 0.0f, 0.0f, 0.0f, 0.0f},
    {-0x1.78cdd4p-2f, -0x1.abaacep-3f, -0x1.0c3d52p-3f, -0x1.6a70d2p-4f, -0x1.030578p-4f, -0x1.82a852p-5f, -0x1.2aa65p-5f, -0x1.aa3eb6p-6f, -0x1.238ca8p-6f, -0x1.a6e2cep-7f, -0x1.404456p-7f, -0x1.ba38a4p-8f, 0.0f, 0.0f, 0.0f, 0.0f},
    {0x1.d90494p-3f, 0x1.b56fap-4f, 0x1.c8d8ecp-5f, 0x1.0618fcp-5f, 0x1.43be5cp-6f, 0x1.a7f75p-7f, 0x1.22e9b8p-7f, 0x1.62c26ep-8f, 0x1.951dc4p-9f, 0x1.f76218p-10f, 0x1.4cfbcep-10f, 0x1.7f8b3cp-11f, 0.0f, 0.0f, 0.0f, 0.0f},
    {-0x1.09ea5ep-3f, -0x1.9b6332p-5f, -0x1.6cbeb2p-6f, -0x1.6889c2p-7f, -0x1.84ee22p-8f, -0x1.c2532cp-9f, -0x1.1431dep-9f, -0x1.219092p-10f, -0x1.15915p-11f, -0x1.287d52p-12f, -0x1.5779fcp-13f, -0x1.4ac058p-14f, 0.0f, 0.0f, 0.0f, 0.0f},
    {0x1.103918p-4f, 0x1.68615cp-6f, 0x1.0e06ep-7f, 0x1.d0e354p-9f, 0x1.b6129p-10f, 0x1.b79638p-11f, 0x1.1196e6p-11f, 0x1.ce5802p-13f, 0x1.811166p-14f, 0x1.559098p-15f, 0x1.7effb2p-16f, 0x1.19c49ap-17f, 0.0f, 0.0f, 0.0f, 0.0f},
    {-0x1.03606p-5f, -0x1.298c9cp-7f, -0x1.80607ep-9f, -0x1.24524ap-10f, -0x1.ec1186p-12f, -0x1.bacf2cp-13f, -0x1.e62098p-14f, -0x1.6b5994p-15f, -0x1.02161cp-16f, -0x1.85385ep-18f, -0x1.813816p-19f, -0x1.e0bafep-21f, 0.0f, 0.0f, 0.0f, 0.0f},
    {0x1.26a526p-6f, 0x1.ec0c4p-9f, 0x1.6d4888p-9f, 0x1.24d8f6p-10f, 0x1.52e548p-11f, 0x1.2557c8p-11f, -0x1.5c440cp-12f, 0x1.658f1ap-17f, -0x1.f0270ep-19f, 0x1.225834p-19f, -0x1.3751b6p-18f, 0x1.162e7ep-23f, 0.0f, 0.0f, 0.0f, 0.0f},
    {-0x1.1a9532p-7f, -0x1.66c632p-10f, -0x1.47e52p-10f, -0x1.a860fp-12f, -0x1.790dd8p-13f, -0x1.222c1p-13f, 0x1.f1e5a6p-15f, -0x1.282a9cp-19f, 0x1.a0cf72p-21f, -0x1.f3897ep-22f, 0x1.21d8b2p-21f, -0x1.d3991p-27f, 0.0f, 0.0f, 0.0f, 0.0f},
};

#endif
