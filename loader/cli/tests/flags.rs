//! Every flag of `stoker-load` given an absurd value (0, negative, huge, NaN, inf,
//! empty, a bad transform): the program must end with status 1 or 2 and a one-line
//! reason, or succeed; never a signal, a panic or a hang.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stoker_loader::synthetic::{self, ShapesOptions};

/// How long one run may take before it counts as a hang.
const DEADLINE: Duration = Duration::from_secs(60);

struct Ran {
    code: Option<i32>,
    stderr: String,
}

fn run(args: &[String]) -> Ran {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stoker-load"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stoker-load");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stoker-load {args:?} hung (killed after {DEADLINE:?})");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code: status.code(),
        stderr: reader.join().unwrap_or_default(),
    }
}

/// Runs one case and checks the rule; returns the exit code.
fn check(args: &[String]) -> i32 {
    let r = run(args);
    let Some(code) = r.code else {
        panic!("stoker-load {args:?} died of a signal: {}", r.stderr);
    };
    assert!(
        !r.stderr.contains("panicked"),
        "stoker-load {args:?} panicked: {}",
        r.stderr
    );
    assert!(
        matches!(code, 0..=2),
        "stoker-load {args:?}: exit {code}: {}",
        r.stderr
    );
    if code != 0 {
        let reasons: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        assert!(
            reasons.len() == 1 && reasons[0].len() > 8,
            "stoker-load {args:?}: not one line of reason: {:?}",
            r.stderr
        );
    }
    code
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "18446744073709551616",
    "6004799503160662",
    "100000000000",
    "nan",
    "inf",
    "-inf",
    "1e300",
    "",
    "x",
];

fn shapes(dir: &Path) {
    let opts = ShapesOptions {
        count: 24,
        size: 24,
        classes: 3,
        seed: 1,
    };
    synthetic::shapes(dir, &opts, |_, _| {}).expect("generate shapes");
}

#[test]
fn bench_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("shapes");
    shapes(&data);
    let d = data.to_str().unwrap();
    let base = |skip: &str| -> Vec<String> {
        let mut v = s(&["bench", d]);
        for (flag, value) in [("--epochs", "1"), ("--batch-size", "8")] {
            if flag != skip {
                v.extend(s(&[flag, value]));
            }
        }
        v
    };
    let numeric = [
        "--workers",
        "--prefetch",
        "--io-depth",
        "--batch-size",
        "--epochs",
        "--compute-ms",
        "--seed",
        "--max-pixels",
        "--seq-len",
    ];
    for mode in ["sync", "async"] {
        for flag in numeric {
            for value in NUMBERS {
                let mut args = base(flag);
                args.extend(s(&["--mode", mode, flag, value]));
                check(&args);
            }
        }
    }
    for (flag, values) in [
        ("--mode", &["", "fast", "SYNC"][..]),
        ("--on-error", &["", "ignore"][..]),
        (
            "--transform",
            &[
                "",
                "rrc:0",
                "rrc:4000000000",
                "rrc:-3",
                "rrc:nan",
                "resize:0,center:0",
                "crop:24:pad=99999999999",
                "jitter:inf",
                "flip:2",
                "erase:p=nan",
                "nonsense",
                ",,,",
            ][..],
        ),
        ("--trace", &["", "/nonexistent/dir/trace.json"][..]),
        ("--tokens", &["", "/nonexistent/tokenizer.json", d][..]),
        ("--workers", &["auto", "AUTO", "automatic", "0.5"][..]),
        (
            "--cpu-budget",
            &["0", "-1", "1", "2", "100000", "nan", ""][..],
        ),
        (
            "--weights",
            &["", "1", "-1", "nan", "0", "inf", "1,,2", "1e400"][..],
        ),
        ("--stop", &["", "never", "sometimes", "all_exhausted"][..]),
        (
            "--steps",
            &["0", "-1", "1", "1e9", "99999999999999999999"][..],
        ),
        (
            "--epoch-batches",
            &["0", "-1", "1", "1e9", "99999999999999999999"][..],
        ),
        ("--on-error", &["", "retry", "skip"][..]),
        ("--io-depth", &["0", "-1", "1", "5000", "nan", ""][..]),
        ("--max-pixels", &["0", "-1", "1", "1e300", ""][..]),
        ("--cache-size", &["0", "1K", "2P", "lots", "1G"][..]),
        ("--split", &["", "nonexistent"][..]),
        ("--box-format", &["", "cxcywh", "xywh"][..]),
        ("--data", &["", "/nonexistent", d][..]),
        (
            "--decoded-cache",
            &[
                "",
                "0",
                "-1",
                "1.5G",
                "lots",
                "99999999T",
                "1T",
                "auto",
                "AUTO",
                "64M",
            ][..],
        ),
    ] {
        for value in values {
            let mut args = base("");
            args.extend(s(&[flag, value]));
            check(&args);
        }
    }
    // The probes, which once crashed: a heap overflow, a panic, an abort.
    for probe in [
        "--mode async --batch-size 6004799503160662 --transform rrc:32",
        "--mode sync --batch-size 6004799503160662 --transform rrc:32",
        "--compute-ms 1e300",
        "--prefetch 100000000000",
    ] {
        let mut args = s(&["bench", d, "--epochs", "1"]);
        args.extend(probe.split(' ').map(String::from));
        assert_ne!(check(&args), 0, "{probe} should be refused");
    }
    // A batch that fits the flags but not the memory bound is refused by the library.
    let args = s(&[
        "bench",
        d,
        "--batch-size",
        "1048576",
        "--transform",
        "resize:8192",
    ]);
    let r = run(&args);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    // Spelled as the flag that sets it.
    assert!(r.stderr.contains("error: --batch-size: "), "{}", r.stderr);
    // A decoded cache beyond the memory bound is refused by the library, with both
    // numbers.
    let r = run(&s(&["bench", d, "--decoded-cache", "1024T"]));
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("--decoded-cache: 1125899906842624 bytes")
            && r.stderr.contains("memory bound of"),
        "{}",
        r.stderr
    );
    // A split the data cannot have: the library's check where the data is opened,
    // named as the flag, with the data set (as stoker-train and Python say it).
    for (value, says) in [
        (
            "validation",
            "--split: 'validation' is a split by name, and an image folder",
        ),
        ("x/y", "--split: \"x/y\" is not a split's name"),
        ("", "--split: \"\" is not a split's name"),
    ] {
        let r = run(&s(&["bench", d, "--epochs", "1", "--split", value]));
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        assert!(
            r.stderr.contains(&format!("error: opening {d}: {says}")),
            "{}",
            r.stderr
        );
    }
    // Missing, empty and odd data arguments.
    for bad in ["", "/nonexistent", "/dev/null", "/proc/self/status"] {
        assert_ne!(check(&s(&["bench", bad, "--epochs", "1"])), 0, "{bad}");
    }
}

