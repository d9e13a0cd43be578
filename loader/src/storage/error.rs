//! Errors of remote storage: each names the object's URL and what was being done, and
//! keeps the storage client's error as its source.

/// The storage client's (or the runtime's) own error, kept as the
/// [`source`](std::error::Error::source) of a [`StorageError`].
type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a remote call failed. Every message starts with the URL concerned.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The URL cannot name data (unknown scheme, no bucket, bad characters).
    #[error("{url}: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
        /// The parser's error, where there was one (an object key it refuses).
        #[source]
        source: Option<Cause>,
    },
    /// The store could not be configured from the URL and the environment.
    #[error("{url}: cannot configure the store: {reason}")]
    Config {
        /// The URL the store was to serve.
        url: String,
        /// The store client's message.
        reason: String,
        /// The store client's error.
        #[source]
        source: Option<Cause>,
    },
    /// No such object (or bucket).
    #[error("{url}: not found ({reason})")]
    NotFound {
        /// The object's (or bucket's) URL.
        url: String,
        /// The store's message.
        reason: String,
        /// The store client's error.
        #[source]
        source: Option<Cause>,
    },
    /// A request failed after its retries (or at once, for errors not worth retrying:
    /// refused credentials, a missing bucket).
    #[error("{url}: {what} failed: {reason}")]
    Request {
        /// The object's URL.
        url: String,
        /// The request, e.g. `GET bytes 0..128`.
        what: String,
        /// Why it failed, with the causes the client reported.
        reason: String,
        /// The store client's error, where there was one (not for a short read).
        #[source]
        source: Option<Cause>,
    },
    /// The object is not the version that was listed or indexed (replaced, grown,
    /// rewritten): reading on would pair the old index with the new bytes.
    #[error(
        "{url}: {what}: the object changed since it was listed ({reason}); open the data \
         set again to read the new version"
    )]
    Changed {
        /// The object's URL.
        url: String,
        /// The request that noticed the change.
        what: String,
        /// How the object differs from the version listed (ETag, size).
        reason: String,
        /// The store client's error, where it refused the request (`If-Match`).
        #[source]
        source: Option<Cause>,
    },
    /// The local cache could not be used.
    #[error("{}: {what}: {source}", path.display())]
    Cache {
        /// The cache file or folder.
        path: std::path::PathBuf,
        /// What was being done, e.g. "writing a cache file".
        what: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The storage runtime could not start or went away.
    #[error("the storage runtime: {reason}")]
    Runtime {
        /// What happened.
        reason: String,
        /// The error that stopped it, where there was one (the runtime could not
        /// start, a task was cancelled).
        #[source]
        source: Option<Cause>,
    },
}

impl StorageError {
    /// Wraps an object_store error of `what` (e.g. `GET bytes 0..128`) on `url`.
    pub(crate) fn request(url: &str, what: impl Into<String>, e: object_store::Error) -> Self {
        match e {
            object_store::Error::NotFound { source, .. } => StorageError::NotFound {
                url: url.to_string(),
                reason: flatten(source.as_ref()),
                source: Some(source),
            },
            // Only our If-Match asks for a precondition: the ETag is no longer the one
            // listed.
            object_store::Error::Precondition { source, .. } => StorageError::Changed {
                url: url.to_string(),
                what: what.into(),
                reason: format!("If-Match failed: {}", flatten(source.as_ref())),
                source: Some(source),
            },
            e @ (object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }) => StorageError::Request {
                url: url.to_string(),
                what: what.into(),
                reason: format!(
                    "refused: check the credentials (AWS_*, GOOGLE_* or AZURE_* variables): {}",
                    flatten(&e)
                ),
                source: Some(Box::new(e)),
            },
            other => StorageError::Request {
                url: url.to_string(),
                what: what.into(),
                reason: flatten(&other),
                source: Some(Box::new(other)),
            },
        }
    }

    /// The URL the error is about, where there is one.
    pub fn url(&self) -> Option<&str> {
        match self {
            StorageError::Url { url, .. }
            | StorageError::Config { url, .. }
            | StorageError::NotFound { url, .. }
            | StorageError::Request { url, .. }
            | StorageError::Changed { url, .. } => Some(url),
            StorageError::Cache { .. } | StorageError::Runtime { .. } => None,
        }
    }
}

/// A [`Runtime`](StorageError::Runtime) error: `reason`, and the error under it.
pub(crate) fn runtime_error(reason: impl Into<String>, source: Option<Cause>) -> StorageError {
    StorageError::Runtime {
        reason: reason.into(),
        source,
    }
}

/// An error and its chain of causes on one line (object_store nests the HTTP error,
/// the retry count and the server's message).
pub(crate) fn flatten(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}
