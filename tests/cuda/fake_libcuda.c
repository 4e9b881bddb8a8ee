/* A stand-in libcuda.so.1 for a machine with an NVIDIA driver library but no usable GPU:
 * every entry point cudarc calls first reports CUDA_ERROR_NO_DEVICE (100). Used by
 * scripts/test-cuda-fallback.sh; never linked into loaderlab. */
typedef int CUresult;
enum { CUDA_ERROR_NO_DEVICE = 100 };
CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_ERROR_NO_DEVICE; }
CUresult cuDriverGetVersion(int *v) { if (v) *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { if (n) *n = 0; return CUDA_ERROR_NO_DEVICE; }
CUresult cuDeviceGet(int *d, int ordinal) { (void)d; (void)ordinal; return CUDA_ERROR_NO_DEVICE; }
CUresult cuGetErrorString(CUresult e, const char **s) {
    if (s) *s = e == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is detected" : "unknown error";
    return 0;
}
CUresult cuGetErrorName(CUresult e, const char **s) {
    if (s) *s = e == CUDA_ERROR_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}
