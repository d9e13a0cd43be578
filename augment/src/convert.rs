//! Pixel layouts a decoder hands out (8 or 16 bit, with or without alpha) and their
//! conversion, in place, to the 1 or 3 u8 channels every batch holds, as PIL's
//! `convert("L")` / `convert("RGB")` do.

/// The pixel layouts a decoder hands us before conversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Native {
    L8,
    La8,
    Rgb8,
    Rgba8,
    L16,
    La16,
    Rgb16,
    Rgba16,
}

impl Native {
    pub(crate) fn bytes_per_pixel(self) -> usize {
        match self {
            Native::L8 => 1,
            Native::La8 | Native::L16 => 2,
            Native::Rgb8 => 3,
            Native::Rgba8 | Native::La16 => 4,
            Native::Rgb16 => 6,
            Native::Rgba16 => 8,
        }
    }
}

/// PIL's `L` conversion: ITU-R 601-2 weights in 16-bit fixed point, rounded.
#[inline]
pub fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((r as u32 * 19595 + g as u32 * 38470 + b as u32 * 7471 + 0x8000) >> 16) as u8
}

/// Read pixel `i` of a `native` buffer as (r, g, b, is_gray).
#[inline]
fn read_pixel(buf: &[u8], i: usize, native: Native) -> (u8, u8, u8, bool) {
    let p = &buf[i * native.bytes_per_pixel()..];
    // 16-bit samples come native-endian from the decoder; keep the high byte as PIL's
    // 16-to-8-bit unpackers do.
    let hi = |k: usize| (u16::from_ne_bytes([p[2 * k], p[2 * k + 1]]) >> 8) as u8;
    match native {
        Native::L8 | Native::La8 => (p[0], p[0], p[0], true),
        Native::Rgb8 | Native::Rgba8 => (p[0], p[1], p[2], false),
        Native::L16 | Native::La16 => {
            let v = hi(0);
            (v, v, v, true)
        }
        Native::Rgb16 | Native::Rgba16 => (hi(0), hi(1), hi(2), false),
    }
}

/// Turn `n` RGB pixels at the start of `buf` into `channels` (1 or 3) channels, as
/// the JPEG path does.
#[cfg(stoker_turbo)]
pub(crate) fn rgb_to_channels(buf: &mut Vec<u8>, n: usize, channels: usize) {
    convert_in_place(buf, n, Native::Rgb8, channels);
}

/// Pack `width`-wide rows of RGBX pixels (`src`) into RGB (`dst`), mirroring each
/// row when `mirror`: a resampled RGBX window becomes the sample, and a horizontal
/// flip that follows costs no pass of its own.
#[cfg_attr(not(stoker_turbo), allow(dead_code))]
pub(crate) fn rgbx_to_rgb(src: &[u8], dst: &mut [u8], width: usize, mirror: bool) {
    let n = dst.len() / 3;
    assert!(width > 0 && n % width == 0 && src.len() == n * 4 && dst.len() == n * 3);
    // Four pixels at a time, as 32-bit words packed into 12 bytes with shifts: no
    // per-byte moves and no bounds check per pixel (a per-pixel loop cost 7% of an
    // rrc:224,flip sample in perf). A mirrored row takes its groups from the end and
    // reverses each; the pixels left over (width not a multiple of 4) go one by one.
    let rest = width % 4;
    for (s, d) in src
        .chunks_exact(width * 4)
        .zip(dst.chunks_exact_mut(width * 3))
    {
        let (body, tail) = d.split_at_mut((width - rest) * 3);
        let groups = body.chunks_exact_mut(12);
        if mirror {
            for (g, out) in s.rchunks_exact(16).zip(groups) {
                let [p0, p1, p2, p3] = words(g);
                pack4([p3, p2, p1, p0], out);
            }
            for (px, out) in s[..rest * 4]
                .chunks_exact(4)
                .rev()
                .zip(tail.chunks_exact_mut(3))
            {
                out.copy_from_slice(&px[..3]);
            }
        } else {
            for (g, out) in s.chunks_exact(16).zip(groups) {
                pack4(words(g), out);
            }
            let left = &s[(width - rest) * 4..];
            for (px, out) in left.chunks_exact(4).zip(tail.chunks_exact_mut(3)) {
                out.copy_from_slice(&px[..3]);
            }
        }
    }
}

/// Four RGBX pixels (16 bytes) as little-endian words, each one load.
#[inline(always)]
fn words(g: &[u8]) -> [u32; 4] {
    let g: &[u8; 16] = g.try_into().unwrap();
    let w = |i: usize| u32::from_le_bytes(*g[i..].first_chunk::<4>().unwrap());
    [w(0), w(4), w(8), w(12)]
}

