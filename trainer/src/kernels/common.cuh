// Shared by every kernel file (prepended once when the program is compiled).
//
// Sizes and indices are 64-bit: an activation of a large batch can pass 2^31 elements.
// Every reduction runs in a fixed order (per-thread strided sums, then a fixed tree),
// never with floating-point atomics, so a kernel gives bit-identical results on every
// run, as the Backend trait promises.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;

// IEEE constants as bit patterns: NVRTC compiles without the C math headers.
#define NEG_INF __int_as_float(0xff800000)
#define QUIET_NAN __int_as_float(0x7fc00000)

// Threads per block of the reduction kernels; the tree in block_sum assumes this.
#define RED_THREADS 256

// A grid-stride loop over 0..n: any grid size covers any n.
#define GRID_STRIDE(i, n)                                                          \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n);         \
         i += (u64)blockDim.x * gridDim.x)

// Sum of one double per thread over a block of RED_THREADS threads, in a fixed tree
// order. Every thread gets the result. `sh` is RED_THREADS doubles of shared memory.
__device__ double block_sum(double v, double* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = RED_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}
