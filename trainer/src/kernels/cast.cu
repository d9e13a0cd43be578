// f32 to bf16 (as 16-bit patterns): the operands of the bf16 autocast convolutions and
// GEMMs. Round to nearest even, NaN kept a quiet NaN: `precision::bf16_bits` on the host.

extern "C" __global__ void cast_f32_bf16(const float* x, unsigned short* y, u64 n) {
    GRID_STRIDE(i, n) {
        u32 b = __float_as_uint(x[i]);
        if ((b & 0x7fffffffu) > 0x7f800000u) {
            y[i] = (unsigned short)((b >> 16) | 0x40u);
        } else {
            y[i] = (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
        }
    }
}
