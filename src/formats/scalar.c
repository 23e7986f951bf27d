/* The public scalar conversions: thin wrappers over core/float_bits.h. */
#include "amp/formats.h"
#include "../core/float_bits.h"

uint16_t amp_fp16_from_fp32(float x) { return amp_f16_encode(amp_f32_bits(x), AMP_OVERFLOW_INF); }
uint16_t amp_fp16_from_fp32_sat(float x) { return amp_f16_encode(amp_f32_bits(x), AMP_OVERFLOW_SATURATE); }
float amp_fp16_to_fp32(uint16_t bits) { return amp_f32_from_bits(amp_f16_decode(bits)); }

uint16_t amp_bf16_from_fp32(float x) { return amp_bf16_encode(amp_f32_bits(x), AMP_OVERFLOW_INF); }
uint16_t amp_bf16_from_fp32_sat(float x) { return amp_bf16_encode(amp_f32_bits(x), AMP_OVERFLOW_SATURATE); }
float amp_bf16_to_fp32(uint16_t bits) { return amp_f32_from_bits(amp_bf16_decode(bits)); }

uint8_t amp_fp8e4m3_from_fp32(float x) { return amp_f8e4m3_encode(amp_f32_bits(x), AMP_OVERFLOW_NAN); }
uint8_t amp_fp8e4m3_from_fp32_sat(float x) { return amp_f8e4m3_encode(amp_f32_bits(x), AMP_OVERFLOW_SATURATE); }
float amp_fp8e4m3_to_fp32(uint8_t bits) { return amp_f32_from_bits(amp_f8e4m3_decode(bits)); }

uint8_t amp_fp8e5m2_from_fp32(float x) { return amp_f8e5m2_encode(amp_f32_bits(x), AMP_OVERFLOW_INF); }
uint8_t amp_fp8e5m2_from_fp32_sat(float x) { return amp_f8e5m2_encode(amp_f32_bits(x), AMP_OVERFLOW_SATURATE); }
float amp_fp8e5m2_to_fp32(uint8_t bits) { return amp_f32_from_bits(amp_f8e5m2_decode(bits)); }
