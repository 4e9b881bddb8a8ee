/* A stand-in libcuda.so.1 that answers the first calls and then lacks a symbol cudarc needs
 * (cuDevicePrimaryCtxRetain), as an old or mismatched driver library would: cudarc's dynamic
 * loading panics on the missing symbol. Used by scripts/test-cuda-fallback.sh to check that
 * the panic is caught (auto falls back to the CPU, cuda fails clearly) instead of aborting. */
typedef int CUresult;
CUresult cuInit(unsigned int flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { if (v) *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { if (n) *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) { if (d) *d = ordinal; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; if (s) *s = "unknown error"; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; if (s) *s = "CUDA_ERROR_UNKNOWN"; return 0; }
