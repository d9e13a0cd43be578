//! Containment for third-party decoders: a panic inside one becomes an error value.
//!
//! The decoders we call are careful, but fuzzing found a damaged JPEG on which
//! zune-jpeg 0.5.15 unwraps a `None` in its AVX2 IDCT
//! (`benches/fuzz/regressions/decode/crash-059cacc724d8033a`). A loader must not let
//! one bad file take down a worker, so each decoder call runs under `catch_unwind`,
//! and the panic hook is told to stay quiet while it does: the caller gets a typed
//! error naming the file, not a "panicked at" line on stderr.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// True while this thread runs a contained call: its panics are reported as errors.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Wraps the process's panic hook once, so that panics inside [`contained`] print
/// nothing; every other panic goes to the hook that was there before.
fn quiet_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs `f`; a panic inside it is returned as `Err` with the panic's message.
///
/// Whatever `f` was writing may be half written: callers treat the error as "this
/// input could not be decoded" and do not read the output.
pub(crate) fn contained<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    quiet_hook();
    let was = CONTAINED.with(|c| c.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(was));
    result.map_err(|payload| {
        if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "a panic without a message".to_string()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message() {
        let r: Result<(), String> = contained(|| panic!("bad block {}", 7));
        assert_eq!(r.unwrap_err(), "bad block 7");
        assert_eq!(contained(|| 5), Ok(5));
        // The flag is restored: outside, nothing is contained.
        assert!(!CONTAINED.with(Cell::get));
    }
}
