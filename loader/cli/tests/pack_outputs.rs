//! `stoker-load pack` never harms its output path: a FIFO, a symbolic link (or any
//! node but a regular file) is refused and left as it was; a full disk leaves no
//! temporary file; temporaries a killed pack left are removed by the next one; a tar
//! pack's manifest comes last, and a folder of stoker-written shards without it is
//! read with a warning.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{failing, path, stoker_load};

fn shapes(dir: &Path, count: usize) -> PathBuf {
    let data = dir.join("shapes");
    let out = stoker_load(&[
        "gen",
        "shapes",
        path(&data),
        "--count",
        &count.to_string(),
        "--size",
        "32",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    data
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[cfg(unix)]
#[test]
fn pack_refuses_a_fifo_and_a_symlink_and_leaves_them_be() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path(), 10);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();

    let fifo = out.join("set.pack");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|st| st.success()) {
        let err = failing(&["pack", path(&data), path(&fifo)]);
        assert!(
            err.contains("a FIFO (named pipe), not a regular file"),
            "{err}"
        );
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        // As the folder of a tar pack too.
        let err = failing(&["pack", path(&data), path(&fifo), "--format", "tar"]);
        assert!(
            err.contains("FIFO") && err.contains("not a folder"),
            "{err}"
        );
        std::fs::remove_file(&fifo).unwrap();
    } else {
        println!("SKIPPED: mkfifo is not available (the FIFO case)");
    }

    // A link to a file the user keeps: writing would replace the link itself.
    let target = dir.path().join("keep.bin");
    std::fs::write(&target, b"precious").unwrap();
    let link = out.join("link.pack");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = failing(&["pack", path(&data), path(&link)]);
    assert!(err.contains("a symbolic link, not a regular file"), "{err}");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert_eq!(names(&out), ["link.pack"], "no temporary left");
    // A regular file is still replaced, whole.
    let file = out.join("ok.pack");
    std::fs::write(&file, b"old").unwrap();
    assert!(stoker_load(&["pack", path(&data), path(&file)])
        .status
        .success());
    assert_eq!(std::fs::read(&file).unwrap()[..8], *b"STKPACK1");
}

#[test]
fn a_pack_removes_the_temporaries_of_dead_packs_but_not_of_live_ones() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path(), 10);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // A process that has exited: its PID names the temporaries of a killed pack.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let live = std::process::id();
    for name in [
        format!("set.pack.tmp-{dead}"),
        format!("set.pack.tmp-{live}"),
        format!("other.pack.tmp-{dead}"),
    ] {
        std::fs::write(out.join(name), vec![0u8; 1000]).unwrap();
    }
    let pack = out.join("set.pack");
    assert!(stoker_load(&["pack", path(&data), path(&pack)])
        .status
        .success());
    assert_eq!(
        names(&out),
        [
            format!("other.pack.tmp-{dead}"),
            "set.pack".to_string(),
            format!("set.pack.tmp-{live}"),
        ],
        "the dead pack's temporary of this output is gone; a live one and another \
         output's stay"
    );
    // The same for a tar pack's folder.
    let shards = dir.path().join("shards");
    std::fs::create_dir(&shards).unwrap();
    std::fs::write(shards.join(format!("shard-000000.tar.tmp-{dead}-0")), b"x").unwrap();
    std::fs::write(shards.join(format!("shards.json.tmp-{dead}-3")), b"x").unwrap();
    let st = stoker_load(&["pack", path(&data), path(&shards), "--format", "tar"]);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert!(
        names(&shards).iter().all(|n| !n.contains(".tmp-")),
        "{:?}",
        names(&shards)
    );
}

#[test]
fn a_tar_pack_without_its_manifest_reads_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path(), 24);
    let shards = dir.path().join("shards");
    let st = stoker_load(&[
        "pack",
        path(&data),
        path(&shards),
        "--format",
        "tar",
        "--shard-size",
        "10K",
    ]);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert!(shards.join("shards.json").is_file());
    let inspect = stoker_load(&["inspect", path(&shards)]);
    assert!(inspect.status.success());
    assert!(
        !String::from_utf8_lossy(&inspect.stderr).contains("warning"),
        "a whole pack: no warning"
    );
    // As a pack killed before its manifest leaves it: whole shards, no manifest.
    std::fs::remove_file(shards.join("shards.json")).unwrap();
    let inspect = stoker_load(&["inspect", path(&shards)]);
    let err = String::from_utf8_lossy(&inspect.stderr);
    assert!(inspect.status.success(), "{err}");
    assert!(
        err.contains("no shards.json") && err.contains("may be incomplete"),
        "{err}"
    );
}

