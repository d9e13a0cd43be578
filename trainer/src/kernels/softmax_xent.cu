// Fused softmax + cross-entropy over logits [classes, n].

// One thread per sample j: the loss -log softmax(z)[t], whether the argmax is t, and
// (if dz) the gradient of the mean loss. A label out of range cannot return an error
// from here: it is recorded in *bad (the smallest such row wins, via atomicMax on the
// complement of (row << 32 | label)) and the host reports it at its next download.
extern "C" __global__ void xent_rows(const float* z, const u32* labels, u64 classes, u64 n,
                                     float* dz, int has_dz, float inv_n, float* rows,
                                     u64* bad) {
    GRID_STRIDE(j, n) {
        u32 t = labels[j];
        if ((u64)t >= classes) {
            atomicMax(bad, ~((j << 32) | (u64)t));
            rows[2 * j] = QUIET_NAN;
            rows[2 * j + 1] = 0.0f;
            if (has_dz)
                for (u64 k = 0; k < classes; k++) dz[k * n + j] = 0.0f;
            continue;
        }
        float mx = NEG_INF;
        u64 arg = 0;
        for (u64 k = 0; k < classes; k++) {
            float v = z[k * n + j];
            if (v > mx) {
                mx = v;
                arg = k;
            }
        }
        float sum = 0.0f;
        for (u64 k = 0; k < classes; k++) sum += expf(z[k * n + j] - mx);
        rows[2 * j] = logf(sum) + mx - z[(u64)t * n + j];
        rows[2 * j + 1] = arg == (u64)t ? 1.0f : 0.0f;
        if (has_dz) {
            for (u64 k = 0; k < classes; k++) {
                float p = expf(z[k * n + j] - mx) / sum;
                dz[k * n + j] = (p - (k == (u64)t ? 1.0f : 0.0f)) * inv_n;
            }
        }
    }
}

// Soft targets t [classes, n] (MixUp/CutMix weights, label smoothing): one thread per
// sample j, loss sum_k t[k,j] * (logsumexp(z[.,j]) - z[k,j]), correct when the argmax of
// the logits is the argmax of the targets, gradient (softmax * sum_k t - t) / n.
extern "C" __global__ void xent_soft_rows(const float* z, const float* t, u64 classes, u64 n,
                                          float* dz, int has_dz, float inv_n, float* rows) {
    GRID_STRIDE(j, n) {
        float mx = NEG_INF, tmx = NEG_INF;
        u64 arg = 0, targ = 0;
        for (u64 k = 0; k < classes; k++) {
            float v = z[k * n + j];
            if (v > mx) {
                mx = v;
                arg = k;
            }
            float tv = t[k * n + j];
            if (tv > tmx) {
                tmx = tv;
                targ = k;
            }
        }
        float sum = 0.0f;
        for (u64 k = 0; k < classes; k++) sum += expf(z[k * n + j] - mx);
        float lse = logf(sum) + mx;
        float loss = 0.0f, tsum = 0.0f;
        for (u64 k = 0; k < classes; k++) {
            float tv = t[k * n + j];
            loss += tv * (lse - z[k * n + j]);
            tsum += tv;
        }
        rows[2 * j] = loss;
        rows[2 * j + 1] = arg == targ ? 1.0f : 0.0f;
        if (has_dz) {
            for (u64 k = 0; k < classes; k++) {
                float p = expf(z[k * n + j] - mx) / sum;
                dz[k * n + j] = (p * tsum - t[k * n + j]) * inv_n;
            }
        }
    }
}

// Sigmoid + binary cross-entropy against k-hot targets t [classes, n] (multi-label):
// one thread per sample j, loss mean_k (max(z, 0) - z t + log(1 + exp(-|z|))), which
// never overflows; correct when every z > 0 matches t > 0.5; gradient of the mean over
// all n * classes terms, (sigmoid(z) - t) * inv_nk.
extern "C" __global__ void bce_rows(const float* z, const float* t, u64 classes, u64 n,
                                    float* dz, int has_dz, float inv_k, float inv_nk,
                                    float* rows) {
    GRID_STRIDE(j, n) {
        float loss = 0.0f;
        int all_right = 1;
        for (u64 k = 0; k < classes; k++) {
            float v = z[k * n + j];
            float tv = t[k * n + j];
            float e = expf(-fabsf(v));
            loss += fmaxf(v, 0.0f) - v * tv + log1pf(e);
            all_right &= (v > 0.0f) == (tv > 0.5f);
            if (has_dz) {
                float sig = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
                dz[k * n + j] = (sig - tv) * inv_nk;
            }
        }
        rows[2 * j] = loss * inv_k;
        rows[2 * j + 1] = all_right ? 1.0f : 0.0f;
    }
}

// One block: stats = [sum of losses, number correct], summed in double in a fixed order.
extern "C" __global__ void xent_sum(const float* rows, u64 n, float* stats) {
    __shared__ double sh[RED_THREADS];
    double loss = 0.0, correct = 0.0;
    for (u64 j = threadIdx.x; j < n; j += RED_THREADS) {
        loss += (double)rows[2 * j];
        correct += (double)rows[2 * j + 1];
    }
    loss = block_sum(loss, sh);
    correct = block_sum(correct, sh);
    if (threadIdx.x == 0) {
        stats[0] = (float)loss;
        stats[1] = (float)correct;
    }
}
