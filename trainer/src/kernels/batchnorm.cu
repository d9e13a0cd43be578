// Batch norm over x [c, m] (m = n * h * w per channel), with an optional fused ReLU.
//
// A channel's sums are split into fixed chunks of the row (one block each, so a few
// channels still fill the GPU), written as partials, and folded in chunk order by a
// second kernel: a fixed reduction order whatever the launch. Sums are in double, as
// the CPU's are.

// Block (chunk b, channel ch): sums of d = x - x[ch, 0] and d * d over the chunk.
// Shifting by a sample keeps E[d^2] - E[d]^2 from cancelling when the mean is large.
extern "C" __global__ void bn_partial_stats(const float* x, double* partial, u64 m, u64 chunk) {
    __shared__ double sh[RED_THREADS];
    u64 ch = blockIdx.y, b = blockIdx.x, nchunks = gridDim.x;
    const float* xr = x + ch * m;
    float k = xr[0];
    u64 lo = b * chunk, hi = lo + chunk < m ? lo + chunk : m;
    double s = 0.0, ss = 0.0;
    for (u64 j = lo + threadIdx.x; j < hi; j += RED_THREADS) {
        float d = xr[j] - k;
        s += (double)d;
        ss += (double)(d * d);
    }
    s = block_sum(s, sh);
    ss = block_sum(ss, sh);
    if (threadIdx.x == 0) {
        partial[(ch * nchunks + b) * 2] = s;
        partial[(ch * nchunks + b) * 2 + 1] = ss;
    }
}

// One thread per channel: folds the partials, writes saved = [mean(c), inv_std(c)] and
// updates running = [mean(c), var(c)] with the unbiased variance, as PyTorch.
extern "C" __global__ void bn_finalize_stats(const float* x, const double* partial,
                                             u64 nchunks, u64 c, u64 m, float eps,
                                             float momentum, float* saved, float* running) {
    GRID_STRIDE(ch, c) {
        double s = 0.0, ss = 0.0;
        for (u64 b = 0; b < nchunks; b++) {
            s += partial[(ch * nchunks + b) * 2];
            ss += partial[(ch * nchunks + b) * 2 + 1];
        }
        float k = x[ch * m];
        double dm = s / (double)m;
        double mean = (double)k + dm;
        double var = fmax(ss / (double)m - dm * dm, 0.0);
        double inv = 1.0 / sqrt(var + (double)eps);
        saved[ch] = (float)mean;
        saved[c + ch] = (float)inv;
        double unbiased = m > 1 ? var * (double)m / (double)(m - 1) : var;
        running[ch] = (1.0f - momentum) * running[ch] + momentum * (float)mean;
        running[c + ch] = (1.0f - momentum) * running[c + ch] + momentum * (float)unbiased;
    }
}

// y = act(x * scale + shift) per element. Training: scale = gamma * inv_std and shift
// = beta - mean * scale from `saved`; eval: from the running statistics.
extern "C" __global__ void bn_apply(const float* x, const float* gamma_beta, const float* saved,
                                    const float* running, float* y, u64 c, u64 m, float eps,
                                    int train, int relu) {
    GRID_STRIDE(i, c * m) {
        u64 ch = i / m;
        float gamma = gamma_beta[ch], beta = gamma_beta[c + ch];
        float mean, scale;
        if (train) {
            mean = saved[ch];
            scale = gamma * saved[c + ch];
        } else {
            mean = running[ch];
            scale = gamma / sqrtf(running[c + ch] + eps);
        }
        float shift = beta - mean * scale;
        float v = x[i] * scale + shift;
        y[i] = relu ? fmaxf(v, 0.0f) : v;
    }
}

// Block (chunk b, channel ch): sums of di and di * (x - mean), where di is dy masked by
// the ReLU output when fused.
extern "C" __global__ void bn_partial_grads(const float* x, const float* y, const float* dy,
                                            const float* saved, double* partial, u64 m,
                                            u64 chunk, int relu) {
    __shared__ double sh[RED_THREADS];
    u64 ch = blockIdx.y, b = blockIdx.x, nchunks = gridDim.x;
    float mean = saved[ch];
    u64 base = ch * m;
    u64 lo = b * chunk, hi = lo + chunk < m ? lo + chunk : m;
    double sd = 0.0, sdc = 0.0;
    for (u64 j = lo + threadIdx.x; j < hi; j += RED_THREADS) {
        float di = dy[base + j];
        if (relu && y[base + j] <= 0.0f) di = 0.0f;
        sd += (double)di;
        sdc += (double)(di * (x[base + j] - mean));
    }
    sd = block_sum(sd, sh);
    sdc = block_sum(sdc, sh);
    if (threadIdx.x == 0) {
        partial[(ch * nchunks + b) * 2] = sd;
        partial[(ch * nchunks + b) * 2 + 1] = sdc;
    }
}

// One thread per channel: dgamma = sum(di * xhat), dbeta = sum(di).
extern "C" __global__ void bn_finalize_grads(const double* partial, u64 nchunks, u64 c,
                                             const float* saved, float* dgamma_beta) {
    GRID_STRIDE(ch, c) {
        double sd = 0.0, sdc = 0.0;
        for (u64 b = 0; b < nchunks; b++) {
            sd += partial[(ch * nchunks + b) * 2];
            sdc += partial[(ch * nchunks + b) * 2 + 1];
        }
        dgamma_beta[ch] = (float)(sdc * (double)saved[c + ch]);
        dgamma_beta[c + ch] = (float)sd;
    }
}

// dx = k (m di - sum(di) - xhat sum(di xhat)) with k = gamma inv_std / m, expanded to
// a di + bx x + c0 exactly as the CPU writes it.
extern "C" __global__ void bn_apply_grads(const float* x, const float* y, const float* dy,
                                          const float* gamma_beta, const float* saved,
                                          const float* dgamma_beta, float* dx, u64 c, u64 m,
                                          int relu) {
    GRID_STRIDE(i, c * m) {
        u64 ch = i / m;
        float mean = saved[ch], inv = saved[c + ch], gamma = gamma_beta[ch];
        float sdx = dgamma_beta[ch], sd = dgamma_beta[c + ch];
        float k = gamma * inv / (float)m;
        float a = k * (float)m;
        float bx = -k * inv * sdx;
        float c0 = k * (inv * sdx * mean - sd);
        float di = dy[i];
        if (relu && y[i] <= 0.0f) di = 0.0f;
        dx[i] = a * di + bx * x[i] + c0;
    }
}
