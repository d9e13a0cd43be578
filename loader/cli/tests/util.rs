//! Running the built `stoker-load`: its whole output, a run that must fail with a
//! message (and not a panic), and paths as arguments.

use std::path::Path;
use std::process::{Command, Output};

pub fn stoker_load(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stoker-load"))
        .args(args)
        .output()
        .expect("run stoker-load")
}

/// The standard error of a run that must fail, and fail with a message.
pub fn failing(args: &[&str]) -> String {
    let out = stoker_load(args);
    assert!(!out.status.success(), "stoker-load {args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !err.contains("panicked"),
        "a panic is not an error message: {err}"
    );
    err
}

/// `p` as an argument (temporary paths are UTF-8).
pub fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}
