//! COCO's run-length encoding of a binary mask: runs alternating background and
//! foreground (starting with background), over the pixels in column-major order
//! (down each column, then the next column), as pycocotools writes them. Counts come
//! as a JSON list, or as the compact string of pycocotools' `rleToString` (maskApi.c),
//! decoded here by the same rules as its `rleFrString`.

/// Decodes pycocotools' compressed counts string. Each count is stored as the
/// difference from the count two places back (from the fourth count on), in groups of
/// 5 bits, least significant first, one ASCII character (48 + value) per group: bit 5
/// says another group follows, and bit 4 of the last group is the sign.
pub fn counts_from_string(s: &str) -> Result<Vec<u32>, String> {
    let bytes = s.as_bytes();
    let mut counts: Vec<u32> = Vec::with_capacity(bytes.len());
    let mut p = 0;
    while p < bytes.len() {
        let mut x: i64 = 0;
        let mut k = 0u32;
        loop {
            let Some(&ch) = bytes.get(p) else {
                return Err(format!(
                    "the counts string ends inside a count (at character {p})"
                ));
            };
            if !(48..48 + 64).contains(&ch) {
                return Err(format!(
                    "the counts string holds '{}' at character {p} (only '0' to 'o' encode counts)",
                    ch.escape_ascii()
                ));
            }
            if k >= 12 {
                // 12 groups are 60 bits: no count of a real image needs more.
                return Err(format!(
                    "the counts string holds a count longer than 12 characters (at character {p})"
                ));
            }
            let c = i64::from(ch - 48);
            x |= (c & 0x1f) << (5 * k);
            p += 1;
            k += 1;
            if c & 0x20 == 0 {
                if c & 0x10 != 0 {
                    x |= -1i64 << (5 * k);
                }
                break;
            }
        }
        let m = counts.len();
        if m > 2 {
            x += i64::from(counts[m - 2]);
        }
        let count = u32::try_from(x)
            .map_err(|_| format!("count {} decodes to {x}, which is not a run length", m + 1))?;
        counts.push(count);
    }
    Ok(counts)
}

/// Encodes counts as pycocotools' `rleToString` does (the inverse of
/// [`counts_from_string`]).
pub fn counts_to_string(counts: &[u32]) -> String {
    let mut s = String::new();
    for (i, &c) in counts.iter().enumerate() {
        let mut x = i64::from(c);
        if i > 2 {
            x -= i64::from(counts[i - 2]);
        }
        loop {
            let mut c = (x & 0x1f) as u8;
            x >>= 5;
            let more = if c & 0x10 != 0 { x != -1 } else { x != 0 };
            if more {
                c |= 0x20;
            }
            s.push(char::from(c + 48));
            if !more {
                break;
            }
        }
    }
    s
}

/// Checks that `counts` cover exactly the `height` x `width` pixels.
pub fn check_counts(counts: &[u32], height: usize, width: usize) -> Result<(), String> {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    let pixels = height as u64 * width as u64;
    if total != pixels {
        let how = if total > pixels {
            "overrun"
        } else {
            "fall short of"
        };
        return Err(format!(
            "the RLE counts add up to {total} pixels, which {how} the {width}x{height} = {pixels} of the mask"
        ));
    }
    Ok(())
}

