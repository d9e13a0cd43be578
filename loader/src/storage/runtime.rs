//! The tokio runtime every remote call runs on, shared by all sources of the process,
//! and the two ways into it: [`spawn`] for async callers (the async read stage keeps
//! io_depth of these in flight) and [`wait`] for synchronous ones (sync mode, opening
//! a data set), which hands the future to the runtime and waits on a channel, so it
//! never calls `block_on` from inside a runtime.

use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use futures_util::FutureExt;
use tokio::runtime::Runtime;

use super::error::runtime_error;
use super::StorageError;

/// The runtime of this process, and the process it was started in. A forked child
/// inherits the memory of its parent's runtime but none of its threads, so a task
/// spawned there would never run (the sync-mode hang after a fork): the child starts
/// a runtime of its own, and the parent's is leaked there (dropping it would wait for
/// threads that do not exist).
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
static RUNTIME_PID: AtomicU32 = AtomicU32::new(0);
/// Held while a runtime is being started.
static STARTING: Mutex<()> = Mutex::new(());

thread_local! {
    /// True on the runtime's own threads, where waiting synchronously would deadlock.
    static ON_RUNTIME: Cell<bool> = const { Cell::new(false) };
}

/// The runtime of this process, if it was started in this process.
fn current(pid: u32) -> Option<&'static Runtime> {
    if RUNTIME_PID.load(Ordering::Acquire) != pid {
        return None;
    }
    let rt = RUNTIME.load(Ordering::Acquire);
    // SAFETY: a non-null pointer here came from `Box::leak` in `runtime` and is never
    // freed, so it is valid for the rest of the process (and of a forked child).
    (!rt.is_null()).then(|| unsafe { &*rt })
}

/// The shared runtime, started on first use in each process. `STOKER_IO_THREADS` sets
/// its worker threads (default 2: they only drive network I/O and copy bytes).
fn runtime() -> Result<&'static Runtime, StorageError> {
    let pid = std::process::id();
    if let Some(rt) = current(pid) {
        return Ok(rt);
    }
    let _starting = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(rt) = current(pid) {
        return Ok(rt);
    }
    let threads = std::env::var("STOKER_IO_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(2)
        .clamp(1, 64);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("stoker-storage")
        .on_thread_start(|| ON_RUNTIME.with(|f| f.set(true)))
        .enable_all()
        .build()
        .map_err(|e| runtime_error(format!("cannot start: {e}"), Some(e.into())))?;
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    RUNTIME.store(rt as *const Runtime as *mut Runtime, Ordering::Release);
    RUNTIME_PID.store(pid, Ordering::Release);
    Ok(rt)
}

/// Installs ring as rustls' process-wide crypto provider (reqwest is built with rustls
/// and no bundled provider, see Cargo.toml), before the first client is built. An
/// application that installed a provider already keeps its own.
pub(crate) fn ensure_crypto() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Runs `fut` on the storage runtime; the returned future (awaitable from any runtime
/// or executor) yields its output. A panic inside `fut` resumes in the awaiting task.
pub fn spawn<F>(fut: F) -> impl Future<Output = Result<F::Output, StorageError>> + Send
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = runtime().map(|rt| rt.spawn(fut));
    async move {
        match handle?.await {
            Ok(v) => Ok(v),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(runtime_error(
                format!("a storage task ended: {e}"),
                Some(e.into()),
            )),
        }
    }
}

/// Runs `fut` on the storage runtime and blocks this thread until it is done. For
/// synchronous callers only: on a storage runtime thread it returns an error instead
/// of deadlocking. A panic inside `fut` resumes here.
pub fn wait<F>(fut: F) -> Result<F::Output, StorageError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if ON_RUNTIME.with(|f| f.get()) {
        return Err(runtime_error(
            "a synchronous storage call from a storage thread (use the async read)",
            None,
        ));
    }
    let rt = runtime()?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let out = AssertUnwindSafe(fut).catch_unwind().await;
        let _ = tx.send(out);
    });
    match rx.recv() {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => Err(runtime_error(
            "the storage runtime dropped a call (shutting down?)",
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_and_spawn_run_on_the_runtime() {
        assert_eq!(wait(async { 6 * 7 }).unwrap(), 42);
        // From inside another runtime: spawn is awaited there, wait is refused on a
        // storage thread.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(spawn(async { 1 })).unwrap(), 1);
        let nested = wait(async { wait(async { 0 }).is_err() }).unwrap();
        assert!(nested, "a wait on a storage thread must be refused");
        let p = std::panic::catch_unwind(|| wait(async { panic!("boom") }));
        assert!(p.is_err());
    }
}