#[test]
fn gen_pack_inspect_demo_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("shapes");
    shapes(&data);
    let d = data.to_str().unwrap();
    let out = tmp.path().join("gen-out");
    let o = out.to_str().unwrap();
    for flag in ["--count", "--size", "--classes", "--seed"] {
        for value in NUMBERS {
            let mut args = s(&["gen", "shapes", o]);
            if flag != "--count" {
                args.extend(s(&["--count", "4"]));
            }
            args.extend(s(&[flag, value]));
            check(&args);
            let _ = std::fs::remove_dir_all(&out);
        }
    }
    check(&s(&["gen", "circles", o, "--count", "4"]));
    check(&s(&["gen", "shapes", "", "--count", "4"]));
    for value in NUMBERS {
        check(&s(&["inspect", d, "--limit", value]));
    }
    for bad in ["", "/nonexistent", "/dev/null"] {
        assert_ne!(check(&s(&["inspect", bad])), 0, "{bad}");
        assert_ne!(
            check(&s(&["pack", bad, tmp.path().join("p").to_str().unwrap()])),
            0,
            "{bad}"
        );
    }
    let packed = tmp.path().join("p.stk");
    for value in NUMBERS {
        let _ = std::fs::remove_file(&packed);
        check(&s(&[
            "pack",
            d,
            packed.to_str().unwrap(),
            "--max-side",
            value,
        ]));
    }
    for value in [
        "",
        "raw:",
        "jpeg",
        "jpeg:",
        "jpeg:-1",
        "jpeg:nan",
        "jpeg:1e300",
        "KEEP",
        "png:9",
    ] {
        let _ = std::fs::remove_file(&packed);
        check(&s(&[
            "pack",
            d,
            packed.to_str().unwrap(),
            "--encoding",
            value,
        ]));
    }
    assert_ne!(check(&s(&["pack", d, ""])), 0);
    assert_ne!(check(&s(&["pack", d, "/nonexistent/dir/out.stk"])), 0);
    for flag in [
        "--count",
        "--size",
        "--batch-size",
        "--workers",
        "--compute-ms",
    ] {
        for value in ["0", "-1", "nan", "inf", "18446744073709551616", ""] {
            let args = s(&["demo", "--data", d, flag, value]);
            let code = check(&args);
            // No step time at all is a valid demo.
            if (flag, value) != ("--compute-ms", "0") {
                assert_ne!(code, 0, "demo {flag} {value}");
            }
        }
    }
    assert_ne!(check(&s(&["demo", "--data", d, "--transform", "rrc:0"])), 0);
}
