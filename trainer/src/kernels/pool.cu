// Max pooling (no padding) and global average pooling over independent planes.

// One thread per output: the window's maximum and its index within the plane. Both
// cases start from -inf at the window's first element, so NaN never wins (a window of
// NaN gives -inf), and `>` keeps the first maximum: the CPU's rule on both its paths.
extern "C" __global__ void maxpool_forward(const float* x, float* y, u32* argmax, u64 planes,
                                           int h, int w, int k, int stride, int oh, int ow) {
    u64 ohw = (u64)oh * ow;
    GRID_STRIDE(i, planes * ohw) {
        u64 p = i / ohw;
        int o = (int)(i % ohw);
        int oy = o / ow, ox = o % ow;
        const float* plane = x + p * (u64)h * w;
        float best;
        int at;
        if (k == 2 && stride == 2) {
            int r0 = 2 * oy * w + 2 * ox, r1 = r0 + w;
            int idx[4] = {r0, r0 + 1, r1, r1 + 1};
            best = NEG_INF;
            at = idx[0];
            for (int j = 0; j < 4; j++) {
                float v = plane[idx[j]];
                if (v > best) {
                    best = v;
                    at = idx[j];
                }
            }
        } else {
            best = NEG_INF;
            at = oy * stride * w + ox * stride;
            for (int ky = 0; ky < k; ky++) {
                for (int kx = 0; kx < k; kx++) {
                    int j = (oy * stride + ky) * w + ox * stride + kx;
                    if (plane[j] > best) {
                        best = plane[j];
                        at = j;
                    }
                }
            }
        }
        y[i] = best;
        argmax[i] = (u32)at;
    }
}

// One thread per input: gathers the gradients of the outputs whose recorded maximum is
// this input, in increasing output order, the order in which the CPU scatters them
// (so overlapping windows sum identically). No atomics.
extern "C" __global__ void maxpool_backward(const float* dy, const u32* argmax, float* dx,
                                            u64 planes, int h, int w, int k, int stride,
                                            int oh, int ow) {
    u64 hw = (u64)h * w, ohw = (u64)oh * ow;
    GRID_STRIDE(i, planes * hw) {
        u64 p = i / hw;
        int idx = (int)(i % hw);
        int iy = idx / w, ix = idx % w;
        // Outputs whose window [o * stride, o * stride + k) holds this row / column.
        int oy0 = iy < k ? 0 : (iy - k) / stride + 1;
        int oy1 = iy / stride < oh - 1 ? iy / stride : oh - 1;
        int ox0 = ix < k ? 0 : (ix - k) / stride + 1;
        int ox1 = ix / stride < ow - 1 ? ix / stride : ow - 1;
        const float* dyp = dy + p * ohw;
        const u32* amp = argmax + p * ohw;
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++) {
            for (int ox = ox0; ox <= ox1; ox++) {
                int o = oy * ow + ox;
                if (amp[o] == (u32)idx) acc += dyp[o];
            }
        }
        dx[i] = acc;
    }
}

// One thread per plane: y[p] = sum(x[p, ..hw]) * inv, summed in order as on the CPU
// (planes are small after the last stage; there are many of them).
extern "C" __global__ void avgpool_forward(const float* x, float* y, u64 planes, u64 hw,
                                           float inv) {
    GRID_STRIDE(p, planes) {
        const float* xp = x + p * hw;
        float s = 0.0f;
        for (u64 j = 0; j < hw; j++) s += xp[j];
        y[p] = s * inv;
    }
}

// dx[p, j] = dy[p] * inv.
extern "C" __global__ void avgpool_backward(const float* dy, float* dx, u64 planes, u64 hw,
                                            float inv) {
    GRID_STRIDE(i, planes * hw) dx[i] = dy[i / hw] * inv;
}
