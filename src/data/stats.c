/* Statistics of the data (amp/data.h): the mean and standard deviation of an array or of an image
 * set's pixels. */
#include <math.h>

#include "data_internal.h"

int amp_mean_std(const float *x, int64_t n, double *mean, double *std) {
    if (!x || !mean || !std) return AMP_ERR_NULL_POINTER;
    if (n < 2) return AMP_ERR_INVALID_ARGUMENT;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    const double m = sum / (double)n;
    double squares = 0.0;
    for (int64_t i = 0; i < n; i++) squares += ((double)x[i] - m) * ((double)x[i] - m);
    *mean = m;
    *std = sqrt(squares / (double)(n - 1));
    return AMP_OK;
}

/* ubyte pixels from their 256 counts: the mean of pixel / 255 and the std, each sum exact or over 256
 * terms. */
static void pixel_mean_std(const uint8_t *pixels, int64_t n, double *mean, double *std) {
    uint64_t count[256] = {0}, sum = 0;
    for (int64_t i = 0; i < n; i++) count[pixels[i]]++;
    for (int k = 0; k < 256; k++) sum += (uint64_t)k * count[k]; /* < 2^8 * 2^31 */
    const double m = (double)sum / (double)n; /* in pixel units */
    double squares = 0.0;
    for (int k = 0; k < 256; k++) squares += (double)count[k] * ((double)k - m) * ((double)k - m);
    *mean = m / 255.0;
    *std = sqrt(squares / (double)(n - 1)) / 255.0;
}

int amp_image_dataset_mean_std(const amp_image_dataset *d, double *mean, double *std) {
    if (!d || !mean || !std || (!d->pixels && !d->values)) return AMP_ERR_NULL_POINTER;
    if (d->count < 0 || d->rows < 1 || d->cols < 1 || d->count > INT64_MAX / d->rows / d->cols)
        return AMP_ERR_INVALID_ARGUMENT;
    const int64_t n = d->count * d->rows * d->cols;
    if (n < 2) return AMP_ERR_INVALID_ARGUMENT;
    if (d->values) return amp_mean_std(d->values, n, mean, std);
    pixel_mean_std(d->pixels, n, mean, std);
    return AMP_OK;
}