/// Every file of `dir` (names and bytes), sorted by name.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    names(dir)
        .into_iter()
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

#[test]
fn a_refused_pack_leaves_a_finished_pack_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path(), 12);
    let shards = dir.path().join("shards");
    let st = stoker_load(&["pack", path(&data), path(&shards), "--format", "tar"]);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let before = contents(&shards);
    assert!(
        before.iter().any(|(n, _)| n == "shards.json"),
        "{:?}",
        names(&shards)
    );
    let err = failing(&["pack", path(&data), path(&shards), "--format", "tar"]);
    assert!(err.contains("holds .tar files already"), "{err}");
    assert!(
        contents(&shards) == before,
        "a refused tar pack changed the folder"
    );
    // The packed format refuses a folder as its output before writing anything.
    let err = failing(&["pack", path(&data), path(&shards)]);
    assert!(err.contains("not a regular file"), "{err}");
    assert!(
        contents(&shards) == before,
        "a refused pack changed the folder"
    );
    let inspect = stoker_load(&["inspect", path(&shards)]);
    let err = String::from_utf8_lossy(&inspect.stderr);
    assert!(
        inspect.status.success() && !err.contains("warning"),
        "{err}"
    );
}

/// A pack that runs out of disk (a small tmpfs, mounted in a private mount namespace
/// so nothing outside the test sees it) fails with the disk's error and leaves no
/// temporary file behind; a temporary that a killed pack left on the full disk is
/// removed by the next pack, which then fits.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_leaves_no_temporary_and_the_next_pack_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let data = shapes(dir.path(), 40);
    // The pack's size, on a disk with room, sets the sizes of the small disks.
    let whole = dir.path().join("whole.pack");
    assert!(stoker_load(&["pack", path(&data), path(&whole)])
        .status
        .success());
    let size = std::fs::metadata(&whole).unwrap().len();
    let (small, roomy) = (size / 2, size + (64 << 10));
    // Left by a dead pack: without it the second disk fits the pack, with it not.
    let stale = roomy - size / 2;
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let script = r#"
        set -u
        bin=$0; data=$1; mnt=$2; dead=$3; small=$4; roomy=$5; stale=$6
        mount -t tmpfs -o size=$small tmpfs "$mnt" || { echo "MOUNT-FAILED"; exit 0; }
        "$bin" pack "$data" "$mnt/set.pack"; echo "rc1=$?"
        echo "after1:" $(ls -A "$mnt")
        umount "$mnt"
        mount -t tmpfs -o size=$roomy tmpfs "$mnt"
        head -c "$stale" /dev/zero > "$mnt/set.pack.tmp-$dead"
        "$bin" pack "$data" "$mnt/set.pack"; echo "rc2=$?"
        echo "after2:" $(ls -A "$mnt")
        umount "$mnt"
    "#;
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .args([env!("CARGO_BIN_EXE_stoker-load"), path(&data), path(&mnt)])
        .args([dead, small as u32, roomy as u32, stale as u32].map(|n| n.to_string()))
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            println!("SKIPPED: no unshare ({e}): cannot mount a small disk here");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() || text.contains("MOUNT-FAILED") {
        println!(
            "SKIPPED: mounting a tmpfs is not allowed here: {}",
            err.trim()
        );
        return;
    }
    assert!(
        text.contains("rc1=1"),
        "the first pack fails on the full disk: {text}\n{err}"
    );
    assert!(err.contains("No space left on device"), "says why: {err}");
    assert!(
        text.lines().any(|l| l.trim() == "after1:"),
        "nothing left on the full disk: {text}"
    );
    assert!(
        text.contains("rc2=0"),
        "the second pack fits once the dead temporary is gone: {text}\n{err}"
    );
    assert!(
        text.lines().any(|l| l.trim() == "after2: set.pack"),
        "only the pack remains: {text}"
    );
}
