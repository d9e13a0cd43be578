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
    for row in data.chunks_exact_mut(row_len) {
        if channels == 1 {
            row.reverse();
            continue;
        }
        // Swap whole pixels from both ends, keeping each pixel's channel order.
        let (mut a, mut b) = (0, width - 1);
        while a < b {
            for k in 0..channels {
                row.swap(a * channels + k, b * channels + k);
            }
            a += 1;
            b -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flips_pixels_not_bytes() {
        let mut d = vec![1, 2, 3, 4, 5, 6, 7, 8, 9];
        hflip_in_place(&mut d, 3, 3);
        assert_eq!(d, [7, 8, 9, 4, 5, 6, 1, 2, 3]);
        let mut g = vec![1, 2, 3, 4];
        hflip_in_place(&mut g, 2, 1);
        assert_eq!(g, [2, 1, 4, 3]);
    }
}
