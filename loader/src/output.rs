//! What a batch's images are turned into at handout: u8 (N, H, W, C) to a dtype
//! (u8, f32, f16, bf16), a layout (NHWC, NCHW) and an optional per-channel
//! normalisation, on the host. The GPU kernel (python/src/device_kernel.cu) computes
//! the same values, so this is the reference it is tested against.
//!
//! The arithmetic, in f32, without fused multiply-add, in this order:
//!
//! ```text
//! y = (x / 255 - mean[c]) / std[c]      with normalize
//! y = x / 255                           without it, for a float dtype
//! ```
//!
//! then rounded to f16 or bf16 (round to nearest, ties to even) where asked. A u8 input
//! has 256 values per channel, so the host computes each channel's 256 results once
//! (a table) and the pass over the batch is one table look-up per byte: the same bits
//! as the formula, without a division per element.

use std::fmt;
use std::str::FromStr;

/// The element type of the images handed out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutDtype {
    /// The decoded bytes, as they are (the default).
    #[default]
    U8,
    /// `x / 255`, or normalised.
    F32,
    /// IEEE half precision, rounded from the f32 value.
    F16,
    /// bfloat16, rounded from the f32 value. numpy has no bfloat16: on the host it is
    /// handed out as uint16 bit patterns.
    Bf16,
}

impl OutDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            OutDtype::U8 => 1,
            OutDtype::F32 => 4,
            OutDtype::F16 | OutDtype::Bf16 => 2,
        }
    }

    /// The name `dtype=` takes.
    pub fn name(self) -> &'static str {
        match self {
            OutDtype::U8 => "uint8",
            OutDtype::F32 => "float32",
            OutDtype::F16 => "float16",
            OutDtype::Bf16 => "bfloat16",
        }
    }
}

/// A `dtype=`, `layout=` or `normalize=` value the conversion cannot take.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OutputError {
    /// Not one of the dtypes.
    #[error("must be \"uint8\", \"float32\", \"float16\" or \"bfloat16\", got {0:?}")]
    Dtype(String),
    /// Not one of the layouts.
    #[error("must be \"NHWC\" or \"NCHW\", got {0:?}")]
    Layout(String),
    /// Mean and std of different lengths, or of another length than the images have
    /// channels.
    #[error("has {mean} mean(s) and {std} std(s) for images of {channels} channel(s): give one of each per channel")]
    Channels {
        /// Means given.
        mean: usize,
        /// Stds given.
        std: usize,
        /// Channels of the images.
        channels: usize,
    },
    /// A std of zero, negative, or not finite; or a mean not finite.
    #[error("{what}[{index}] is {value}: {rule}")]
    Value {
        /// "mean" or "std".
        what: &'static str,
        /// Which channel.
        index: usize,
        /// The value given.
        value: f32,
        /// What it must be.
        rule: &'static str,
    },
    /// Normalising bytes that stay bytes.
    #[error("normalize needs a float dtype (\"float32\", \"float16\" or \"bfloat16\"); the values do not fit in uint8")]
    NormalizeU8,
}

impl FromStr for OutDtype {
    type Err = OutputError;

    fn from_str(s: &str) -> Result<Self, OutputError> {
        Ok(match s {
            "uint8" | "u8" => OutDtype::U8,
            "float32" | "f32" => OutDtype::F32,
            "float16" | "f16" | "half" => OutDtype::F16,
            "bfloat16" | "bf16" => OutDtype::Bf16,
            _ => return Err(OutputError::Dtype(s.into())),
        })
    }
}

impl fmt::Display for OutDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The axis order of the images handed out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutLayout {
    /// (N, H, W, C): the decoded order (the default).
    #[default]
    Nhwc,
    /// (N, C, H, W): planes, as torchvision's models take them.
    Nchw,
}

impl FromStr for OutLayout {
    type Err = OutputError;

    fn from_str(s: &str) -> Result<Self, OutputError> {
        match s {
            "NHWC" | "nhwc" => Ok(OutLayout::Nhwc),
            "NCHW" | "nchw" => Ok(OutLayout::Nchw),
            _ => Err(OutputError::Layout(s.into())),
        }
    }
}

/// Per-channel mean and std on the 0-1 scale (torchvision's convention).
#[derive(Clone, Debug, PartialEq)]
pub struct Normalize {
    mean: Vec<f32>,
    std: Vec<f32>,
}

