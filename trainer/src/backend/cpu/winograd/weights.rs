//! The kernels' side of Winograd F(2x2, 3x3): each 3x3 kernel taken to its 4x4
//! transform `G g G^T`, and the transformed weight gradient taken back to 3x3.

use super::plan::Plan;

/// `G g G^T` of every 3x3 kernel `w[cout][c]` into `u[16][cout][c]`.
pub(super) fn weight_transform(w: &[f32], p: &Plan, u: &mut [f32]) {
    let plane = p.cout * p.c;
    for (k, g) in w.chunks_exact(9).enumerate() {
        // G g: each column of the kernel, from 3 values to 4.
        let mut t = [[0f32; 3]; 4];
        for x in 0..3 {
            let (g0, g1, g2) = (g[x], g[3 + x], g[6 + x]);
            t[0][x] = g0;
            t[1][x] = 0.5 * (g0 + g1 + g2);
            t[2][x] = 0.5 * (g0 - g1 + g2);
            t[3][x] = g2;
        }
        // Then each row, times G^T.
        for (i, r) in t.iter().enumerate() {
            let [g0, g1, g2] = *r;
            let out = [g0, 0.5 * (g0 + g1 + g2), 0.5 * (g0 - g1 + g2), g2];
            for (j, v) in out.into_iter().enumerate() {
                u[(i * 4 + j) * plane + k] = v;
            }
        }
    }
}

/// The weight gradient `G^T dU G` of every kernel, from `du[16][cout][c]` into
/// `dw[cout][c][3][3]`.
pub(super) fn weight_gradient(du: &[f32], p: &Plan, dw: &mut [f32]) {
    let plane = p.cout * p.c;
    // G^T applied to four values.
    let gt = |m: [f32; 4]| {
        [
            m[0] + 0.5 * (m[1] + m[2]),
            0.5 * (m[1] - m[2]),
            0.5 * (m[1] + m[2]) + m[3],
        ]
    };
    for (k, g) in dw.chunks_exact_mut(9).enumerate() {
        let mut t = [[0f32; 3]; 4];
        for (i, r) in t.iter_mut().enumerate() {
            *r = gt(std::array::from_fn(|j| du[(i * 4 + j) * plane + k]));
        }
        for x in 0..3 {
            let col = gt([t[0][x], t[1][x], t[2][x], t[3][x]]);
            for y in 0..3 {
                g[y * 3 + x] = col[y];
            }
        }
    }
}
