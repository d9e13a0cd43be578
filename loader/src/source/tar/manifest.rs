//! `shards.json`: the manifest `stoker-load pack --format tar` writes last, after every
//! shard and its index: each shard's name, size, sample count and CRC-32. A folder of
//! stoker-written shards without it was never finished (a pack killed midway leaves
//! whole shards that would otherwise load as a complete, smaller data set), which
//! readers say on stderr; with it, a missing, resized or extra shard is an error that
//! names the shard.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::index::INDEX_SUFFIX;
use crate::source::{SourceError, Why};

/// The manifest's file name, beside the shards.
pub const MANIFEST_NAME: &str = "shards.json";
/// What the manifest says it is.
pub const MANIFEST_FORMAT: &str = "stoker-tar-shards";
/// The manifest version this reader writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// One shard as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// The shard's file name (no folder).
    pub name: String,
    /// Size of the shard file in bytes.
    pub bytes: u64,
    /// Number of samples in the shard.
    pub samples: u64,
    /// CRC-32 (ISO-HDLC, as zlib's `crc32`) of the whole shard.
    pub crc32: u32,
}

/// The manifest of one tar pack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// `stoker-tar-shards`, which marks the file as a stoker shard manifest.
    pub format: String,
    /// The manifest's version: 1, the only one this reader knows.
    pub version: u32,
    /// Samples in all shards together.
    pub samples: u64,
    /// Every shard of the pack, in order.
    pub shards: Vec<ShardEntry>,
}

impl Manifest {
    /// The manifest of `shards`, with their total sample count.
    pub fn new(shards: Vec<ShardEntry>) -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT.into(),
            version: MANIFEST_VERSION,
            samples: shards.iter().map(|s| s.samples).sum(),
            shards,
        }
    }

    /// Reads a manifest from its JSON bytes; the error says when they are not JSON of
    /// this format and version.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        Self::parse_why(bytes).map_err(String::from)
    }

    /// [`parse`](Self::parse), keeping the JSON parser's error when there is one.
    pub(crate) fn parse_why(bytes: &[u8]) -> Result<Manifest, Why> {
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| Why::because(format!("not a shard manifest: {e}"), e))?;
        if m.format != MANIFEST_FORMAT {
            return Err(format!(
                "format '{}', expected '{MANIFEST_FORMAT}'",
                super::printable(&m.format)
            )
            .into());
        }
        if m.version != MANIFEST_VERSION {
            return Err(format!(
                "manifest version {} (this reader knows {MANIFEST_VERSION})",
                m.version
            )
            .into());
        }
        Ok(m)
    }

    /// The manifest as the file's (pretty-printed) JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Plain strings and numbers: serialising cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Checks the shards found, as (file name, size), against the list: every listed
    /// shard present with its size, none unlisted. The error names the first shards
    /// that differ.
    pub fn check(&self, found: &[(String, u64)]) -> Result<(), String> {
        let found: BTreeMap<&str, u64> = found.iter().map(|(n, b)| (n.as_str(), *b)).collect();
        let mut problems = Vec::new();
        for s in &self.shards {
            match found.get(s.name.as_str()) {
                None => problems.push(format!("{} is missing", s.name)),
                Some(&b) if b != s.bytes => problems.push(format!(
                    "{} has {b} bytes, the manifest says {}",
                    s.name, s.bytes
                )),
                Some(_) => {}
            }
        }
        let listed: std::collections::BTreeSet<&str> =
            self.shards.iter().map(|s| s.name.as_str()).collect();
        for name in found.keys().filter(|n| !listed.contains(*n)) {
            problems.push(format!("{name} is not in the manifest"));
        }
        if problems.is_empty() {
            return Ok(());
        }
        let more = problems.len().saturating_sub(3);
        problems.truncate(3);
        Err(format!(
            "{MANIFEST_NAME} lists {} shards of {} samples, but {}{} (an incomplete copy, \
             or shards of another pack mixed in?)",
            self.shards.len(),
            self.samples,
            problems.join("; "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ))
    }
}

