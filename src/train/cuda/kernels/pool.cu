// Max pooling (k×k windows, stride s, padding pad, floor mode) over NCHW planes, PyTorch's
// rules: padding never wins, a NaN wins and stops the window, the first of equal maxima wins.
// The forward keeps each output's argmax (its index in the input plane); the backward gathers,
// for each input element, the gradients of the outputs whose argmax it is — deterministic,
// no atomics, no zero-fill pass.
#include <math.h>

extern "C" __global__ void max_pool_fwd(const float* x, float* y, unsigned int* arg,
                                        unsigned long long planes, int h, int w, int oh, int ow,
                                        int k, int s, int pad) {
    unsigned long long total = planes * (unsigned long long)(oh * ow);
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long o = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         o < total; o += step) {
        int ox = (int)(o % ow);
        int oy = (int)((o / ow) % oh);
        unsigned long long plane = o / ((unsigned long long)oh * ow);
        const float* xp = x + plane * (unsigned long long)(h * w);
        int y0 = oy * s - pad, x0 = ox * s - pad;
        float best = -INFINITY;
        int at = -1;
        bool stop = false;
        for (int dy = 0; dy < k && !stop; ++dy) {
            int iy = y0 + dy;
            if (iy < 0 || iy >= h) continue;
            for (int dx = 0; dx < k; ++dx) {
                int ix = x0 + dx;
                if (ix < 0 || ix >= w) continue;
                float v = xp[iy * w + ix];
                if (v > best || isnan(v)) {
                    best = v;
                    at = iy * w + ix;
                    if (isnan(v)) {
                        stop = true;
                        break;
                    }
                }
            }
        }
        y[o] = best;
        arg[o] = (unsigned int)at;
    }
}

extern "C" __global__ void max_pool_bwd(const float* gy, const unsigned int* arg, float* gx,
                                        unsigned long long planes, int h, int w, int oh, int ow,
                                        int k, int s, int pad) {
    unsigned long long total = planes * (unsigned long long)(h * w);
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < total; i += step) {
        int ix = (int)(i % w);
        int iy = (int)((i / w) % h);
        unsigned long long plane = i / ((unsigned long long)h * w);
        // Outputs whose window holds row iy: oy·s − pad ≤ iy ≤ oy·s − pad + k − 1.
        int lo_y = iy + pad - k + 1, lo_x = ix + pad - k + 1;
        int oy0 = lo_y <= 0 ? 0 : (lo_y + s - 1) / s;
        int ox0 = lo_x <= 0 ? 0 : (lo_x + s - 1) / s;
        int oy1 = min(oh - 1, (iy + pad) / s);
        int ox1 = min(ow - 1, (ix + pad) / s);
        unsigned long long base = plane * (unsigned long long)(oh * ow);
        unsigned int me = (unsigned int)(iy * w + ix);
        float sum = 0.0f;
        for (int oy = oy0; oy <= oy1; ++oy) {
            for (int ox = ox0; ox <= ox1; ++ox) {
                unsigned long long o = base + oy * ow + ox;
                if (arg[o] == me) sum += gy[o];
            }
        }
        gx[i] = sum;
    }
}