impl Normalize {
    /// Checks each value; the channel count is checked against the images by
    /// [`OutputSpec::check`].
    pub fn new(mean: Vec<f32>, std: Vec<f32>) -> Result<Self, OutputError> {
        for (i, &m) in mean.iter().enumerate() {
            if !m.is_finite() {
                return Err(OutputError::Value {
                    what: "mean",
                    index: i,
                    value: m,
                    rule: "a mean must be a finite number",
                });
            }
        }
        for (i, &s) in std.iter().enumerate() {
            if !(s.is_finite() && s > 0.0) {
                return Err(OutputError::Value {
                    what: "std",
                    index: i,
                    value: s,
                    rule: "a std must be a finite number above 0",
                });
            }
        }
        Ok(Normalize { mean, std })
    }

    /// The means.
    pub fn mean(&self) -> &[f32] {
        &self.mean
    }

    /// The stds.
    pub fn std(&self) -> &[f32] {
        &self.std
    }
}

/// What the images are handed out as. The default (u8, NHWC, no normalisation) is the
/// decoded bytes, untouched: [`OutputSpec::is_identity`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutputSpec {
    /// Element type.
    pub dtype: OutDtype,
    /// Axis order.
    pub layout: OutLayout,
    /// Per-channel normalisation (float dtypes only).
    pub normalize: Option<Normalize>,
}

impl OutputSpec {
    /// Whether the images leave as they are decoded (no pass over them at all).
    pub fn is_identity(&self) -> bool {
        self.dtype == OutDtype::U8 && self.layout == OutLayout::Nhwc && self.normalize.is_none()
    }

    /// Checks the spec against images of `channels` channels.
    pub fn check(&self, channels: usize) -> Result<(), OutputError> {
        if let Some(n) = &self.normalize {
            if self.dtype == OutDtype::U8 {
                return Err(OutputError::NormalizeU8);
            }
            if n.mean.len() != channels || n.std.len() != channels {
                return Err(OutputError::Channels {
                    mean: n.mean.len(),
                    std: n.std.len(),
                    channels,
                });
            }
        }
        Ok(())
    }

    /// The shape of a converted batch of `shape` (N, H, W, C).
    pub fn out_shape(&self, shape: [usize; 4]) -> [usize; 4] {
        let [n, h, w, c] = shape;
        match self.layout {
            OutLayout::Nhwc => shape,
            OutLayout::Nchw => [n, c, h, w],
        }
    }

    /// Bytes of a converted batch of `shape` (N, H, W, C).
    pub fn out_bytes(&self, shape: [usize; 4]) -> usize {
        shape.iter().product::<usize>() * self.dtype.size()
    }

    /// Per channel, the scale and shift the formula uses, as the GPU kernel takes
    /// them: `(mean[c], std[c])`, or `(0, 1)` without normalisation (the kernel then
    /// computes `(x / 255 - 0) / 1`, which is exactly `x / 255`).
    pub fn affine(&self, channels: usize) -> Vec<(f32, f32)> {
        (0..channels)
            .map(|c| match &self.normalize {
                Some(n) => (n.mean[c], n.std[c]),
                None => (0.0, 1.0),
            })
            .collect()
    }

    /// Converts `src`, u8 (N, H, W, C) of `shape`, into `dst`, which holds
    /// [`OutputSpec::out_bytes`] bytes (native-endian elements). The spec must have
    /// passed [`OutputSpec::check`] for `shape`'s channels.
    pub fn convert(&self, src: &[u8], shape: [usize; 4], dst: &mut [u8]) {
        let [n, h, w, c] = shape;
        debug_assert_eq!(src.len(), n * h * w * c);
        debug_assert_eq!(dst.len(), self.out_bytes(shape));
        match self.dtype {
            OutDtype::U8 => {
                let lut: Vec<[[u8; 1]; 256]> =
                    (0..c).map(|_| std::array::from_fn(|x| [x as u8])).collect();
                scatter(src, shape, self.layout, &lut, dst);
            }
            OutDtype::F32 => {
                let lut = self.tables(c, |v| v.to_ne_bytes());
                scatter(src, shape, self.layout, &lut, dst);
            }
            OutDtype::F16 => {
                let lut = self.tables(c, |v| half::f16::from_f32(v).to_bits().to_ne_bytes());
                scatter(src, shape, self.layout, &lut, dst);
            }
            OutDtype::Bf16 => {
                let lut = self.tables(c, |v| half::bf16::from_f32(v).to_bits().to_ne_bytes());
                scatter(src, shape, self.layout, &lut, dst);
            }
        }
    }

