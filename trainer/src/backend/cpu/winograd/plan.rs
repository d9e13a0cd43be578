//! How a Winograd call cuts its batch: groups of images, one task each, and blocks of
//! images whose transformed matrices fit `BLOCK_FLOATS`; where each part lives in the
//! scratch; each task's buffers for the transforms; and the loop that hands every block
//! to the caller's closure.

use rayon::prelude::*;

use super::{GROUPS, XI};
use crate::backend::cpu::conv::planes_by_image;
use crate::backend::ConvGeom;

/// How a batch is cut, and where things are in the scratch: the transformed weights
/// `U` first (`[16][cout][c]`), then per group the block's transformed input `V`
/// (`[16][c][tiles]`), its transformed output or output gradient `M` (`[16][cout][tiles]`)
/// and the group's transformed weight gradient (`[16][cout][c]`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    pub(super) c: usize,
    pub(super) cout: usize,
    /// Tile rows and columns of an image, and their product.
    pub(super) th: usize,
    pub(super) tw: usize,
    pub(super) tiles: usize,
    /// Images per block.
    pub(super) block: usize,
    pub(super) groups: usize,
    pub(super) per_group: usize,
}

impl Plan {
    pub(super) fn new(geom: &ConvGeom, cout: usize, block_floats: usize) -> Self {
        let (th, tw) = (geom.h.div_ceil(2), geom.w.div_ceil(2));
        let tiles = th * tw;
        let n = geom.n.max(1);
        let per_image = XI * (geom.c + cout) * tiles;
        let block = (block_floats / per_image.max(1)).clamp(1, n);
        Self {
            c: geom.c,
            cout,
            th,
            tw,
            tiles,
            block,
            groups: GROUPS.min(n),
            per_group: block * per_image + XI * cout * geom.c,
        }
    }

    /// Nothing to compute: no images, no pixels or no output channels.
    pub(super) fn is_empty(&self, geom: &ConvGeom) -> bool {
        geom.n == 0 || geom.h == 0 || geom.w == 0 || self.cout == 0
    }

    pub(super) fn weights(&self) -> usize {
        XI * self.cout * self.c
    }

    pub(super) fn scratch(&self) -> usize {
        self.weights() + self.groups * self.per_group
    }

    /// Images of group `g` of a batch of `n`.
    fn images(&self, g: usize, n: usize) -> (usize, usize) {
        (g * n / self.groups, (g + 1) * n / self.groups)
    }

    /// A group's scratch cut into `V` and `M` for blocks of `nb` images (dense, `nb *
    /// tiles` columns), and its weight gradient.
    fn split<'s>(
        &self,
        sc: &'s mut [f32],
        nb: usize,
    ) -> (&'s mut [f32], &'s mut [f32], &'s mut [f32]) {
        let tiles = self.block * self.tiles;
        let (v, rest) = sc.split_at_mut(XI * self.c * tiles);
        let (m, du) = rest.split_at_mut(XI * self.cout * tiles);
        let tb = nb * self.tiles;
        (
            &mut v[..XI * self.c * tb],
            &mut m[..XI * self.cout * tb],
            du,
        )
    }
}

/// The planes of a group's images, by image then channel.
type Planes<'a> = Vec<Vec<&'a mut [f32]>>;

/// The planes of a block's images, by image then channel.
pub(super) type Images<'p, 'a> = &'p mut [Vec<&'a mut [f32]>];

/// One block's work, as `Plan::each_block` hands it over.
pub(super) struct Job<'j, 'a> {
    /// The block's index in its group.
    pub(super) index: usize,
    pub(super) blk: Block<'j>,
    /// The block's transformed input `V`, its `M`, and its group's transformed weight
    /// gradient.
    pub(super) v: &'j mut [f32],
    pub(super) m: &'j mut [f32],
    pub(super) du: &'j mut [f32],
    /// The planes of the block's images (none if the call gave none).
    pub(super) out: Images<'j, 'a>,
    /// The task's buffers for the transforms.
    pub(super) wk: &'j mut Work,
}

impl Plan {
    /// Runs `f` on every block, the groups in parallel (a task each, with its part of
    /// `scratch`, its images' planes, none if `planes` has none, and its transforms'
    /// buffers), a group's blocks in order.
    pub(super) fn each_block<F>(
        &self,
        geom: &ConvGeom,
        scratch: &mut [f32],
        planes: &mut [Planes<'_>],
        f: F,
    ) where
        F: Fn(Job<'_, '_>) + Sync,
    {
        scratch
            .par_chunks_mut(self.per_group)
            .zip(planes.par_iter_mut())
            .enumerate()
            .for_each(|(g, (sc, planes))| {
                let (i0, i1) = self.images(g, geom.n);
                let mut wk = Work::new(self);
                for (bi, b0) in (i0..i1).step_by(self.block).enumerate() {
                    let nb = self.block.min(i1 - b0);
                    let blk = Block {
                        geom,
                        p: self,
                        b0,
                        nb,
                    };
                    let (v, m, du) = self.split(sc, nb);
                    f(Job {
                        index: bi,
                        blk,
                        v,
                        m,
                        du,
                        out: planes.get_mut(b0 - i0..).unwrap_or_default(),
                        wk: &mut wk,
                    });
                }
            });
    }
}

/// One block of images: the convolution, its plan, and images `b0..b0 + nb`.
#[derive(Clone, Copy)]
pub(super) struct Block<'a> {
    pub(super) geom: &'a ConvGeom,
    pub(super) p: &'a Plan,
    pub(super) b0: usize,
    pub(super) nb: usize,
}

/// Each group's planes of a `[c, n, h, w]` activation: `[group][image - i0][channel]`.
pub(super) fn planes_by_group<'a>(
    buf: &'a mut [f32],
    geom: &ConvGeom,
    p: &Plan,
) -> Vec<Planes<'a>> {
    let mut all = planes_by_image(buf, geom, 0, geom.n).into_iter();
    (0..p.groups)
        .map(|g| {
            let (i0, i1) = p.images(g, geom.n);
            all.by_ref().take(i1 - i0).collect()
        })
        .collect()
}

/// A task's buffers for the transforms of its blocks, made once per call and group.
pub(super) struct Work {
    /// Sub-planes `[a * 2 + b]`: the pixels of each image at even or odd rows (`a`) and
    /// columns (`b`), either of the zero-padded input (`(th + 1) x (tw + 1)` an image,
    /// see `transforms::split_padded`) or of the output (`th x tw`).
    pub(super) sub: [Vec<f32>; 4],
    /// A transform's first pass: up to sixteen arrays, of one value per element of the
    /// block's padded sub-planes or per tile.
    pub(super) one: Vec<f32>,
    /// The input gradient's second pass: sixteen arrays of one value per tile.
    pub(super) two: Vec<f32>,
    /// A row of zeros, `tw` long: the missing neighbour rows at the planes' edges.
    pub(super) zeros: Vec<f32>,
}

impl Work {
    fn new(p: &Plan) -> Self {
        let padded = p.block * (p.th + 1) * (p.tw + 1);
        Self {
            sub: std::array::from_fn(|_| vec![0.0; padded]),
            one: vec![0.0; 16 * padded],
            two: vec![0.0; 16 * p.block * p.tiles],
            zeros: vec![0.0; p.tw],
        }
    }
}
