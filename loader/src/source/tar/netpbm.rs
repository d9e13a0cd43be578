//! Raw pixels as tar members: binary PGM (`P5`, one channel) and PPM (`P6`, three), the
//! netpbm formats PIL, NumPy-based readers and most image tools read; the loader reads
//! them without decoding (a header, then the u8 pixels as they are).

use crate::source::RecordKind;

/// The member extension for raw pixels of `channels`, or `None` when netpbm has no
/// binary form for them (2 or 4 channels).
pub(crate) fn extension(channels: u8) -> Option<&'static str> {
    match channels {
        1 => Some("pgm"),
        3 => Some("ppm"),
        _ => None,
    }
}

/// The header written before `width` x `height` pixels of `channels` (1 or 3).
pub(crate) fn header(width: u32, height: u32, channels: u8) -> String {
    let magic = if channels == 1 { "P5" } else { "P6" };
    format!("{magic}\n{width} {height}\n255\n")
}

/// Whether a member's bytes start as a binary PGM or PPM (never a JPEG, PNG or WebP).
pub(crate) fn is_netpbm(bytes: &[u8]) -> bool {
    matches!(bytes, [b'P', b'5' | b'6', c, ..] if c.is_ascii_whitespace() || *c == b'#')
}

/// The shape of a binary PGM/PPM and where its pixels start, checked against its
/// length: a file whose pixels do not fill its shape exactly is an error saying so.
pub(crate) fn parse(bytes: &[u8]) -> Result<(RecordKind, usize), String> {
    let channels: u8 = match bytes.get(..2) {
        Some(b"P5") => 1,
        Some(b"P6") => 3,
        _ => return Err("not a binary PGM or PPM (P5 or P6)".into()),
    };
    let mut at = 2;
    let mut number = |what: &str| -> Result<u32, String> {
        // Whitespace and comments (`#` to the end of the line) before each number.
        loop {
            match bytes.get(at) {
                Some(c) if c.is_ascii_whitespace() => at += 1,
                Some(b'#') => {
                    while !matches!(bytes.get(at), None | Some(b'\n')) {
                        at += 1;
                    }
                }
                _ => break,
            }
        }
        let start = at;
        while bytes.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        std::str::from_utf8(&bytes[start..at])
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("the netpbm header's {what} is not a number"))
    };
    let width = number("width")?;
    let height = number("height")?;
    let maxval = number("maximum value")?;
    if maxval != 255 {
        return Err(format!(
            "netpbm maximum value {maxval}: only 8-bit (255) pixels are read"
        ));
    }
    if width == 0 || height == 0 {
        return Err(format!("netpbm shape {width}x{height} is empty"));
    }
    // One whitespace byte ends the header.
    if !bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        return Err("the netpbm header does not end in whitespace".into());
    }
    let start = at + 1;
    let have = (bytes.len() - start) as u64;
    let want = u64::from(width) * u64::from(height) * u64::from(channels);
    if have != want {
        return Err(format!(
            "it holds {have} bytes of pixels, its shape {width}x{height}x{channels} needs {want}"
        ));
    }
    Ok((
        RecordKind::Raw {
            width,
            height,
            channels,
        },
        start,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage_is_named() {
        let mut b = header(3, 2, 3).into_bytes();
        b.extend_from_slice(&[9; 18]);
        assert!(is_netpbm(&b));
        let (kind, at) = parse(&b).unwrap();
        assert_eq!(
            kind,
            RecordKind::Raw {
                width: 3,
                height: 2,
                channels: 3
            }
        );
        assert_eq!(&b[at..], &[9; 18]);
        let e = parse(&b[..b.len() - 1]).unwrap_err();
        assert_eq!(e, "it holds 17 bytes of pixels, its shape 3x2x3 needs 18");
        // Comments, as GIMP writes them.
        let mut c = b"P5\n# made by hand\n2 2\n255\n".to_vec();
        c.extend_from_slice(&[1, 2, 3, 4]);
        assert_eq!(parse(&c).unwrap().1, c.len() - 4);
        assert!(parse(b"P6\n2 2\n65535\n").unwrap_err().contains("65535"));
        assert!(!is_netpbm(b"\xff\xd8\xff"));
    }
}
