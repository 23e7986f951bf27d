/* A minimal amp client: store fp32 weights as bf16 and fp16, read them back, and show what each
 * format kept. Built by `make test` through pkg-config:
 *     cc examples/convert.c $(PKG_CONFIG_PATH=build pkg-config --cflags --libs --static amp) */
#include <stdio.h>

#include <amp.h>

int main(void) {
    const float weights[4] = {1.0001f, 3.0e-6f, 70000.0f, -0.0f};
    unsigned short as_bf16[4], as_f16[4];
    float back_bf16[4], back_f16[4];
    int st = amp_convert(as_bf16, AMP_BF16, weights, AMP_F32, 4);
    if (st == AMP_OK) st = amp_convert(back_bf16, AMP_F32, as_bf16, AMP_BF16, 4);
    if (st == AMP_OK) st = amp_convert(as_f16, AMP_F16, weights, AMP_F32, 4);
    if (st == AMP_OK) st = amp_convert(back_f16, AMP_F32, as_f16, AMP_F16, 4);
    if (st != AMP_OK) {
        fprintf(stderr, "amp_convert: %s\n", amp_status_str(st));
        return 1;
    }
    printf("amp %s, SIMD path %s\n", amp_version(), amp_isa_name(amp_isa_active()));
    printf("%14s %14s %14s\n", "fp32", "bf16", "fp16");
    for (int i = 0; i < 4; i++) printf("%14.8g %14.8g %14.8g\n", weights[i], back_bf16[i], back_f16[i]);
    /* fp16 overflows 70000 to inf; bf16 keeps the range but rounds 1.0001 to 1. */
    return (back_f16[2] > 65504.0f && back_bf16[0] == 1.0f) ? 0 : 1;
}
