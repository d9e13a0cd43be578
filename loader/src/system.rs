//! What this process learns from the system it runs on: the memory it may use, and the
//! folder for generated data and caches.

use std::path::{Path, PathBuf};

/// The memory this process may use, where the system says (Linux): the least of the
/// machine's memory (`MemTotal`), the limit of its cgroup and the cgroups above it
/// (v2 `memory.max`, v1 `memory.limit_in_bytes`), and its address-space limit
/// (`RLIMIT_AS`, `ulimit -v`). The default budgets of the loader's buffers and of the
/// CPU trainer's are fractions of it: in a container or under `ulimit -v`, a batch
/// that passes the check then fits, instead of aborting on allocation.
pub fn physical_memory() -> Option<usize> {
    memory_limit_in(Path::new("/"), address_space_limit())
}

/// The process's `RLIMIT_AS`, when it has one.
fn address_space_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given and nothing else.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) };
        (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// [`physical_memory`] with the files read under `root` (`/` on a machine; a fake tree
/// in tests) and the address-space limit given.
pub fn memory_limit_in(root: &Path, rlimit_as: Option<u64>) -> Option<usize> {
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).ok();
    let total = read("proc/meminfo").and_then(|info| {
        let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kb.checked_mul(1024)
    });
    let mut least = [total, rlimit_as].into_iter().flatten().min();
    let mut limit = |v: u64| least = Some(least.map_or(v, |m| m.min(v)));
    for line in read("proc/self/cgroup").unwrap_or_default().lines() {
        // "hierarchy:controllers:path"; v2 is "0::path".
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (mounts, file): (&[&str], &str) = if id == "0" && controllers.is_empty() {
            (&["sys/fs/cgroup", "sys/fs/cgroup/unified"], "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (&["sys/fs/cgroup/memory"], "memory.limit_in_bytes")
        } else {
            continue;
        };
        for mount in mounts {
            // The process's cgroup and every one above it: the tightest limit holds. A
            // container often sees its own cgroup as the mount's root, so the path
            // named may not exist below it: the root's file then counts.
            let mut dir = path.trim_matches('/').to_string();
            loop {
                let at = if dir.is_empty() {
                    format!("{mount}/{file}")
                } else {
                    format!("{mount}/{dir}/{file}")
                };
                if let Some(v) = read(&at).and_then(|t| t.trim().parse::<u64>().ok()) {
                    limit(v);
                }
                if dir.is_empty() {
                    break;
                }
                dir = dir
                    .rsplit_once('/')
                    .map_or(String::new(), |(up, _)| up.into());
            }
        }
    }
    least.and_then(|b| usize::try_from(b).ok())
}

/// The folder for generated demo data: `$STOKER_CACHE`, else
/// `$XDG_CACHE_HOME/stoker`, else `~/.cache/stoker`, else `.stoker-cache` here.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("STOKER_CACHE") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("stoker");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("stoker");
    }
    PathBuf::from(".stoker-cache")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `files` (path, text) under a fresh folder, as a fake `/`.
    fn fake_root(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    const MEMINFO: (&str, &str) = (
        "proc/meminfo",
        "MemTotal:       16384000 kB\nMemFree:  100 kB\n",
    );
    const TOTAL: usize = 16_384_000 * 1024;

    #[test]
    fn the_memory_bound_is_the_least_of_memtotal_cgroups_and_rlimit() {
        // MemTotal alone.
        let r = fake_root(&[MEMINFO]);
        assert_eq!(memory_limit_in(r.path(), None), Some(TOTAL));
        // RLIMIT_AS below it (ulimit -v).
        assert_eq!(memory_limit_in(r.path(), Some(1 << 30)), Some(1 << 30));
        // cgroup v2: the process's group allows 2 GiB, its parent 1 GiB: 1 GiB holds.
        let r = fake_root(&[
            MEMINFO,
            ("proc/self/cgroup", "0::/jobs/run7\n"),
            ("sys/fs/cgroup/jobs/run7/memory.max", "2147483648\n"),
            ("sys/fs/cgroup/jobs/memory.max", "1073741824\n"),
        ]);
        assert_eq!(memory_limit_in(r.path(), None), Some(1 << 30));
        assert_eq!(memory_limit_in(r.path(), Some(1 << 29)), Some(1 << 29));
        // "max" is no limit.
        let r = fake_root(&[
            MEMINFO,
            ("proc/self/cgroup", "0::/jobs/run7\n"),
            ("sys/fs/cgroup/jobs/run7/memory.max", "max\n"),
        ]);
        assert_eq!(memory_limit_in(r.path(), None), Some(TOTAL));
        // A container that sees its own group as the root (the path named is not
        // below the mount): the root's file counts.
        let r = fake_root(&[
            MEMINFO,
            ("proc/self/cgroup", "0::/docker/abc\n"),
            ("sys/fs/cgroup/memory.max", "536870912\n"),
        ]);
        assert_eq!(memory_limit_in(r.path(), None), Some(512 << 20));
        // cgroup v1 (a hybrid machine: v2 mounted at unified/ without a limit), with
        // the page-rounded "unlimited" above and a real limit on the group.
        let r = fake_root(&[
            MEMINFO,
            (
                "proc/self/cgroup",
                "9:name=systemd:/\n4:memory:/batch/job1\n1:cpu:/\n0::/\n",
            ),
            (
                "sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
            (
                "sys/fs/cgroup/memory/batch/job1/memory.limit_in_bytes",
                "805306368\n",
            ),
            ("sys/fs/cgroup/unified/cgroup.procs", "1\n"),
        ]);
        assert_eq!(memory_limit_in(r.path(), None), Some(768 << 20));
        // v2 under unified/ on a hybrid machine.
        let r = fake_root(&[
            MEMINFO,
            ("proc/self/cgroup", "0::/svc\n"),
            ("sys/fs/cgroup/unified/svc/memory.max", "268435456\n"),
        ]);
        assert_eq!(memory_limit_in(r.path(), None), Some(256 << 20));
        // Nothing known but a limit: the limit.
        let r = fake_root(&[]);
        assert_eq!(memory_limit_in(r.path(), None), None);
        assert_eq!(memory_limit_in(r.path(), Some(4096)), Some(4096));
    }
}
