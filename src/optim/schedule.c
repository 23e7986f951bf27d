/* Learning-rate schedules as closed forms of the step (so a resumed run needs only the step count).
 * Computed in double, rounded once to fp32. With W = warmup_steps and s = step - W:
 *   step < W:          base_lr * (step + 1) / W
 *   AMP_LR_CONSTANT:   base_lr
 *   AMP_LR_STEP:       base_lr * gamma ^ floor(s / step_size)
 *   AMP_LR_COSINE:     min_lr + (base_lr - min_lr) * (1 + cos(pi * s / total_steps)) / 2  for s < total_steps,
 *                      min_lr after
 * PyTorch equivalents (tests/test_optim.c checks them against torch's values): the warmup is
 * LinearLR(start_factor=1/W, end_factor=1, total_iters=W-1); StepLR(step_size, gamma);
 * CosineAnnealingLR(T_max=total_steps, eta_min=min_lr) for s <= total_steps (torch's cosine then
 * rises again; amp's stays at min_lr); warmup followed by either through SequentialLR(milestones=[W]).
 * torch updates its lr recursively (lr_t from lr_{t-1}); amp's closed form can differ from that in the
 * last bits of the double, which shows up at most as one fp32 ulp. */
#include <math.h>

#include "amp/optim.h"

#define OPTIM_PI 3.14159265358979323846

float amp_lr_at(const amp_lr_schedule *sc, int64_t step) {
    if (!sc) return 0.0f;
    if (step < 0) step = 0;
    const double base = sc->base_lr;
    if (sc->warmup_steps > 0 && step < sc->warmup_steps)
        return (float)(base * (double)(step + 1) / (double)sc->warmup_steps);
    const int64_t s = sc->warmup_steps > 0 ? step - sc->warmup_steps : step;
    switch (sc->kind) {
    case AMP_LR_CONSTANT: return sc->base_lr;
    case AMP_LR_STEP:
        if (sc->step_size <= 0) return sc->base_lr;
        return (float)(base * pow((double)sc->gamma, (double)(s / sc->step_size)));
    case AMP_LR_COSINE: {
        if (sc->total_steps <= 0 || s >= sc->total_steps) return sc->total_steps <= 0 ? sc->base_lr : sc->min_lr;
        const double min_lr = sc->min_lr;
        return (float)(min_lr + (base - min_lr) * (1.0 + cos(OPTIM_PI * (double)s / (double)sc->total_steps)) / 2.0);
    }
    }
    return sc->base_lr;
}
