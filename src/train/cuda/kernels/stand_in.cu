// The stand-in step (`model.kind = "stand_in"` on CUDA): a grid-stride sum of the batch's bits
// into `checksum` (so the copy before it cannot be skipped), then each block's first thread
// spins until `ns` have passed on the global timer since the block began.
extern "C" __global__ void stand_in_step(const float* batch, unsigned long long n,
                                         unsigned long long ns, unsigned int* checksum) {
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned int sum = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        sum += __float_as_uint(batch[i]);
    }
    atomicAdd(checksum, sum);
    if (threadIdx.x == 0) {
        unsigned long long now;
        do {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (now - start < ns);
    }
}