/// Sets `value` in the row-major `width` x `height` map `out` wherever the runs in
/// `counts` (checked by [`check_counts`]) are foreground.
pub fn paint(counts: &[u32], height: usize, width: usize, value: u8, out: &mut [u8]) {
    let mut at = 0usize;
    for (i, &c) in counts.iter().enumerate() {
        let end = at + c as usize;
        if i % 2 == 1 {
            for p in at..end {
                // Column-major index p is row p % height of column p / height.
                out[(p % height) * width + p / height] = value;
            }
        }
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts from a row-major binary mask, straight from the definition.
    fn encode(mask: &[u8], height: usize, width: usize) -> Vec<u32> {
        let mut counts = Vec::new();
        let (mut cur, mut run) = (0u8, 0u32);
        for x in 0..width {
            for y in 0..height {
                let v = mask[y * width + x];
                if v != cur {
                    counts.push(run);
                    cur = v;
                    run = 0;
                }
                run += 1;
            }
        }
        counts.push(run);
        counts
    }

    #[test]
    fn runs_go_down_the_columns() {
        // A 3x2 (h x w) mask with the bottom-left and top-right pixels set:
        // column 0 = [0, 0, 1], column 1 = [1, 0, 0].
        let counts = [2, 2, 2];
        check_counts(&counts, 3, 2).unwrap();
        let mut out = vec![0u8; 6];
        paint(&counts, 3, 2, 7, &mut out);
        assert_eq!(out, [0, 7, 0, 0, 7, 0]);
    }

    #[test]
    fn counts_that_do_not_cover_the_mask_are_errors() {
        let e = check_counts(&[2, 2, 3], 3, 2).unwrap_err();
        assert!(e.contains("add up to 7") && e.contains("overrun"), "{e}");
        let e = check_counts(&[2, 2], 3, 2).unwrap_err();
        assert!(e.contains("fall short"), "{e}");
    }

    #[test]
    fn known_strings_follow_rle_to_string() {
        // A 4x4 mask with a 2x2 square at rows 1-2, columns 1-2 has the counts
        // [5, 2, 2, 2, 5]; by rleToString's rules (the fourth and fifth counts stored
        // as differences from the second and third) its string is "52203".
        assert_eq!(counts_from_string("52203").unwrap(), [5, 2, 2, 2, 5]);
        assert_eq!(counts_to_string(&[5, 2, 2, 2, 5]), "52203");
        // Large counts take several characters, 5 bits each.
        let big = [100_000, 3, 250_000, 1, 7];
        let s = counts_to_string(&big);
        assert!(s.len() > big.len());
        assert_eq!(counts_from_string(&s).unwrap(), big);
    }

    #[test]
    fn strings_round_trip_with_negative_differences() {
        // From the fourth count on, each is stored as the difference from the count
        // two back, which is often negative.
        let mut state = 0x2545_f491_u64;
        for len in 1..40 {
            let counts: Vec<u32> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 5000) as u32
                })
                .collect();
            let s = counts_to_string(&counts);
            assert!(s.bytes().all(|b| (48..112).contains(&b)), "{s}");
            assert_eq!(counts_from_string(&s).unwrap(), counts, "{s}");
        }
    }

    #[test]
    fn decode_matches_a_mask_encoded_by_definition() {
        let (h, w) = (7, 5);
        let mask: Vec<u8> = (0..h * w)
            .map(|i| u8::from((i * 7 + i / 3) % 5 < 2))
            .collect();
        let counts = encode(&mask, h, w);
        let s = counts_to_string(&counts);
        let back = counts_from_string(&s).unwrap();
        check_counts(&back, h, w).unwrap();
        let mut out = vec![0u8; h * w];
        paint(&back, h, w, 1, &mut out);
        assert_eq!(out, mask);
    }

    #[test]
    fn malformed_strings_are_errors() {
        let e = counts_from_string("5 2").unwrap_err();
        assert!(e.contains("' '") && e.contains("character 1"), "{e}");
        // '`' (48 + 48) has the continuation bit and nothing follows it.
        let e = counts_from_string("5`").unwrap_err();
        assert!(e.contains("ends inside a count"), "{e}");
        // A lone negative count: '@' is 48 + 16, the sign bit without continuation.
        let e = counts_from_string("@").unwrap_err();
        assert!(e.contains("not a run length"), "{e}");
        let e = counts_from_string(&"o".repeat(20)).unwrap_err();
        assert!(e.contains("longer than 12"), "{e}");
        assert_eq!(counts_from_string("").unwrap(), Vec::<u32>::new());
    }
}
