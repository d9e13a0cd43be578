//! Parsers for numeric flags: every count has a range and every time is finite, so an
//! absurd value is refused by clap (exit status 2, naming the flag) before any work.

use stoker_loader::config::{MAX_BATCH_SIZE, MAX_IO_DEPTH, MAX_PREFETCH, MAX_WORKERS};

fn count_in(s: &str, lo: usize, hi: usize) -> Result<usize, String> {
    let v: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number from {lo} to {hi}"))?;
    if v < lo || v > hi {
        return Err(format!("{v} is out of range (expected {lo} to {hi})"));
    }
    Ok(v)
}

pub fn batch_size(s: &str) -> Result<usize, String> {
    count_in(s, 1, MAX_BATCH_SIZE)
}

/// `--seq-len` of `bench --tokens`: a window's targets, in int32 positions.
pub fn seq_len(s: &str) -> Result<usize, String> {
    count_in(s, 1, 1 << 24)
}

pub fn workers(s: &str) -> Result<usize, String> {
    count_in(s, 1, MAX_WORKERS)
}

/// The CPU budget of `--workers auto`.
pub fn cpu_budget(s: &str) -> Result<usize, String> {
    count_in(s, 1, MAX_WORKERS)
}

pub fn prefetch(s: &str) -> Result<usize, String> {
    count_in(s, 1, MAX_PREFETCH)
}

pub fn io_depth(s: &str) -> Result<usize, String> {
    count_in(s, 1, MAX_IO_DEPTH)
}

/// Epochs a bench or demo may run: enough for any soak, few enough to end.
pub fn epochs(s: &str) -> Result<u64, String> {
    count_in(s, 1, 1_000_000).map(|v| v as u64)
}

/// Images `gen` may write.
pub fn image_count(s: &str) -> Result<usize, String> {
    count_in(s, 1, 100_000_000)
}

/// Image side for `gen`, as the generator accepts.
pub fn image_size(s: &str) -> Result<u32, String> {
    count_in(s, 8, 4096).map(|v| v as u32)
}

pub fn classes(s: &str) -> Result<usize, String> {
    count_in(s, 1, stoker_loader::synthetic::SHAPES.len())
}

/// Shapes per scene at most (as the Python `gen_scenes` takes).
pub fn max_shapes(s: &str) -> Result<usize, String> {
    count_in(s, 1, 64)
}

/// Records `inspect` checks (0 = all).
pub fn limit(s: &str) -> Result<usize, String> {
    count_in(s, 0, usize::MAX)
}

/// A comma-separated list of field names (`image,boxes,mask`).
pub fn fields(s: &str) -> Result<stoker_loader::Fields, String> {
    let f: stoker_loader::Fields = s
        .parse()
        .map_err(|e: stoker_loader::ParseSettingError| e.to_string())?;
    if f == stoker_loader::Fields::NONE {
        return Err("name at least one field, e.g. image,boxes".into());
    }
    Ok(f)
}

/// A size in bytes ([`stoker_loader::config::parse_size`]: a whole number with an
/// optional suffix K, M, G or T, powers of 1024), from `lo` to `hi` bytes.
fn bytes_in(s: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let v = stoker_loader::config::parse_size(s).map_err(|e| e.to_string())?;
    if v < lo || v > hi {
        return Err(format!("{s} is out of range (expected {lo} to {hi} bytes)"));
    }
    Ok(v)
}

/// The size of one tar shard: 10K to 64G.
pub fn shard_size(s: &str) -> Result<u64, String> {
    bytes_in(s, 10 << 10, 64 << 30)
}

/// The longest side of a packed image (`--max-side`): 1 to 65535 pixels.
pub fn max_side(s: &str) -> Result<u32, String> {
    count_in(s, 1, 65535).map(|v| v as u32)
}

/// How `pack` stores images (`--encoding`): keep, raw, png or jpeg:Q.
pub fn encoding(s: &str) -> Result<stoker_loader::source::Encoding, String> {
    s.parse()
        .map_err(|e: stoker_loader::ParseSettingError| e.to_string())
}

/// A simulated step time in milliseconds: finite, from 0 to one hour.
pub fn millis(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of milliseconds"))?;
    if !v.is_finite() || !(0.0..=3_600_000.0).contains(&v) {
        return Err(format!(
            "{s} is out of range (expected 0 to 3600000 milliseconds)"
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_absurd_values() {
        for bad in [
            "",
            "0",
            "-1",
            "1e3",
            "nan",
            "18446744073709551616",
            "6004799503160662",
        ] {
            assert!(batch_size(bad).is_err(), "{bad}");
        }
        assert_eq!(batch_size("64").unwrap(), 64);
        for bad in ["", "-5", "nan", "inf", "-inf", "1e300", "3600001"] {
            assert!(millis(bad).is_err(), "{bad}");
        }
        assert_eq!(millis("0").unwrap(), 0.0);
        assert_eq!(millis("2.5").unwrap(), 2.5);
        assert!(workers("100000000").is_err());
        assert!(prefetch("100000000000").is_err());
        assert!(epochs("0").is_err());
        assert_eq!(shard_size("256MB").unwrap(), 256 << 20);
        assert_eq!(shard_size("64k").unwrap(), 64 << 10);
        assert_eq!(shard_size("1048576").unwrap(), 1 << 20);
        for bad in [
            "",
            "M",
            "1.5G",
            "-1M",
            "12X",
            "1K",
            "65G",
            "99999999999999999999T",
        ] {
            assert!(shard_size(bad).is_err(), "{bad}");
        }
    }
}
