//! Horizontal flip in place.

use crate::SampleRng;

/// torchvision `RandomHorizontalFlip(p)`: one draw, then maybe a flip.
pub fn random_hflip(rng: &mut SampleRng, p: f64, data: &mut [u8], width: usize, channels: usize) {
    let hit = rng.chance(p);
    if hit {
        hflip_in_place(data, width, channels);
    }
}

/// Mirror each row of a `width`-wide, `channels`-channel image in place.
pub fn hflip_in_place(data: &mut [u8], width: usize, channels: usize) {
    let row_len = width * channels;
    if row_len == 0 {
        return;
    }
    match channels {
        1 => data.chunks_exact_mut(row_len).for_each(<[u8]>::reverse),
        3 => flip_rgb_rows(data, width),
        _ => flip_rows_generic(data, width, channels),
    }
}

/// RGB rows through a copy of the row: each pixel is then one 4-byte load and one
/// 4-byte store, the fourth byte being overwritten by the next pixel. A byte-wise
/// swap from both ends was 8% of a whole rrc+flip sample in a profile; this is a
/// few percent of that.
fn flip_rgb_rows(data: &mut [u8], width: usize) {
    let row_len = width * 3;
    // One spare byte so that the last pixel's 4-byte load stays inside the copy.
    let mut src = vec![0u8; row_len + 1];
    for row in data.chunks_exact_mut(row_len) {
        src[..row_len].copy_from_slice(row);
        // Output pixel i comes from input pixel width - 1 - i; every pixel but the
        // last output one is written four bytes wide.
        for i in 0..width - 1 {
            let from = (width - 1 - i) * 3;
            let px: [u8; 4] = src[from..from + 4].try_into().expect("4 bytes");
            row[i * 3..i * 3 + 4].copy_from_slice(&px);
        }
        row[row_len - 3..].copy_from_slice(&src[..3]);
    }
}

/// Any channel count: whole pixels swapped from both ends, channel order kept.
fn flip_rows_generic(data: &mut [u8], width: usize, channels: usize) {
    for row in data.chunks_exact_mut(width * channels) {
        let (mut a, mut b) = (0, width - 1);
        while a < b {
            let (left, right) = row.split_at_mut(b * channels);
            left[a * channels..(a + 1) * channels].swap_with_slice(&mut right[..channels]);
            a += 1;
            b -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The obvious flip, pixel by pixel into a new buffer.
    fn reference(data: &[u8], width: usize, channels: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len());
        for row in data.chunks_exact(width * channels) {
            for px in row.chunks_exact(channels).rev() {
                out.extend_from_slice(px);
            }
        }
        out
    }

    #[test]
    fn flips_pixels_not_bytes() {
        let mut d = vec![1, 2, 3, 4, 5, 6, 7, 8, 9];
        hflip_in_place(&mut d, 3, 3);
        assert_eq!(d, [7, 8, 9, 4, 5, 6, 1, 2, 3]);
        let mut g = vec![1, 2, 3, 4];
        hflip_in_place(&mut g, 2, 1);
        assert_eq!(g, [2, 1, 4, 3]);
    }

    #[test]
    fn matches_the_obvious_flip_for_every_shape() {
        for channels in [1, 2, 3, 4] {
            for width in [1, 2, 3, 5, 8, 224] {
                for height in [1, 3] {
                    let len = width * height * channels;
                    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
                    let mut got = data.clone();
                    hflip_in_place(&mut got, width, channels);
                    assert_eq!(
                        got,
                        reference(&data, width, channels),
                        "{width}x{height}x{channels}"
                    );
                    hflip_in_place(&mut got, width, channels);
                    assert_eq!(got, data, "twice is identity: {width}x{height}x{channels}");
                }
            }
        }
    }
}