    /// Each channel's 256 results, as element bytes.
    fn tables<const B: usize>(
        &self,
        channels: usize,
        to: impl Fn(f32) -> [u8; B],
    ) -> Vec<[[u8; B]; 256]> {
        self.affine(channels)
            .into_iter()
            .map(|(mean, std)| std::array::from_fn(|x| to(value(x as u8, mean, std))))
            .collect()
    }
}

/// The formula, in f32, in the documented order (the GPU kernel's order).
#[inline]
pub fn value(x: u8, mean: f32, std: f32) -> f32 {
    (f32::from(x) / 255.0 - mean) / std
}

/// One pass over the batch: each byte through its channel's table (`lut[c][x]`, the
/// element's bytes), written at its place in `layout`.
fn scatter<const B: usize>(
    src: &[u8],
    shape: [usize; 4],
    layout: OutLayout,
    lut: &[[[u8; B]; 256]],
    dst: &mut [u8],
) {
    let [_, h, w, c] = shape;
    if c == 0 {
        return;
    }
    match layout {
        OutLayout::Nhwc => {
            for (px, out) in src.chunks_exact(c).zip(dst.chunks_exact_mut(B * c)) {
                for ((&x, table), o) in px.iter().zip(lut).zip(out.chunks_exact_mut(B)) {
                    o.copy_from_slice(&table[usize::from(x)]);
                }
            }
        }
        OutLayout::Nchw => {
            let hw = h * w;
            if hw == 0 {
                return;
            }
            // Plane by plane: the writes are contiguous, the reads step by `c`.
            for (image, planes) in src
                .chunks_exact(hw * c)
                .zip(dst.chunks_exact_mut(B * hw * c))
            {
                for (ch, plane) in planes.chunks_exact_mut(B * hw).enumerate() {
                    let table = &lut[ch];
                    for (x, o) in image[ch..].iter().step_by(c).zip(plane.chunks_exact_mut(B)) {
                        o.copy_from_slice(&table[usize::from(*x)]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dtype: &str, layout: &str, norm: Option<(&[f32], &[f32])>) -> OutputSpec {
        OutputSpec {
            dtype: dtype.parse().unwrap(),
            layout: layout.parse().unwrap(),
            normalize: norm.map(|(m, s)| Normalize::new(m.to_vec(), s.to_vec()).unwrap()),
        }
    }

    /// Every byte value in every channel, in a 2x3 batch of 2 images.
    fn batch() -> (Vec<u8>, [usize; 4]) {
        let shape = [2, 2, 3, 3];
        let len = shape.iter().product();
        ((0..len).map(|i| (i * 37 % 256) as u8).collect(), shape)
    }

    fn f32s(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn u16s(b: &[u8]) -> Vec<u16> {
        b.chunks_exact(2)
            .map(|c| u16::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn run(s: &OutputSpec, src: &[u8], shape: [usize; 4]) -> Vec<u8> {
        s.check(shape[3]).unwrap();
        let mut out = vec![0xAB; s.out_bytes(shape)];
        s.convert(src, shape, &mut out);
        out
    }

    /// The element of `src` (NHWC) that lands at flat index `i` of the output.
    fn source_index(layout: OutLayout, shape: [usize; 4], i: usize) -> (usize, usize) {
        let [_, h, w, c] = shape;
        match layout {
            OutLayout::Nhwc => (i, i % c),
            OutLayout::Nchw => {
                let (img, rest) = (i / (c * h * w), i % (c * h * w));
                let (ch, p) = (rest / (h * w), rest % (h * w));
                ((img * h * w + p) * c + ch, ch)
            }
        }
    }

    #[test]
    fn the_default_is_the_identity_and_anything_else_is_not() {
        assert!(OutputSpec::default().is_identity());
        assert!(!spec("uint8", "NCHW", None).is_identity());
        assert!(!spec("float32", "NHWC", None).is_identity());
    }

    #[test]
    fn float32_is_the_formula_in_f32_at_each_place_of_either_layout() {
        let (src, shape) = batch();
        let (mean, std) = ([0.485f32, 0.456, 0.406], [0.229f32, 0.224, 0.225]);
        for layout in ["NHWC", "NCHW"] {
            for norm in [None, Some((&mean[..], &std[..]))] {
                let s = spec("float32", layout, norm);
                let out = f32s(&run(&s, &src, shape));
                assert_eq!(out.len(), src.len());
                for (i, &y) in out.iter().enumerate() {
                    let (j, ch) = source_index(s.layout, shape, i);
                    let x = src[j];
                    let (m, d) = norm.map_or((0.0, 1.0), |(m, d)| (m[ch], d[ch]));
                    // Bit for bit the documented order, and within 1e-6 of the exact value.
                    assert_eq!(y.to_bits(), ((x as f32 / 255.0 - m) / d).to_bits());
                    let exact = (x as f64 / 255.0 - m as f64) / d as f64;
                    assert!(
                        (y as f64 - exact).abs() <= 1e-6 * exact.abs().max(1.0),
                        "{x} {y} {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn uint8_nchw_is_a_transpose() {
        let (src, shape) = batch();
        let s = spec("uint8", "NCHW", None);
        assert_eq!(s.out_shape(shape), [2, 3, 2, 3]);
        let out = run(&s, &src, shape);
        for (i, &y) in out.iter().enumerate() {
            assert_eq!(y, src[source_index(s.layout, shape, i).0]);
        }
    }

    /// Round to nearest, ties to even, from an f32's bits (finite values).
    fn bf16_by_hand(v: f32) -> u16 {
        let b = v.to_bits();
        ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
    }

    #[test]
    fn half_and_bfloat16_round_the_f32_value_to_nearest_even() {
        let (src, shape) = batch();
        let norm = Some((&[0.5f32, 0.25, 0.1][..], &[0.5f32, 0.3, 0.2][..]));
        let f = f32s(&run(&spec("float32", "NCHW", norm), &src, shape));
        let h = u16s(&run(&spec("float16", "NCHW", norm), &src, shape));
        let b = u16s(&run(&spec("bfloat16", "NCHW", norm), &src, shape));
        for ((&v, &h), &b) in f.iter().zip(&h).zip(&b) {
            assert_eq!(b, bf16_by_hand(v), "{v}");
            let hv = half::f16::from_bits(h).to_f32();
            // Half has 11 significant bits: within half a unit in the last place.
            assert!(
                (hv - v).abs() <= v.abs() * 2f32.powi(-11) + 2f32.powi(-25),
                "{v} {hv}"
            );
        }
        // A tie: 1 + 2^-8 lies halfway between two bf16 values; even is 1.0.
        assert_eq!(bf16_by_hand(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(half::bf16::from_f32(1.0 + 2f32.powi(-8)).to_bits(), 0x3f80);
        assert_eq!(
            half::bf16::from_f32(1.0 + 3.0 * 2f32.powi(-8)).to_bits(),
            0x3f82
        );
    }

    #[test]
    fn bad_values_are_errors_that_say_what_is_wrong() {
        let e = "int8".parse::<OutDtype>().unwrap_err().to_string();
        assert!(e.contains("int8") && e.contains("float32"), "{e}");
        let e = "CHW".parse::<OutLayout>().unwrap_err().to_string();
        assert!(e.contains("CHW") && e.contains("NCHW"), "{e}");
        let e = Normalize::new(vec![0.5; 3], vec![0.2, 0.0, 0.2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("std[1]") && e.contains("above 0"), "{e}");
        let e = Normalize::new(vec![f32::NAN], vec![1.0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("mean[0]"), "{e}");
        let s = spec("float32", "NHWC", Some((&[0.5, 0.5], &[0.2, 0.2])));
        let e = s.check(3).unwrap_err().to_string();
        assert!(e.contains("2 mean(s)") && e.contains("3 channel(s)"), "{e}");
        assert!(s.check(2).is_ok());
        let s = spec("uint8", "NHWC", Some((&[0.5], &[0.2])));
        assert_eq!(s.check(1), Err(OutputError::NormalizeU8));
    }
}
