//! `stoker-load pack` killed outright (SIGKILL) part-way leaves the previous packed
//! file intact and no half-written file under the output name.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn temporaries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".tmp-"))
        .collect()
}

fn pack(src: &Path, out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stoker-load"));
    c.args(["pack", src.to_str().unwrap(), out.to_str().unwrap()]);
    c
}

#[test]
fn a_killed_pack_leaves_the_previous_file() {
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small");
    let large = tmp.path().join("large");
    stoker_loader::synthetic::write_mnist(&small, 10, 1).unwrap();
    stoker_loader::synthetic::write_mnist(&large, 20_000, 2).unwrap();
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("set.pack");
    assert!(pack(&small, &out).status().unwrap().success());
    let previous = std::fs::read(&out).unwrap();

    // The kill must land while the pack is running; on a fast machine the whole pack
    // can finish between two polls, so try a few times.
    let mut killed_midway = 0;
    for _ in 0..5 {
        for t in temporaries(&out_dir) {
            std::fs::remove_file(t).unwrap();
        }
        let mut child = pack(&large, &out).spawn().unwrap();
        let t0 = Instant::now();
        let running = loop {
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            let writing = temporaries(&out_dir)
                .iter()
                .any(|p| std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false));
            if writing {
                break true;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "pack never started");
            std::thread::sleep(Duration::from_millis(1));
        };
        if !running {
            // It finished: the new file is whole; put the previous one back.
            stoker_loader::durable::write_bytes(&out, &previous).unwrap();
            continue;
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        if status.success() {
            stoker_loader::durable::write_bytes(&out, &previous).unwrap();
            continue;
        }
        killed_midway += 1;
        assert_eq!(
            std::fs::read(&out).unwrap(),
            previous,
            "previous file intact"
        );
        let src = stoker_loader::source::open(&out, stoker_loader::source::Split::Train).unwrap();
        assert_eq!(src.len(), 10, "and still opens as the small set");
    }
    assert!(killed_midway > 0, "no kill landed while packing");
}
