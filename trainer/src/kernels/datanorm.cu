// DataNorm: u8 NHWC images to normalised f32, the model's first layer, so batches
// cross the bus as u8 (4x fewer bytes than f32).

// Per-channel affine map y = x * a[ch] + b[ch], with a = 1 / (255 std) and b = -mean / std
// computed on the host exactly as the CPU does. Passed by value: no upload per batch.
#define DN_MAX_CHANNELS 16
struct Affine {
    float a[DN_MAX_CHANNELS];
    float b[DN_MAX_CHANNELS];
};

// Channel-major output [c, n, h, w]: one thread per output element.
extern "C" __global__ void datanorm_cm(const u8* x, float* y, u64 n, u64 hw, int c, Affine t) {
    GRID_STRIDE(i, (u64)c * n * hw) {
        u64 row = i / hw, p = i % hw;
        int ch = (int)(row / n);
        u64 ni = row % n;
        y[i] = (float)x[(ni * hw + p) * c + ch] * t.a[ch] + t.b[ch];
    }
}

// Feature-major output [h * w * c, n] (feature (y * w + x) * c + ch): one thread per
// output element; consecutive threads are consecutive samples of one feature.
extern "C" __global__ void datanorm_fm(const u8* x, float* y, u64 n, u64 hw, int c, Affine t) {
    u64 f = hw * c;
    GRID_STRIDE(i, f * n) {
        u64 fi = i / n, ni = i % n;
        int ch = (int)(fi % c);
        y[i] = (float)x[ni * f + fi] * t.a[ch] + t.b[ch];
    }
}
