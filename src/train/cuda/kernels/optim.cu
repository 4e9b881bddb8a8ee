// One launch updates many parameters (PyTorch's multi-tensor apply): the tensors' pointers and
// lengths travel by value in the kernel's parameters, each block takes one chunk of one tensor.
// The update rules are `train/optim.rs`'s (PyTorch's single-tensor implementations) in its order
// of operations; built with --fmad=false, so no multiply-add is fused that candle's path
// rounds twice, and the results match it to the last bit or so.

#define MAX_TENSORS 32
#define CHUNK 4096

struct TensorList {
    float* p[MAX_TENSORS];         // parameters, updated in place
    const float* g[MAX_TENSORS];   // gradients
    float* m[MAX_TENSORS];         // Adam's first moment / SGD's momentum buffer (zeroed at first)
    float* v[MAX_TENSORS];         // Adam's second moment (unused by SGD)
    unsigned long long n[MAX_TENSORS];
    unsigned int first_block[MAX_TENSORS + 1];  // blocks of tensor t: first_block[t] .. [t+1]
    unsigned int count;
};

// Which tensor block `b` belongs to, and the first element of its chunk.
__device__ __forceinline__ bool locate(const TensorList& l, unsigned int b, unsigned int* t,
                                       unsigned long long* start) {
    for (unsigned int i = 0; i < l.count; ++i) {
        if (b < l.first_block[i + 1]) {
            *t = i;
            *start = (unsigned long long)(b - l.first_block[i]) * CHUNK;
            return true;
        }
    }
    return false;
}

struct AdamArgs {
    float beta1, one_minus_beta1, beta2, one_minus_beta2;
    float inv_bc2_sqrt;   // 1 / sqrt(1 - beta2^step)
    float eps;
    float step_size;      // lr / (1 - beta1^step)
    float weight_decay;   // Adam: added to the gradient as L2
    float decay_factor;   // AdamW: the weights times (1 - lr * weight_decay) first
    int l2, decoupled;
};

extern "C" __global__ void fused_adam(TensorList l, AdamArgs a) {
    unsigned int t;
    unsigned long long start;
    if (!locate(l, blockIdx.x, &t, &start)) return;
    float* p = l.p[t];
    const float* g = l.g[t];
    float* m = l.m[t];
    float* v = l.v[t];
    unsigned long long end = start + CHUNK < l.n[t] ? start + CHUNK : l.n[t];
    for (unsigned long long i = start + threadIdx.x; i < end; i += blockDim.x) {
        float pi = p[i];
        float gi = g[i];
        if (a.l2) gi = gi + pi * a.weight_decay;
        if (a.decoupled) pi = pi * a.decay_factor;
        float mi = m[i] * a.beta1 + gi * a.one_minus_beta1;
        float vi = v[i] * a.beta2 + (gi * gi) * a.one_minus_beta2;
        float denom = sqrtf(vi) * a.inv_bc2_sqrt + a.eps;
        p[i] = pi - (mi / denom) * a.step_size;
        m[i] = mi;
        v[i] = vi;
    }
}

struct SgdArgs {
    float lr, momentum, weight_decay;
    int l2, use_momentum, nesterov;
};

extern "C" __global__ void fused_sgd(TensorList l, SgdArgs a) {
    unsigned int t;
    unsigned long long start;
    if (!locate(l, blockIdx.x, &t, &start)) return;
    float* p = l.p[t];
    const float* g = l.g[t];
    float* buf = l.m[t];
    unsigned long long end = start + CHUNK < l.n[t] ? start + CHUNK : l.n[t];
    for (unsigned long long i = start + threadIdx.x; i < end; i += blockDim.x) {
        float pi = p[i];
        float gi = g[i];
        if (a.l2) gi = gi + pi * a.weight_decay;
        if (a.use_momentum) {
            float b = buf[i] * a.momentum + gi;
            buf[i] = b;
            gi = a.nesterov ? gi + b * a.momentum : b;
        }
        p[i] = pi - gi * a.lr;
    }
}
