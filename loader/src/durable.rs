//! Files that appear whole or not at all: written under a temporary name in the same
//! folder, flushed to disk, then renamed over the final name (and the folder flushed),
//! so a crash, a kill or a full disk at any moment leaves the previous file intact and
//! never a half-written one under the final name.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temporary name beside `path`, unique to this process and call: `NAME.tmp-PID-N`.
pub fn temp_name(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    path.with_file_name(name)
}

/// Flush the folder holding `path`, so that a rename into it survives a power loss.
/// A no-op where folders cannot be opened (not Unix).
pub fn sync_parent(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(parent)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Write `path` through `fill`, atomically: `fill` writes to a temporary file beside
/// it, which is flushed, synced and renamed over `path` only when `fill` succeeded. On
/// any error (or a panic in `fill`) the temporary file is removed and `path` is left as
/// it was.
pub fn write_atomic<T>(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    if path.file_name().is_none() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a file name", path.display()),
        ));
    }
    let tmp = temp_name(path);
    let guard = RemoveOnDrop(Some(tmp.clone()));
    let mut out = BufWriter::new(File::create(&tmp)?);
    let value = fill(&mut out)?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    guard.disarm();
    sync_parent(path)?;
    Ok(value)
}

/// [`write_atomic`] of a byte string.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, |out| out.write_all(bytes))
}

struct RemoveOnDrop(Option<PathBuf>);

impl RemoveOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt");
        write_bytes(&path, b"first").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        let e = write_atomic(&path, |out| {
            out.write_all(b"half of the sec")?;
            Err::<(), _>(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "disk full");
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert_eq!(names(dir.path()), ["ckpt"], "no temporary left");
        let r = std::panic::catch_unwind(|| {
            write_atomic(&path, |out| -> std::io::Result<()> {
                out.write_all(b"half")?;
                panic!("interrupted")
            })
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert_eq!(names(dir.path()), ["ckpt"]);
        write_bytes(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        assert!(write_bytes(Path::new("/"), b"x").is_err());
    }

    #[test]
    fn temp_names_differ_per_call() {
        let p = Path::new("/x/out.pack");
        let (a, b) = (temp_name(p), temp_name(p));
        assert_ne!(a, b);
        assert_eq!(a.parent(), p.parent());
    }
}
