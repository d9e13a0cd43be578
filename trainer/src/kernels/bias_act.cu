// The fused bias + activation of Linear and Conv2d, over y [rows, cols].

// In place: y = act(y + bias[row]). Without a bias the sum is y + 0, as on the CPU.
extern "C" __global__ void bias_act_forward(float* y, const float* bias, int has_bias,
                                            u64 rows, u64 cols, int relu) {
    GRID_STRIDE(i, rows * cols) {
        float b = has_bias ? bias[i / cols] : 0.0f;
        float s = y[i] + b;
        y[i] = relu ? fmaxf(s, 0.0f) : s;
    }
}

// In place on dy: zero it where the output was not positive (no bias to reduce).
extern "C" __global__ void relu_mask(const float* y, float* dy, u64 n) {
    GRID_STRIDE(i, n) {
        if (y[i] <= 0.0f) dy[i] = 0.0f;
    }
}

// One block per row: mask dy by the output if `relu`, then dbias[row] = sum(dy[row]),
// summed in double (the CPU sums in f64 too) in a fixed order.
extern "C" __global__ void bias_act_backward_rows(const float* y, float* dy, float* dbias,
                                                  u64 cols, int relu) {
    __shared__ double sh[RED_THREADS];
    u64 row = blockIdx.x;
    const float* yr = y + row * cols;
    float* dr = dy + row * cols;
    double acc = 0.0;
    for (u64 j = threadIdx.x; j < cols; j += RED_THREADS) {
        float d = dr[j];
        if (relu && yr[j] <= 0.0f) {
            d = 0.0f;
            dr[j] = 0.0f;
        }
        acc += (double)d;
    }
    double s = block_sum(acc, sh);
    if (threadIdx.x == 0) dbias[row] = (float)s;
}
