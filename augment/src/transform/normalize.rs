//! u8 to normalised f32, for CPU users (the GPU path normalises on the device).

use crate::AugmentError;

/// ImageNet per-channel (RGB) means on the 0..=1 scale, as torchvision's reference
/// scripts use them.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet per-channel (RGB) standard deviations on the 0..=1 scale, as torchvision's
/// reference scripts use them.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// `out[i] = (src[i] / 255 - mean[c]) / std[c]` where `c` is the channel of `i`
/// (torchvision `ToTensor` + `Normalize`, but keeping the HWC layout).
pub fn normalize_into(
    src: &[u8],
    channels: usize,
    mean: &[f32],
    std: &[f32],
    out: &mut [f32],
) -> Result<(), AugmentError> {
    let bad = |why: String| Err(AugmentError::Normalize(why));
    if channels == 0 || mean.len() != channels || std.len() != channels {
        return bad(format!(
            "{channels} channels but {} means and {} stds",
            mean.len(),
            std.len()
        ));
    }
    if src.len() % channels != 0 || out.len() != src.len() {
        return bad(format!(
            "{} input bytes and {} outputs for {channels} channels",
            src.len(),
            out.len()
        ));
    }
    if let Some(s) = std.iter().find(|s| !s.is_finite() || **s == 0.0) {
        return bad(format!("std {s} would divide by zero"));
    }
    // One multiply-add per value: scale = 1 / (255 std), bias = -mean / std.
    let mut scale = [0f32; 8];
    let mut bias = [0f32; 8];
    if channels > scale.len() {
        for (i, (o, &v)) in out.iter_mut().zip(src).enumerate() {
            let c = i % channels;
            *o = (v as f32 / 255.0 - mean[c]) / std[c];
        }
        return Ok(());
    }
    for c in 0..channels {
        scale[c] = 1.0 / (255.0 * std[c]);
        bias[c] = -mean[c] / std[c];
    }
    for (o, s) in out
        .chunks_exact_mut(channels)
        .zip(src.chunks_exact(channels))
    {
        for c in 0..channels {
            o[c] = s[c] as f32 * scale[c] + bias[c];
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_formula() {
        let src = [0u8, 128, 255, 10, 20, 30];
        let mut out = [0f32; 6];
        normalize_into(&src, 3, &IMAGENET_MEAN, &IMAGENET_STD, &mut out).unwrap();
        for (i, (&o, &s)) in out.iter().zip(&src).enumerate() {
            let c = i % 3;
            let want = (s as f32 / 255.0 - IMAGENET_MEAN[c]) / IMAGENET_STD[c];
            assert!((o - want).abs() < 1e-5, "{o} vs {want}");
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        let mut out = [0f32; 3];
        assert!(normalize_into(&[1, 2, 3], 3, &[0.5], &[0.5], &mut out).is_err());
        assert!(normalize_into(&[1, 2], 3, &[0.5; 3], &[0.5; 3], &mut out).is_err());
        assert!(normalize_into(&[1, 2, 3], 3, &[0.5; 3], &[0.0; 3], &mut out).is_err());
        assert!(normalize_into(&[1, 2, 3], 1, &[0.5], &[0.5], &mut out).is_ok());
    }
}
