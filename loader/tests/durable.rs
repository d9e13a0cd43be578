//! A writer killed outright (SIGKILL) in the middle of an atomic write leaves the
//! previous file intact and nothing half-written under the final name.
//!
//! The test runs itself as the writer: the child (marked by an environment variable)
//! writes slowly, the parent kills it once its temporary file holds data.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use stoker_loader::durable;

const CHILD: &str = "STOKER_DURABLE_CHILD";

fn temporaries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".tmp-"))
        .collect()
}

#[test]
fn a_killed_writer_leaves_the_previous_file() {
    if let Ok(target) = std::env::var(CHILD) {
        // The child: a slow writer that never finishes on its own within the test.
        let _ = durable::write_atomic(Path::new(&target), |out| {
            for _ in 0..600 {
                out.write_all(&[0xab; 64 << 10])?;
                out.flush()?;
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(())
        });
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("model.ckpt");
    durable::write_bytes(&target, b"the previous checkpoint").unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "durable::a_killed_writer_leaves_the_previous_file",
            "--nocapture",
        ])
        .env(CHILD, &target)
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let started = temporaries(dir.path())
            .iter()
            .any(|p| std::fs::metadata(p).map(|m| m.len() > 0).unwrap_or(false));
        if started {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the writer never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "killed midway, not after"
    );
    child.kill().unwrap(); // SIGKILL: no unwinding, no cleanup
    child.wait().unwrap();

    assert_eq!(std::fs::read(&target).unwrap(), b"the previous checkpoint");
    // The killed writer's temporary stays (nothing ran to remove it), under its own
    // name only; the next write replaces the target whole.
    assert_eq!(temporaries(dir.path()).len(), 1);
    durable::write_bytes(&target, b"next").unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"next");
}
