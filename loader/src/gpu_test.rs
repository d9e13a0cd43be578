//! How tests of code that needs a GPU skip where there is none: loudly, and never
//! silently on a machine that is meant to have one.
//!
//! Without a usable GPU such a test calls [`skip`], which prints `SKIPPED: <reason>`
//! to stderr and lets the test pass (CI has no GPU). With `STOKER_REQUIRE_GPU=1` in
//! the environment (what `scripts/gpu-check.sh` sets), [`skip`] panics instead, so
//! every skip is a failure where a GPU is expected.

/// The environment variable that turns skips into failures.
pub const REQUIRE_GPU_VAR: &str = "STOKER_REQUIRE_GPU";

/// Whether the environment asks for GPU tests to run rather than skip.
pub fn gpu_required() -> bool {
    std::env::var(REQUIRE_GPU_VAR).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Report a GPU test as skipped, with `reason`: a printed `SKIPPED` line, or a panic
/// when [`gpu_required`].
pub fn skip(reason: impl std::fmt::Display) {
    if gpu_required() {
        panic!("{REQUIRE_GPU_VAR} is set, but this GPU test would be skipped: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_print_or_fail_by_the_environment() {
        // One test touches the variable, so no other test races it.
        std::env::remove_var(REQUIRE_GPU_VAR);
        assert!(!gpu_required());
        skip("no GPU here");
        std::env::set_var(REQUIRE_GPU_VAR, "1");
        assert!(gpu_required());
        let r = std::panic::catch_unwind(|| skip("no GPU here"));
        std::env::remove_var(REQUIRE_GPU_VAR);
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(
            msg.contains("STOKER_REQUIRE_GPU") && msg.contains("no GPU here"),
            "{msg}"
        );
        std::env::set_var(REQUIRE_GPU_VAR, "0");
        assert!(!gpu_required());
        std::env::remove_var(REQUIRE_GPU_VAR);
    }
}
