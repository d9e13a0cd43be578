//! The values inside a part: sizes (`N`, `WxH`), numbers (with fractions, `3/4`)
//! and ranges (`lo-hi`).

use crate::transform::check::MAX_SIZE;

/// `N` (square, `true`) or `WxH` (`false`).
pub(super) fn parse_size(s: &str) -> Result<(usize, usize, bool), String> {
    let one = |t: &str| -> Result<usize, String> {
        let n: usize = t
            .trim()
            .parse()
            .map_err(|_| format!("'{t}' is not a size (want N or WxH, e.g. 224 or 64x48)"))?;
        if n == 0 {
            return Err("size must be positive".into());
        }
        if n > MAX_SIZE {
            return Err(format!("size {n} is larger than {MAX_SIZE}"));
        }
        Ok(n)
    };
    match s.split_once(['x', 'X']) {
        Some((w, h)) => Ok((one(w)?, one(h)?, false)),
        None => {
            let n = one(s)?;
            Ok((n, n, true))
        }
    }
}

pub(super) fn parse_number(s: &str) -> Result<f64, String> {
    let v = match s.split_once('/') {
        Some((a, b)) => {
            let a: f64 = a
                .trim()
                .parse()
                .map_err(|_| format!("'{s}' is not a number"))?;
            let b: f64 = b
                .trim()
                .parse()
                .map_err(|_| format!("'{s}' is not a number"))?;
            a / b
        }
        None => s.parse().map_err(|_| format!("'{s}' is not a number"))?,
    };
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("'{s}' is not a finite number"))
    }
}

pub(super) fn parse_range(s: &str) -> Result<(f64, f64), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("'{s}' is not a range (want lo-hi, e.g. 0.08-1)"))?;
    let (lo, hi) = (parse_number(a.trim())?, parse_number(b.trim())?);
    if lo > hi {
        return Err(format!("range {lo}-{hi} is reversed"));
    }
    Ok((lo, hi))
}

