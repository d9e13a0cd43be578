// Element-wise kernels: fill, accumulate, the residual join, ReLU.

// y[i] = v.
extern "C" __global__ void fill_f32(float* y, u64 n, float v) {
    GRID_STRIDE(i, n) y[i] = v;
}

// y[i] += x[i].
extern "C" __global__ void add_f32(const float* x, float* y, u64 n) {
    GRID_STRIDE(i, n) y[i] += x[i];
}

// y = a + b, then ReLU if `relu` (the residual join). fmaxf(NaN, 0) is 0, as Rust's
// f32::max on the CPU.
extern "C" __global__ void add_act(const float* a, const float* b, float* y, u64 n, int relu) {
    GRID_STRIDE(i, n) {
        float s = a[i] + b[i];
        y[i] = relu ? fmaxf(s, 0.0f) : s;
    }
}

// y = max(x, 0).
extern "C" __global__ void relu_forward(const float* x, float* y, u64 n) {
    GRID_STRIDE(i, n) y[i] = fmaxf(x[i], 0.0f);
}

// dx = dy where the output was positive, else 0.
extern "C" __global__ void relu_backward(const float* y, const float* dy, float* dx, u64 n) {
    GRID_STRIDE(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
