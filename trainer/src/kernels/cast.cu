// f32 to bf16 (as 16-bit patterns): the operands of the bf16 autocast convolutions and
// GEMMs. Round to nearest even, NaN kept a quiet NaN: `precision::bf16_bits` on the host.

__device__ __forceinline__ unsigned short bf16_round(float v) {
    u32 b = __float_as_uint(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((b >> 16) | 0x40u);
    }
    return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

extern "C" __global__ void cast_f32_bf16(const float* x, unsigned short* y, u64 n) {
    GRID_STRIDE(i, n) {
        y[i] = bf16_round(x[i]);
    }
}

// The layout changes around cuDNN's convolutions: our activations are [C, N, H, W],
// cuDNN's packed NCHW is [N, C, H, W]. Each kernel reads `src` as [a, b, p] and writes
// `dst` as [b, a, p] (a = 1 is a plain copy, used to cast weights), one thread per
// element written, so the writes are coalesced and the reads are in runs of p.
// `_f32` copies, `_f32_bf16` rounds to bf16 on the way (`bf16_round`), `_bf16_f32`
// widens bf16 exactly (the host's `precision::bf16_value`).

// The source index of destination element i. 64-bit division is a long instruction
// sequence on the GPU, so arrays of under 2^32 elements (all in practice) divide in 32
// bits.
template <typename I>
__device__ __forceinline__ u64 swap01_at(I i, I a, I b, I p) {
    I pix = i % p;
    I rest = i / p;  // = bi * a + ai
    I ai = rest % a;
    I bi = rest / a;
    return ((u64)ai * b + bi) * p + pix;
}

__device__ __forceinline__ u64 swap01_src(u64 i, u64 a, u64 b, u64 p) {
    if (a * b * p <= 0xffffffffull) {
        return swap01_at<u32>((u32)i, (u32)a, (u32)b, (u32)p);
    }
    return swap01_at<u64>(i, a, b, p);
}

extern "C" __global__ void swap01_f32(const float* src, float* dst, u64 a, u64 b, u64 p) {
    GRID_STRIDE(i, a * b * p) {
        dst[i] = src[swap01_src(i, a, b, p)];
    }
}

extern "C" __global__ void swap01_f32_bf16(const float* src, unsigned short* dst, u64 a, u64 b,
                                           u64 p) {
    GRID_STRIDE(i, a * b * p) {
        dst[i] = bf16_round(src[swap01_src(i, a, b, p)]);
    }
}

extern "C" __global__ void swap01_bf16_f32(const unsigned short* src, float* dst, u64 a, u64 b,
                                           u64 p) {
    GRID_STRIDE(i, a * b * p) {
        dst[i] = __uint_as_float(((u32)src[swap01_src(i, a, b, p)]) << 16);
    }
}