/// The RGB bytes of four RGBX words, in order, into `out` (12 bytes).
#[inline(always)]
fn pack4(p: [u32; 4], out: &mut [u8]) {
    let m = |v: u32| u64::from(v & 0x00ff_ffff);
    let lo = m(p[0]) | m(p[1]) << 24 | m(p[2]) << 48;
    let hi = (p[2] >> 16 & 0xff) | (p[3] & 0x00ff_ffff) << 8;
    out[..8].copy_from_slice(&lo.to_le_bytes());
    out[8..12].copy_from_slice(&hi.to_le_bytes());
}

/// Turn `n` pixels of `native` layout at the start of `buf` into `channels` channels,
/// in place, and cut `buf` to the result. Shrinking walks forward and growing walks
/// backward, so no pixel is overwritten before it has been read.
pub(crate) fn convert_in_place(buf: &mut Vec<u8>, n: usize, native: Native, channels: usize) {
    let src_bpp = native.bytes_per_pixel();
    let is_identity = matches!((native, channels), (Native::Rgb8, 3) | (Native::L8, 1));
    if !is_identity {
        let write = |buf: &mut [u8], i: usize| {
            let (r, g, b, gray) = read_pixel(buf, i, native);
            if channels == 1 {
                buf[i] = if gray { r } else { luma(r, g, b) };
            } else {
                buf[3 * i..3 * i + 3].copy_from_slice(&[r, g, b]);
            }
        };
        if channels <= src_bpp {
            (0..n).for_each(|i| write(buf, i));
        } else {
            buf.resize(n * channels, 0);
            (0..n).rev().for_each(|i| write(buf, i));
        }
    }
    buf.truncate(n * channels);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rgbx_packs_to_rgb_and_mirrors() {
        for width in [1, 2, 3, 4, 5, 7, 8, 224] {
            for height in [1, 2, 5] {
                let n = width * height;
                let src: Vec<u8> = (0..n * 4).map(|i| (i * 13 + 1) as u8).collect();
                for mirror in [false, true] {
                    let mut want = Vec::with_capacity(n * 3);
                    for row in src.chunks_exact(width * 4) {
                        let px: Vec<&[u8]> = row.chunks_exact(4).collect();
                        let order: Vec<usize> = if mirror {
                            (0..width).rev().collect()
                        } else {
                            (0..width).collect()
                        };
                        for i in order {
                            want.extend_from_slice(&px[i][..3]);
                        }
                    }
                    let mut got = vec![0u8; n * 3];
                    rgbx_to_rgb(&src, &mut got, width, mirror);
                    assert_eq!(got, want, "{width}x{height} mirror {mirror}");
                }
            }
        }
    }

    #[test]
    fn luma_matches_pil_fixed_point() {
        assert_eq!(luma(255, 255, 255), 255);
        assert_eq!(luma(0, 0, 0), 0);
        assert_eq!(luma(255, 0, 0), 76);
        assert_eq!(luma(0, 255, 0), 150);
        assert_eq!(luma(0, 0, 255), 29);
        for v in 0..=255u8 {
            assert_eq!(luma(v, v, v), v);
        }
    }

    #[test]
    fn gray_grows_to_rgb_in_place() {
        let mut buf = vec![1, 2, 3];
        convert_in_place(&mut buf, 3, Native::L8, 3);
        assert_eq!(buf, [1, 1, 1, 2, 2, 2, 3, 3, 3]);
    }

    #[test]
    fn rgba_and_la_drop_alpha() {
        let mut buf = vec![10, 20, 30, 255, 40, 50, 60, 0];
        convert_in_place(&mut buf, 2, Native::Rgba8, 3);
        assert_eq!(buf, [10, 20, 30, 40, 50, 60]);
        let mut buf = vec![7, 255, 9, 0];
        convert_in_place(&mut buf, 2, Native::La8, 3);
        assert_eq!(buf, [7, 7, 7, 9, 9, 9]);
    }

    #[test]
    fn sixteen_bit_keeps_high_byte() {
        let px: Vec<u8> = [0x1234u16, 0xff00, 0x00ff]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut buf = px.clone();
        convert_in_place(&mut buf, 1, Native::Rgb16, 3);
        assert_eq!(buf, [0x12, 0xff, 0x00]);
        let mut buf = px;
        convert_in_place(&mut buf, 1, Native::Rgb16, 1);
        assert_eq!(buf, [luma(0x12, 0xff, 0)]);
    }
}
