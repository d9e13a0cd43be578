//! Float-to-integer steps written so that loops around them run in vector lanes on
//! any x86-64: `as u8` from a float and `f32::floor` are one instruction per sample
//! (or a libm call) before AVX-512 and SSE4.1, and keep a loop scalar. These give the
//! same values with adds, compares and a bit mask.

/// 2^23: adding it to a float in [0, 2^22) leaves the nearest whole number (ties to
/// even) in the low bits of the mantissa.
const MAGIC: f32 = 8_388_608.0;

/// `x as u8` (truncation) for `x` in [0, 255], as Rust's cast gives it: the nearest
/// whole number, one less where that rounded up, read from the mantissa's bits.
#[inline(always)]
pub(crate) fn trunc_u8(x: f32) -> u8 {
    let m = x + MAGIC;
    let m = if m - MAGIC > x { m - 1.0 } else { m };
    (m.to_bits() & 0xFF) as u8
}

/// `x.floor()` for `x` in [0, 2^22): the nearest whole number, one less where that
/// rounded up.
#[inline(always)]
pub(crate) fn floor_small(x: f32) -> f32 {
    let n = (x + MAGIC) - MAGIC;
    if n > x {
        n - 1.0
    } else {
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every float in [0, 256) near each whole number and half, and a sweep between.
    fn samples() -> Vec<f32> {
        let mut v = Vec::new();
        for k in 0..=255u32 {
            for base in [k as f32, k as f32 + 0.5] {
                let mut x = base;
                let mut y = base;
                for _ in 0..4 {
                    v.extend([x, y]);
                    x = f32::from_bits(x.to_bits() + 1);
                    y = if y > 0.0 {
                        f32::from_bits(y.to_bits() - 1)
                    } else {
                        y
                    };
                }
            }
        }
        v.extend((0..2_560_000).map(|i| i as f32 * 1e-4));
        v.retain(|x| (0.0..=255.0).contains(x));
        v
    }

    #[test]
    fn trunc_u8_is_the_cast() {
        for x in samples() {
            assert_eq!(trunc_u8(x), x as u8, "{x}");
        }
    }

    #[test]
    fn floor_small_is_the_floor() {
        for x in samples()
            .into_iter()
            .chain([300.5, 4_000_000.5, 4_194_303.9])
        {
            assert_eq!(floor_small(x), x.floor(), "{x}");
        }
    }
}
