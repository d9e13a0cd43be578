//! Object storage: data behind `s3://`, `gs://`, `az://`, `http(s)://` and `file://`
//! URLs, read through the `object_store` crate.
//!
//! One concern per file: `url.rs` (what a data URL names), `options.rs` (timeouts,
//! retries, backoff and explicit settings, from the environment or code), `store.rs`
//! (building a store from a URL the standard way and the object calls the sources
//! make), `runtime.rs` (the shared tokio runtime every remote call runs on, and the
//! bridge for synchronous callers), `cache.rs` (the size-bounded local copy of remote
//! objects). See `docs/remote-data.md`.

mod cache;
mod error;
mod options;
mod runtime;
mod store;
mod url;

pub use cache::Cache;
pub use error::StorageError;
pub use options::RemoteOptions;
pub use runtime::{spawn, wait};
pub use store::{upload_dir, upload_file, Bucket, Object};
pub use url::{DataUrl, Scheme};

/// Reads bytes `range` of `object` into `buf`: from the cache's local copy when a
/// cache is given and admits the object (fetching it whole first), else by a ranged
/// GET.
pub async fn read_into(
    object: &Object,
    cache: Option<&Cache>,
    range: std::ops::Range<u64>,
    buf: &mut Vec<u8>,
) -> Result<(), StorageError> {
    if let Some(c) = cache {
        if c.read_into(object, range.clone(), buf).await? {
            return Ok(());
        }
    }
    let bytes = object.get_range(range).await?;
    buf.clear();
    buf.extend_from_slice(&bytes);
    Ok(())
}
