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

/// `lo-hi`. The separator is the first `-` that is neither a leading sign nor an
/// exponent's sign (`1e-3-1e3` is 0.001 to 1000).
pub(super) fn parse_range(s: &str) -> Result<(f64, f64), String> {
    let bytes = s.as_bytes();
    let at = (1..bytes.len())
        .find(|&i| bytes[i] == b'-' && !matches!(bytes[i - 1], b'e' | b'E'))
        .ok_or_else(|| format!("'{s}' is not a range (want lo-hi, e.g. 0.08-1)"))?;
    let (a, b) = (&s[..at], &s[at + 1..]);
    let (lo, hi) = (parse_number(a.trim())?, parse_number(b.trim())?);
    if lo > hi {
        return Err(format!("range {lo}-{hi} is reversed"));
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_tell_an_exponents_minus_from_the_separator() {
        assert_eq!(parse_range("1e-3-1e3"), Ok((1e-3, 1e3)));
        assert_eq!(parse_range("1E-3-2.5E-1"), Ok((1e-3, 0.25)));
        assert_eq!(parse_range("1e-3 - 1e+2"), Ok((1e-3, 100.0)));
        assert_eq!(parse_range("3/4-4/3"), Ok((0.75, 4.0 / 3.0)));
        assert_eq!(parse_range("0.08-1"), Ok((0.08, 1.0)));
        // A leading minus is a sign, not the separator.
        assert_eq!(parse_range("-1-2"), Ok((-1.0, 2.0)));
        let e = parse_range("1e-3").unwrap_err();
        assert!(e.contains("'1e-3' is not a range"), "{e}");
        let e = parse_range("1e3-1e-3").unwrap_err();
        assert!(e.contains("reversed"), "{e}");
        let e = parse_range("1-e3").unwrap_err();
        assert!(e.contains("'e3' is not a number"), "{e}");
    }
}
