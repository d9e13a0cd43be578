// The optimizers' fused update: one pass over the model's flat parameter buffer.
// Elements 0 .. decay_len (the weights) get weight decay; biases and norms do not.

// SGD with momentum (PyTorch's form: b = mu b + d; step b, or d + mu b if Nesterov).
extern "C" __global__ void sgd_step(float* p, const float* g, float* buf, u64 n, u64 decay_len,
                                    float lr, float momentum, float weight_decay,
                                    int nesterov) {
    GRID_STRIDE(i, n) {
        float wd = i < decay_len ? weight_decay : 0.0f;
        float d = g[i] + wd * p[i];
        float b = momentum * buf[i] + d;
        buf[i] = b;
        float step = nesterov ? d + momentum * b : b;
        p[i] -= lr * step;
    }
}

// AdamW: decoupled decay p -= lr wd p, then the bias-corrected Adam step. c1 and c2 are
// 1 - beta^t, computed on the host as the CPU does; omb1 and omb2 are 1 - beta.
extern "C" __global__ void adamw_step(float* p, const float* g, float* m, float* v, u64 n,
                                      u64 decay_len, float lr, float beta1, float beta2,
                                      float omb1, float omb2, float eps, float weight_decay,
                                      float c1, float c2) {
    GRID_STRIDE(i, n) {
        float pi = p[i];
        if (i < decay_len) pi -= lr * weight_decay * pi;
        float gi = g[i];
        float mi = beta1 * m[i] + omb1 * gi;
        float vi = beta2 * v[i] + omb2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / c1;
        float vhat = vi / c2;
        p[i] = pi - lr * mhat / (sqrtf(vhat) + eps);
    }
}
