/* exp(x) for float in plain C that compilers vectorise (no libm call): Cephes' expf polynomial after the range
 * reduction x = n ln2 + r, |r| <= ln2 / 2, scaled by 2^n through the exponent bits; about 1-2 ulp.
 * Inputs are clamped to [-87, 88] (results of ~1.6e-38 .. 1.7e38 at the ends, never inf or a subnormal).
 * The kernels are built without -ffast-math on purpose: linking a shared library with it switches the whole
 * process to flush subnormals to zero (crtfastmath), which changes everyone's numerics. */
#ifndef NATIVE_ENGINE_FAST_EXP_H
#define NATIVE_ENGINE_FAST_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float fast_exp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float n = floorf(x * 1.44269504088896341f + 0.5f);
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return y * scale;
}

#endif
