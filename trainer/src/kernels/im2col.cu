// im2col and its adjoint for Conv2d over channel-major activations [c, n, h, w].
// The column matrix is [c * kh * kw, nc * oh * ow] for images n0 .. n0 + nc.

// One thread per column entry: the input pixel under kernel tap (ky, kx) of output
// (oy, ox), or 0 in the padding.
extern "C" __global__ void im2col(const float* x, float* col, int c, u64 n, int h, int w,
                                  int kh, int kw, int stride, int pad, int oh, int ow,
                                  u64 n0, u64 nc) {
    u64 ohw = (u64)oh * ow;
    u64 row = nc * ohw;
    u64 hw = (u64)h * w;
    GRID_STRIDE(i, (u64)c * kh * kw * row) {
        u64 r = i / row, j = i % row;
        int ci = (int)(r / (kh * kw));
        int ky = (int)((r / kw) % kh);
        int kx = (int)(r % kw);
        u64 ni = j / ohw;
        int o = (int)(j % ohw);
        int oy = o / ow, ox = o % ow;
        int iy = oy * stride + ky - pad;
        int ix = ox * stride + kx - pad;
        float v = 0.0f;
        if (iy >= 0 && iy < h && ix >= 0 && ix < w)
            v = x[((u64)ci * n + n0 + ni) * hw + (u64)iy * w + ix];
        col[i] = v;
    }
}

// One thread per input pixel of images n0 .. n0 + nc: overwrites it with the sum of its
// column entries, taps in (ky, kx) order, the order the CPU adds them in. No atomics.
extern "C" __global__ void col2im(const float* col, float* dx, int c, u64 n, int h, int w,
                                  int kh, int kw, int stride, int pad, int oh, int ow,
                                  u64 n0, u64 nc) {
    u64 ohw = (u64)oh * ow;
    u64 row = nc * ohw;
    u64 hw = (u64)h * w;
    GRID_STRIDE(i, (u64)c * nc * hw) {
        int ci = (int)(i / (nc * hw));
        u64 rem = i % (nc * hw);
        u64 ni = rem / hw;
        int px = (int)(rem % hw);
        int iy = px / w, ix = px % w;
        float acc = 0.0f;
        for (int ky = 0; ky < kh; ky++) {
            int ty = iy + pad - ky;
            if (ty < 0 || ty % stride != 0 || ty / stride >= oh) continue;
            int oy = ty / stride;
            for (int kx = 0; kx < kw; kx++) {
                int tx = ix + pad - kx;
                if (tx < 0 || tx % stride != 0 || tx / stride >= ow) continue;
                int ox = tx / stride;
                u64 r = ((u64)ci * kh + ky) * kw + kx;
                acc += col[r * row + ni * ohw + (u64)oy * ow + ox];
            }
        }
        dx[((u64)ci * n + n0 + ni) * hw + px] = acc;
    }
}
