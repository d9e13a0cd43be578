//! NVRTC's output kept on disk, so that the kernel program is compiled once per source,
//! options, architecture and NVRTC version rather than at every start.
//!
//! Files live in `ptx/` under the stoker cache folder (the one the demo set uses:
//! `$STOKER_CACHE`, else `$XDG_CACHE_HOME/stoker`, else `~/.cache/stoker`), one per key,
//! named `stoker_kernels-sm_XY-nvrtcA.B-<hash>.ptx`. They are written to a temporary
//! name and renamed, so a reader never sees half a file, and several processes may
//! store the same key at once (the last rename wins; the contents are the same).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a compiled program depends on, as a file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheKey(String);

impl CacheKey {
    /// The key of `source` compiled with `options` (their text) for compute capability
    /// `cc` by NVRTC version `nvrtc`.
    pub fn new(source: &str, options: &str, cc: (i32, i32), nvrtc: (i32, i32)) -> Self {
        let mut text = String::with_capacity(source.len() + options.len() + 64);
        text.push_str(source);
        text.push('\0');
        text.push_str(options);
        text.push_str(&format!(
            "\0sm_{}{}\0nvrtc {}.{}",
            cc.0, cc.1, nvrtc.0, nvrtc.1
        ));
        let hash = xxhash_rust::xxh3::xxh3_128(text.as_bytes());
        CacheKey(format!(
            "stoker_kernels-sm_{}{}-nvrtc{}.{}-{hash:032x}.ptx",
            cc.0, cc.1, nvrtc.0, nvrtc.1
        ))
    }

    /// The file name.
    pub fn file_name(&self) -> &str {
        &self.0
    }
}

/// The cache folder: `ptx/` in the stoker cache folder.
pub fn default_dir() -> PathBuf {
    stoker_loader::system::cache_dir().join("ptx")
}

/// The cached PTX for `key`, if `dir` has it. A missing or unreadable file is a miss.
pub fn lookup(dir: &Path, key: &CacheKey) -> Option<String> {
    std::fs::read_to_string(dir.join(key.file_name()))
        .ok()
        .filter(|text| !text.is_empty())
}

/// Stores `ptx` under `key` in `dir` (made if missing): written to a temporary file in
/// `dir`, then renamed over the final name.
pub fn store(dir: &Path, key: &CacheKey, ptx: &str) -> std::io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let path = dir.join(key.file_name());
    let tmp = dir.join(format!(
        ".{}.{}-{}.tmp",
        key.file_name(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = std::fs::write(&tmp, ptx).and_then(|()| std::fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_changes_with_everything_the_ptx_depends_on() {
        let key = |src: &str, opts: &str, cc, nvrtc| CacheKey::new(src, opts, cc, nvrtc);
        let base = key("kernel", "--fmad=false", (9, 0), (13, 0));
        assert_eq!(base, key("kernel", "--fmad=false", (9, 0), (13, 0)));
        assert!(base
            .file_name()
            .starts_with("stoker_kernels-sm_90-nvrtc13.0-"));
        assert!(base.file_name().ends_with(".ptx"));
        for other in [
            key("kernel ", "--fmad=false", (9, 0), (13, 0)),
            key("kernel", "--fmad=true", (9, 0), (13, 0)),
            key("kernel", "--fmad=false", (8, 6), (13, 0)),
            key("kernel", "--fmad=false", (9, 0), (13, 1)),
            // The separators keep the parts apart: moving text between them changes it.
            key("kernel--fmad=false", "", (9, 0), (13, 0)),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn stored_ptx_is_found_under_its_key_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ptx");
        let key = CacheKey::new("src", "opts", (9, 0), (13, 0));
        let other = CacheKey::new("src", "opts", (8, 0), (13, 0));
        assert_eq!(lookup(&dir, &key), None, "an empty cache");
        let path = store(&dir, &key, ".version 8.0\n").unwrap();
        assert_eq!(path, dir.join(key.file_name()));
        assert_eq!(lookup(&dir, &key).as_deref(), Some(".version 8.0\n"));
        assert_eq!(lookup(&dir, &other), None);
        // Storing again replaces the file; no temporary file is left behind.
        store(&dir, &key, ".version 8.1\n").unwrap();
        assert_eq!(lookup(&dir, &key).as_deref(), Some(".version 8.1\n"));
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(key.file_name())]);
    }

    #[test]
    fn an_unusable_cache_is_an_error_or_a_miss_never_a_panic() {
        let tmp = tempfile::tempdir().unwrap();
        // The folder's place is taken by a file.
        let blocked = tmp.path().join("ptx");
        std::fs::write(&blocked, b"not a folder").unwrap();
        let key = CacheKey::new("src", "opts", (9, 0), (13, 0));
        assert!(store(&blocked, &key, "ptx").is_err());
        assert_eq!(lookup(&blocked, &key), None);
        // An empty file (say, a copy that failed) is a miss.
        let dir = tmp.path().join("other");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(key.file_name()), b"").unwrap();
        assert_eq!(lookup(&dir, &key), None);
    }
}
