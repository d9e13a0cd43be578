//! Data-parallel training end to end: `stoker-train` launched by `mpirun -np 2` must
//! train exactly as one process with twice the batch, step by step; a rank that dies or
//! hangs must end the job in bounded time; checkpoints move between rank counts.
//!
//! These tests need a build with `--features mpi` and OpenMPI's `mpirun` (`.ci/run`
//! installs it and runs them: `cargo test -p stoker-train --features mpi --test
//! distributed`); a build without the feature has only the test that needs no mpirun.

use std::path::Path;
use std::process::{Command, Output};

fn stoker_train(args: &[&str], cache: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stoker-train"));
    c.args(args).env("STOKER_CACHE", cache);
    c
}

/// Clears variables a surrounding launcher may have set, so that a test's process is
/// the single process it means to be.
fn alone(mut c: Command) -> Command {
    for v in [
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
    ] {
        c.env_remove(v);
    }
    c
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Without the launcher and without MPI in the build, a distributed launch is refused
/// with the reason, before any work.
#[test]
fn flags_without_mpirun_are_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = alone(stoker_train(
        &["--rank", "1", "--world-size", "2"],
        tmp.path(),
    ))
    .output()
    .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{}", text(&out));
    if cfg!(feature = "mpi") {
        assert!(
            err.contains("start the ranks with mpirun"),
            "{}",
            text(&out)
        );
    } else {
        assert!(err.contains("built without MPI"), "{}", text(&out));
    }
    let out = alone(stoker_train(
        &["--rank", "2", "--world-size", "2"],
        tmp.path(),
    ))
    .output()
    .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rank 2 is out of range for world size 2"),
        "{}",
        text(&out)
    );
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use stoker_loader::synthetic::{self, ShapesOptions};

    fn shapes(dir: &Path, count: usize) -> PathBuf {
        let opts = ShapesOptions {
            count,
            size: 12,
            classes: 4,
            seed: 5,
        };
        synthetic::shapes(dir, &opts, |_, _| {}).expect("generate shapes");
        dir.to_path_buf()
    }

    /// `mpirun -np n stoker-train args...`, as root if need be, more ranks than cores
    /// allowed, and shared-memory transport without the ptrace-based single copy
    /// (containers usually forbid it).
    fn mpirun(n: usize, args: &[&str], cache: &Path) -> Command {
        let mut c = Command::new("mpirun");
        c.args(["-np", &n.to_string(), "--oversubscribe"]);
        c.arg("--allow-run-as-root");
        c.arg(env!("CARGO_BIN_EXE_stoker-train"));
        c.args(args)
            .env("STOKER_CACHE", cache)
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
        c
    }

    fn run_ok(mut c: Command) -> Output {
        let out = c
            .output()
            .expect("start the command (is mpirun installed?)");
        assert!(out.status.success(), "{}", text(&out));
        out
    }

    /// The model parameters and optimizer state of a checkpoint, by tensor name.
    fn tensors(path: &Path) -> BTreeMap<String, Vec<f32>> {
        let bytes = std::fs::read(path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        st.tensors()
            .into_iter()
            .filter(|(name, _)| name.starts_with("param.") || name.starts_with("optim."))
            .map(|(name, t)| {
                let v = t
                    .data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                (name, v)
            })
            .collect()
    }

    /// The largest difference between two checkpoints, relative to the weights' scale.
    fn max_diff(a: &BTreeMap<String, Vec<f32>>, b: &BTreeMap<String, Vec<f32>>) -> f32 {
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        let mut worst = 0.0f32;
        for (k, x) in a {
            let y = &b[k];
            assert_eq!(x.len(), y.len(), "{k}");
            for (p, q) in x.iter().zip(y) {
                worst = worst.max((p - q).abs() / p.abs().max(q.abs()).max(1.0));
            }
        }
        worst
    }

    /// The arguments of a short SGD run (momentum and weight decay: both must be the
    /// same on every rank) on `data`, stopping after `steps` steps with a checkpoint.
    fn train_args(data: &Path, batch: usize, steps: u64, ck: &Path) -> Vec<String> {
        [
            "--data",
            data.to_str().unwrap(),
            "--model",
            "mlp",
            "--epochs",
            "2",
            "--batch-size",
            &batch.to_string(),
            "--lr",
            "0.05",
            "--max-steps",
            &steps.to_string(),
            "--checkpoint",
            ck.to_str().unwrap(),
            "--json",
            "--log-every",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn strs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    /// Two ranks with batch B each against one process with batch 2B on the same data
    /// order, after 1, 2, 3, 8 (an epoch) and 12 steps. The mlp has no batch norm, so
    /// the averaged gradient is the big batch's gradient up to rounding: the sums are
    /// split in two halves and added in another order, about 1e-7 relative per step.
    /// Through momentum and 12 steps that stays far below 1e-4; a wrong shard, a
    /// missing average or a skipped sample moves the weights by about 1e-2.
    #[test]
    fn two_ranks_train_like_one_process_with_twice_the_batch() {
        let tmp = tempfile::tempdir().unwrap();
        // 256 samples: 8 steps of 32 per epoch, no padding, no short batch.
        let data = shapes(&tmp.path().join("train"), 256);
        const TOL: f32 = 1e-4;
        for steps in [1u64, 2, 3, 8, 12] {
            let two = tmp.path().join(format!("two-{steps}.safetensors"));
            let one = tmp.path().join(format!("one-{steps}.safetensors"));
            let out = run_ok(mpirun(
                2,
                &strs(&train_args(&data, 16, steps, &two)),
                tmp.path(),
            ));
            // Only rank 0 prints the summary, with the run's shape.
            let stdout = String::from_utf8_lossy(&out.stdout);
            let doc: serde_json::Value = serde_json::from_str(&stdout)
                .unwrap_or_else(|e| panic!("one JSON document from rank 0: {e}\n{stdout}"));
            assert_eq!(doc["world_size"], 2);
            assert_eq!(doc["rank"], 0);
            assert_eq!(doc["collective"], "mpi");
            assert_eq!(doc["steps"], steps);
            run_ok(alone(stoker_train(
                &strs(&train_args(&data, 32, steps, &one)),
                tmp.path(),
            )));
            let d = max_diff(&tensors(&two), &tensors(&one));
            eprintln!("after {steps} steps: largest relative difference {d:.2e}");
            assert!(d < TOL, "after {steps} steps the weights differ by {d}");
        }
        // The comparison can fail: one process with the small batch trains otherwise.
        let small = tmp.path().join("small.safetensors");
        run_ok(alone(stoker_train(
            &strs(&train_args(&data, 16, 12, &small)),
            tmp.path(),
        )));
        let two = tensors(&tmp.path().join("two-12.safetensors"));
        let d = max_diff(&two, &tensors(&small));
        assert!(d > 100.0 * TOL, "batch 16 alone differs by only {d}");
    }

    /// Evaluation split over two ranks (exact shards of an odd-sized set, sums added)
    /// gives one process's validation loss and accuracy, and the logged training sums
    /// are the whole run's.
    #[test]
    fn two_ranks_evaluate_and_log_like_one_process() {
        let tmp = tempfile::tempdir().unwrap();
        let data = shapes(&tmp.path().join("train"), 128);
        // 51 images: rank 0 evaluates 26, rank 1 evaluates 25.
        let val = shapes(&tmp.path().join("val"), 51);
        let summary = |out: Output| -> serde_json::Value {
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", text(&out)))
        };
        let with_val = |batch: usize, ck: &Path| {
            let mut a = train_args(&data, batch, 100, ck);
            a.extend(["--val".into(), val.to_str().unwrap().into()]);
            a
        };
        let (two, one) = (tmp.path().join("two"), tmp.path().join("one"));
        let a = summary(run_ok(mpirun(2, &strs(&with_val(16, &two)), tmp.path())));
        let b = summary(run_ok(alone(stoker_train(
            &strs(&with_val(32, &one)),
            tmp.path(),
        ))));
        for e in 0..2 {
            let (x, y) = (&a["per_epoch"][e], &b["per_epoch"][e]);
            for k in ["val_loss", "val_accuracy", "train_loss", "train_accuracy"] {
                let (p, q) = (x[k].as_f64().unwrap(), y[k].as_f64().unwrap());
                assert!(
                    (p - q).abs() <= 1e-5 * q.abs().max(1.0),
                    "epoch {}: {k} is {p} on two ranks, {q} in one process",
                    e + 1
                );
            }
        }
    }

    /// A checkpoint written by two ranks resumes in one process with the whole batch,
    /// and the result is the uninterrupted two-rank run's.
    #[test]
    fn a_two_rank_checkpoint_resumes_in_one_process() {
        let tmp = tempfile::tempdir().unwrap();
        let data = shapes(&tmp.path().join("train"), 256);
        let straight = tmp.path().join("straight.safetensors");
        run_ok(mpirun(
            2,
            &strs(&train_args(&data, 16, 12, &straight)),
            tmp.path(),
        ));
        let half = tmp.path().join("half.safetensors");
        run_ok(mpirun(
            2,
            &strs(&train_args(&data, 16, 5, &half)),
            tmp.path(),
        ));
        let resumed = tmp.path().join("resumed.safetensors");
        std::fs::copy(&half, &resumed).unwrap();
        let mut args = train_args(&data, 32, 12, &resumed);
        args.extend(["--resume".into(), resumed.to_str().unwrap().into()]);
        let out = run_ok(alone(stoker_train(&strs(&args), tmp.path())));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("resumed from"), "{}", text(&out));
        let d = max_diff(&tensors(&straight), &tensors(&resumed));
        assert!(d < 1e-4, "resumed run differs by {d}");

        // 4 steps of 2 x 16 continue as step 2 of batch 64: the step count (which the
        // learning-rate schedule follows) is re-counted in the new run's steps.
        let four = tmp.path().join("four.safetensors");
        run_ok(mpirun(
            2,
            &strs(&train_args(&data, 16, 4, &four)),
            tmp.path(),
        ));
        let mut args = train_args(&data, 64, 8, &four);
        args.extend(["--resume".into(), four.to_str().unwrap().into()]);
        let out = run_ok(alone(stoker_train(&strs(&args), tmp.path())));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("step 2, epoch 1, batch 2"), "{}", text(&out));

        // 5 steps of 2 x 16 = 160 samples is not a whole number of steps of 64: the
        // rest of the epoch (96 samples) is divided again, 2 steps of 64 (the second
        // padded), and the run goes on from there.
        let mut args = train_args(&data, 64, 12, &resumed);
        std::fs::copy(&half, &resumed).unwrap();
        args.extend(["--resume".into(), resumed.to_str().unwrap().into()]);
        let out = run_ok(alone(stoker_train(&strs(&args), tmp.path())));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("resumed from"), "{}", text(&out));
        assert!(err.contains("step 2, epoch 1"), "{}", text(&out));
    }

    /// Ranks started with settings that cannot train together stop at once, naming
    /// the difference, instead of exchanging mismatched data.
    #[test]
    fn ranks_that_disagree_stop_with_the_difference() {
        let tmp = tempfile::tempdir().unwrap();
        let data = shapes(&tmp.path().join("train"), 64);
        let bin = env!("CARGO_BIN_EXE_stoker-train");
        let data = data.to_str().unwrap();
        let rank = |extra: [&'static str; 2]| -> Vec<&str> {
            let mut v = vec!["-np", "1", bin, "--data", data, "--model", "mlp"];
            v.extend(extra);
            v
        };
        // Checked by the trainer once it is built, and by stoker-train before that.
        for (one, other, named) in [
            (["--log-every", "1"], ["--log-every", "5"], "--log-every"),
            (
                ["--optimizer", "sgd"],
                ["--optimizer", "adamw"],
                "the training settings",
            ),
        ] {
            let out = Command::new("mpirun")
                .args(["--oversubscribe", "--allow-run-as-root"])
                .args(rank(one))
                .arg(":")
                .args(rank(other))
                .env("STOKER_CACHE", tmp.path())
                .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
                .output()
                .unwrap();
            assert!(!out.status.success(), "{}", text(&out));
            assert!(
                String::from_utf8_lossy(&out.stderr)
                    .contains(&format!("the ranks disagree on {named}")),
                "{}",
                text(&out)
            );
        }
    }

    /// The pids of the processes whose parent is `parent`.
    fn children(parent: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // "pid (comm) state ppid ...": comm may hold spaces, so split after ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(parent) {
                out.push(pid);
            }
        }
        out
    }

    /// Starts a long two-rank run, waits until both ranks train, sends `signal` to one
    /// rank, and returns mpirun's output and how long the job took to end after that.
    fn hurt_a_rank(signal: &str, timeout: &str) -> (Output, Duration) {
        let tmp = tempfile::tempdir().unwrap();
        let data = shapes(&tmp.path().join("train"), 256);
        let args = [
            "--data",
            data.to_str().unwrap(),
            "--model",
            "mlp",
            "--epochs",
            "100000",
            "--batch-size",
            "8",
            "--collective-timeout",
            timeout,
        ];
        let mut c = mpirun(2, &args, tmp.path());
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = c.spawn().unwrap();
        let mpirun_pid = child.id();
        // Both ranks started, then a few seconds of training.
        let t = Instant::now();
        let ranks = loop {
            let ranks: Vec<u32> = children(mpirun_pid)
                .into_iter()
                .filter(|&p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "stoker-train")
                })
                .collect();
            if ranks.len() == 2 {
                break ranks;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "ranks never started");
            std::thread::sleep(Duration::from_millis(50));
        };
        std::thread::sleep(Duration::from_secs(3));
        let status = Command::new("kill")
            .args([signal, &ranks[1].to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let hurt = Instant::now();
        // Never hang the test itself: wait on a thread, and fail after two minutes.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(out) => out.unwrap(),
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-9", &mpirun_pid.to_string()])
                    .status();
                for p in ranks {
                    let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
                }
                panic!("the job was still running two minutes after {signal}");
            }
        };
        (out, hurt.elapsed())
    }

    /// A rank killed outright: mpirun sees it exit and ends the others.
    #[test]
    fn a_dead_rank_ends_the_job() {
        let (out, took) = hurt_a_rank("-KILL", "300");
        eprintln!(
            "job ended {:.1} s after a rank was killed",
            took.as_secs_f64()
        );
        assert!(!out.status.success(), "{}", text(&out));
        assert!(
            took < Duration::from_secs(30),
            "took {took:?}\n{}",
            text(&out)
        );
    }

    /// A rank that stops without exiting (SIGSTOP: alive, connected, silent): the other
    /// gives up at its collective deadline, says why, and aborts the job.
    #[test]
    fn a_hung_rank_ends_the_job_at_the_deadline() {
        let (out, took) = hurt_a_rank("-STOP", "3");
        eprintln!(
            "job ended {:.1} s after a rank was stopped",
            took.as_secs_f64()
        );
        assert!(!out.status.success(), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("did not complete within 3 s") && err.contains(" of 2: "),
            "{}",
            text(&out)
        );
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(30),
            "took {took:?}"
        );
    }
}
