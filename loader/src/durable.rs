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

/// Checks that `path` may be written as a new file: it does not exist, or it is a
/// regular file. A symbolic link, FIFO, socket or device is refused: writing under a
/// temporary name and renaming would replace the node itself with a regular file (as
/// root, `/dev/null`), never write through it.
pub fn check_output(path: &Path) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.is_file() {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} is {}, not a regular file: refusing to replace it (give the path of a new \
             or regular file)",
            path.display(),
            node_kind(&meta)
        ),
    ))
}

/// What a file system node is, for messages: "a FIFO", "a symbolic link", ...
pub fn node_kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_symlink() {
        return "a symbolic link";
    }
    if t.is_dir() {
        return "a directory";
    }
    if t.is_file() {
        return "a regular file";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    "not a regular file"
}

/// The PID in a temporary name made by [`temp_name`] (`NAME.tmp-PID-N`) or the packed
/// writer (`NAME.tmp-PID`).
fn temp_pid(name: &str) -> Option<u32> {
    let (_, tail) = name.rsplit_once(".tmp-")?;
    let (pid, n) = match tail.split_once('-') {
        Some((pid, n)) => (pid, Some(n)),
        None => (tail, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || n.is_some_and(|n| !digits(n)) {
        return None;
    }
    pid.parse().ok()
}

/// True when process `pid` exists (on this machine, in this PID namespace). Where it
/// cannot be asked (not Unix), every process counts as alive.
pub fn pid_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return true;
        };
        if pid <= 0 {
            return true;
        }
        // SAFETY: signal 0 only checks that the process exists; nothing is sent.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// Removes the temporary files in `dir` whose names start with one of `prefixes` and
/// whose writer is dead (`NAME.tmp-PID[-N]` with no process PID): what a writer killed
/// outright (SIGKILL, a power loss) left behind, which would otherwise fill a disk that
/// the next try needs. Files of live processes (a concurrent writer) are left alone.
/// Returns the names removed. A folder shared by several machines cannot tell their
/// PIDs apart: there, a live writer's file on another machine could be taken for dead.
pub fn remove_stale_temps(dir: &Path, prefixes: &[&str]) -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !prefixes.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let Some(pid) = temp_pid(&name) else { continue };
        if pid == me || pid_alive(pid) {
            continue;
        }
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && std::fs::remove_file(entry.path()).is_ok() {
            removed.push(name);
        }
    }
    removed
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
    check_output(path)?;
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
    fn temp_names_give_their_writer() {
        assert_eq!(temp_pid("a.pack.tmp-123"), Some(123));
        assert_eq!(temp_pid("shard-000001.tar.tmp-77-4"), Some(77));
        assert_eq!(temp_pid("x.tmp-"), None);
        assert_eq!(temp_pid("x.tmp-12a"), None);
        assert_eq!(temp_pid("x.tmp-12-"), None);
        assert_eq!(temp_pid("plain.pack"), None);
        let t = temp_name(Path::new("/x/out.pack"));
        assert_eq!(
            temp_pid(&t.file_name().unwrap().to_string_lossy()),
            Some(std::process::id())
        );
        assert!(pid_alive(std::process::id()));
    }

    #[test]
    fn only_dead_writers_temporaries_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        // A child that has exited (and been reaped) is a PID that no process holds.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let files = [
            format!("shard-000003.tar.tmp-{dead}-0"),
            format!("set.pack.tmp-{dead}"),
            format!("set.pack.tmp-{}", std::process::id()),
            format!("other.tmp-{dead}"),
            "set.pack".to_string(),
        ];
        for n in &files {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        let mut gone = remove_stale_temps(dir.path(), &["shard-", "set.pack"]);
        gone.sort();
        let mut want_gone = vec![files[0].clone(), files[1].clone()];
        want_gone.sort();
        assert_eq!(gone, want_gone);
        let mut left = names(dir.path());
        left.sort();
        let mut want = vec![files[2].clone(), files[3].clone(), files[4].clone()];
        want.sort();
        assert_eq!(
            left, want,
            "live writers, other names and finished files stay"
        );
    }

    #[cfg(unix)]
    #[test]
    fn outputs_that_are_not_regular_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("real");
        std::fs::write(&target, b"keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = write_bytes(&link, b"new").unwrap_err().to_string();
        assert!(e.contains("a symbolic link"), "{e}");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        let e = write_bytes(dir.path(), b"new").unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        let e = check_output(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("character device"), "{e}");
        check_output(&target).unwrap();
        check_output(&dir.path().join("new")).unwrap();
    }

    #[test]
    fn temp_names_differ_per_call() {
        let p = Path::new("/x/out.pack");
        let (a, b) = (temp_name(p), temp_name(p));
        assert_ne!(a, b);
        assert_eq!(a.parent(), p.parent());
    }
}
