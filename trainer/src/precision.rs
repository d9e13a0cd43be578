//! The arithmetic of a training step: `f32` everywhere (the default, and the CPU's only
//! choice), or bf16 autocast on CUDA, as `torch.autocast(dtype=torch.bfloat16)` does it
//! (bf16 operands for the convolutions and GEMMs with f32 accumulation; f32 master
//! weights, optimizer state, loss and batch-norm statistics; f32 checkpoints).

use std::fmt;
use std::str::FromStr;

/// How a step computes. Parsed from and printed as `f32` / `bf16`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Every operation in f32.
    #[default]
    F32,
    /// bf16 autocast (CUDA only).
    Bf16,
}

impl Precision {
    /// Every precision, in the order `--help` lists them.
    pub const ALL: [Precision; 2] = [Precision::F32, Precision::Bf16];

    /// The name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A precision name that is not `f32` or `bf16`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown precision '{0}' (expected f32 or bf16)")]
pub struct UnknownPrecision(pub String);

impl FromStr for Precision {
    type Err = UnknownPrecision;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Precision::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPrecision(s.to_string()))
    }
}

/// `x` rounded to bf16, as bits: round to nearest even, NaN kept a (quiet) NaN. The
/// host twin of `kernels/cast.cu`, for the parity tests' references.
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        return ((b >> 16) | 0x40) as u16;
    }
    (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// The f32 a bf16 bit pattern stands for.
pub fn bf16_value(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for p in Precision::ALL {
            assert_eq!(p.as_str().parse::<Precision>(), Ok(p));
        }
        assert_eq!(
            "fp16".parse::<Precision>().unwrap_err().to_string(),
            "unknown precision 'fp16' (expected f32 or bf16)"
        );
        assert_eq!(Precision::default(), Precision::F32);
    }

    #[test]
    fn bf16_rounding_matches_the_half_crate() {
        // half's conversion is round-to-nearest-even: every tie and carry case below.
        // Ties to even (down, then up), just above a tie, a carry into the exponent.
        let ties = [
            0x3f80_8000u32,
            0x3f81_8000,
            0x3f80_8001,
            0x3fff_ffff,
            0x7f7f_ffff,
        ];
        let mut cases: Vec<f32> = ties.into_iter().map(f32::from_bits).collect();
        cases.extend([
            0.0f32,
            -0.0,
            1.0,
            -2.5e-39,
            1e-45,
            f32::MAX,
            f32::MIN_POSITIVE,
            65504.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ]);
        for x in cases {
            assert_eq!(bf16_bits(x), half::bf16::from_f32(x).to_bits(), "{x:e}");
        }
        let mut s = 0x1234_5678u32;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let x = f32::from_bits(s);
            if x.is_nan() {
                assert!(bf16_value(bf16_bits(x)).is_nan());
            } else {
                assert_eq!(bf16_bits(x), half::bf16::from_f32(x).to_bits(), "{x:e}");
            }
        }
    }
}