/// The warning for a folder of stoker-written shards without a manifest.
pub fn missing_warning(folder: &str) -> String {
    format!(
        "stoker: {folder}: warning: no {MANIFEST_NAME}, which `stoker-load pack --format tar` \
         writes after its last shard: the pack may be incomplete (killed midway?), and the \
         shards found are all that will be read"
    )
}

/// Checks a local folder of shards against its manifest; without one, warns when the
/// shards look stoker-written (they have `.tar.idx` sidecars).
pub fn check_local(dir: &Path, shards: &[PathBuf]) -> Result<(), SourceError> {
    let path = dir.join(MANIFEST_NAME);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let m = Manifest::parse_why(&bytes).map_err(|w| w.format(&path))?;
            let mut found = Vec::with_capacity(shards.len());
            for p in shards {
                let len = std::fs::metadata(p)
                    .map_err(|e| SourceError::io(p, e))?
                    .len();
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                found.push((name.into_owned(), len));
            }
            m.check(&found).map_err(|r| SourceError::format(&path, r))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let stoker_written = shards.iter().any(|p| {
                let mut side = p.as_os_str().to_os_string();
                side.push(INDEX_SUFFIX);
                PathBuf::from(side).is_file()
            });
            if stoker_written {
                eprintln!(
                    "{}",
                    missing_warning(&super::printable(&dir.display().to_string()))
                );
            }
            Ok(())
        }
        Err(e) => Err(SourceError::io(&path, e)),
    }
}

/// Checks remote shards found by listing `prefix` against the manifest among
/// `objects` (the listing); without one, warns when the listing holds `.tar.idx`
/// sidecars (stoker-written shards).
#[cfg(feature = "remote")]
pub fn check_remote(
    folder_url: &str,
    prefix: &str,
    objects: &[crate::storage::Object],
    shards: &[crate::storage::Object],
) -> Result<(), SourceError> {
    let manifest_key = format!("{prefix}{MANIFEST_NAME}");
    let Some(obj) = objects.iter().find(|o| o.key == manifest_key).cloned() else {
        if objects.iter().any(|o| o.key.ends_with(INDEX_SUFFIX)) {
            eprintln!("{}", missing_warning(&super::printable(folder_url)));
        }
        return Ok(());
    };
    let url = obj.url();
    let bytes = crate::storage::wait(async move { obj.get().await })??;
    let m = Manifest::parse_why(&bytes).map_err(|w| w.remote(url.clone()))?;
    let found: Vec<(String, u64)> = shards
        .iter()
        .map(|o| {
            (
                o.key.strip_prefix(prefix).unwrap_or(&o.key).to_string(),
                o.size,
            )
        })
        .collect();
    m.check(&found)
        .map_err(|reason| SourceError::remote(url, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, bytes: u64) -> ShardEntry {
        ShardEntry {
            name: name.into(),
            bytes,
            samples: 3,
            crc32: 7,
        }
    }

    #[test]
    fn a_manifest_names_missing_resized_and_extra_shards() {
        let m = Manifest::new(vec![entry("a.tar", 10), entry("b.tar", 20)]);
        assert_eq!(m.samples, 6);
        let back = Manifest::parse(&m.to_json()).unwrap();
        assert_eq!(back, m);
        m.check(&[("a.tar".into(), 10), ("b.tar".into(), 20)])
            .unwrap();
        let e = m.check(&[("a.tar".into(), 10)]).unwrap_err();
        assert!(e.contains("b.tar is missing"), "{e}");
        let e = m
            .check(&[("a.tar".into(), 11), ("b.tar".into(), 20)])
            .unwrap_err();
        assert!(
            e.contains("a.tar has 11 bytes, the manifest says 10"),
            "{e}"
        );
        let e = m
            .check(&[
                ("a.tar".into(), 10),
                ("b.tar".into(), 20),
                ("c.tar".into(), 1),
            ])
            .unwrap_err();
        assert!(e.contains("c.tar is not in the manifest"), "{e}");
        assert!(
            Manifest::parse(br#"{"format": "x", "version": 1, "samples": 0, "shards": []}"#)
                .is_err()
        );
    }
}
