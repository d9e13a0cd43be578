//! Building a store from a URL the standard way (the `AWS_*`, `GOOGLE_*`, `AZURE_*`
//! variables, then [`RemoteOptions::settings`]), and the calls the sources make:
//! HEAD, ranged and whole GETs, paginated listings, PUT.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path as LocalPath;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{ClientConfigKey, GetOptions, ObjectMeta, ObjectStore, ObjectStoreExt};

use super::options::humantime;
use super::url::{DataUrl, Scheme};
use super::{RemoteOptions, StorageError};

/// One store (a bucket, container, host or the local file system) and the URL root
/// its keys are under.
#[derive(Clone, Debug)]
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    url: DataUrl,
    /// What the client was built from, and in which process: a forked child builds
    /// its own (the parent's connections and their tasks did not come along).
    /// Shared: every object of a listing carries its bucket.
    options: Arc<RemoteOptions>,
    pid: u32,
}

/// One object: where it is and how big it is.
#[derive(Clone, Debug)]
pub struct Object {
    /// The store the object is in.
    pub bucket: Bucket,
    /// The object's key in the store, without a leading `/`.
    pub key: String,
    /// Size of the object in bytes, as listed.
    pub size: u64,
    /// The store's version tag (ETag), when it gives one: the cache keys on it.
    pub version: Option<String>,
}

/// Stores already built, by (root URL, options): every source of one bucket shares
/// one client and its connection pool.
fn stores() -> &'static Mutex<HashMap<String, Arc<dyn ObjectStore>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

fn config_err(url: &str, e: impl std::error::Error + Send + Sync + 'static) -> StorageError {
    StorageError::Config {
        url: url.to_string(),
        reason: e.to_string(),
        source: Some(Box::new(e)),
    }
}

fn build(url: &DataUrl, o: &RemoteOptions) -> Result<Arc<dyn ObjectStore>, StorageError> {
    super::runtime::ensure_crypto();
    let root = url.root.as_str();
    let timeout = humantime(o.timeout);
    let connect = humantime(o.connect_timeout);
    // The three cloud builders share one shape but no trait: the environment, the URL,
    // retries and timeouts, then the explicit settings under their own key type.
    macro_rules! cloud_store {
        ($builder:ty, $key:ident) => {{
            let mut b = <$builder>::from_env()
                .with_url(root)
                .with_retry(o.retry_config())
                .with_config($key::Client(ClientConfigKey::Timeout), &timeout)
                .with_config($key::Client(ClientConfigKey::ConnectTimeout), &connect);
            for (k, v) in &o.settings {
                b = b.with_config($key::from_str(k).map_err(|e| config_err(root, e))?, v);
            }
            Arc::new(b.build().map_err(|e| config_err(root, e))?)
        }};
    }
    let store: Arc<dyn ObjectStore> = match url.scheme {
        Scheme::File => Arc::new(object_store::local::LocalFileSystem::new()),
        Scheme::S3 => {
            use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
            cloud_store!(AmazonS3Builder, AmazonS3ConfigKey)
        }
        Scheme::Gcs => {
            use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
            cloud_store!(GoogleCloudStorageBuilder, GoogleConfigKey)
        }
        Scheme::Azure => {
            use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
            cloud_store!(MicrosoftAzureBuilder, AzureConfigKey)
        }
        Scheme::Http => {
            use object_store::http::HttpBuilder;
            let mut b = HttpBuilder::new()
                .with_url(root)
                .with_retry(o.retry_config())
                .with_config(ClientConfigKey::Timeout, &timeout)
                .with_config(ClientConfigKey::ConnectTimeout, &connect);
            for (k, v) in &o.settings {
                b = b.with_config(
                    ClientConfigKey::from_str(k).map_err(|e| config_err(root, e))?,
                    v,
                );
            }
            Arc::new(b.build().map_err(|e| config_err(root, e))?)
        }
    };
    if o.throttle.is_zero() {
        return Ok(store);
    }
    use object_store::throttle::{ThrottleConfig, ThrottledStore};
    let cfg = ThrottleConfig {
        wait_get_per_call: o.throttle,
        wait_list_per_call: o.throttle,
        ..ThrottleConfig::default()
    };
    Ok(Arc::new(ThrottledStore::new(store, cfg)))
}

/// The client for `url`'s store in this process: built once per process for each
/// root, options and environment, so every source of one bucket shares one client and
/// its connection pool.
fn client(url: &DataUrl, options: &RemoteOptions) -> Result<Arc<dyn ObjectStore>, StorageError> {
    // The environment is part of a store's configuration: a process that changes
    // AWS_ENDPOINT_URL (a test, a notebook) gets a new client.
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            ["AWS_", "GOOGLE_", "AZURE_"]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .collect();
    env.sort();
    let cache_key = format!(
        "{}\u{0}{options:?}\u{0}{env:?}\u{0}{}",
        url.root,
        std::process::id()
    );
    // A table of clients: a panic elsewhere leaves it usable.
    let mut map = stores().lock().unwrap_or_else(|p| p.into_inner());
    match map.get(&cache_key) {
        Some(s) => Ok(s.clone()),
        None => {
            let s = build(url, options)?;
            map.insert(cache_key, s.clone());
            Ok(s)
        }
    }
}

impl Bucket {
    /// The store `url` lives in (built once per process for each root and options),
    /// and the key it names.
    pub fn open(url: &str, options: &RemoteOptions) -> Result<(Bucket, String), StorageError> {
        let parsed = DataUrl::parse(url)?;
        let store = client(&parsed, options)?;
        let key = parsed.key.clone();
        Ok((
            Bucket {
                store,
                url: parsed,
                options: Arc::new(options.clone()),
                pid: std::process::id(),
            },
            key,
        ))
    }

    /// The client to call: this bucket's own, or in a forked child one built there.
    fn store(&self) -> Result<Arc<dyn ObjectStore>, StorageError> {
        if self.pid == std::process::id() {
            Ok(self.store.clone())
        } else {
            client(&self.url, &self.options)
        }
    }

    /// The URL of `key` in this store.
    pub fn url_of(&self, key: &str) -> String {
        self.url.url_of(key)
    }

    fn path(&self, key: &str) -> Result<Path, StorageError> {
        Path::parse(key).map_err(|e| StorageError::Url {
            url: self.url_of(key),
            reason: format!("not a valid object key: {e}"),
            source: Some(Box::new(e)),
        })
    }

    /// HEAD: the object's size and version.
    pub async fn head(&self, key: &str) -> Result<Object, StorageError> {
        let url = self.url_of(key);
        let meta = self
            .store()?
            .head(&self.path(key)?)
            .await
            .map_err(|e| StorageError::request(&url, "HEAD", e))?;
        Ok(Object {
            bucket: self.clone(),
            key: key.to_string(),
            size: meta.size,
            version: meta.e_tag,
        })
    }

    /// Every object under `prefix` (a folder: `prefix` ends in `/` or is empty), in
    /// key order. The store pages through the listing (1000 keys a page on S3).
    pub async fn list(&self, prefix: &str) -> Result<Vec<Object>, StorageError> {
        let url = self.url_of(prefix);
        let path = if prefix.trim_matches('/').is_empty() {
            None
        } else {
            Some(self.path(prefix.trim_end_matches('/'))?)
        };
        let store = self.store()?;
        let mut stream = store.list(path.as_ref());
        let mut out = Vec::new();
        while let Some(meta) = stream.next().await {
            let meta = meta.map_err(|e| StorageError::request(&url, "LIST", e))?;
            out.push(Object {
                bucket: self.clone(),
                key: meta.location.to_string(),
                size: meta.size,
                version: meta.e_tag,
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// PUT `bytes` as `key` (whole or not at all: object stores never show half an
    /// object).
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), StorageError> {
        let url = self.url_of(key);
        self.store()?
            .put(&self.path(key)?, bytes.into())
            .await
            .map_err(|e| StorageError::request(&url, "PUT", e))?;
        Ok(())
    }
}

impl Object {
    /// The object's full URL, for messages.
    pub fn url(&self) -> String {
        self.bucket.url_of(&self.key)
    }

    /// The conditions that pin a GET to the version listed: `If-Match` with the ETag
    /// (strong ones only: a weak ETag never matches a strong comparison).
    fn pinned(&self) -> GetOptions {
        let strong = self.version.as_ref().filter(|v| !v.starts_with("W/"));
        GetOptions::new().with_if_match(strong.cloned())
    }

    /// An error for a response whose object is not the one listed (a store that
    /// ignores `If-Match` still reports the ETag and size it served).
    fn check_served(&self, what: &str, meta: &ObjectMeta) -> Result<(), StorageError> {
        let etag_changed = match (&self.version, &meta.e_tag) {
            (Some(a), Some(b)) => a != b,
            _ => false,
        };
        if etag_changed || meta.size != self.size {
            return Err(StorageError::Changed {
                url: self.url(),
                what: what.to_string(),
                reason: format!(
                    "listed as {} bytes with ETag {}, now {} bytes with ETag {}",
                    self.size,
                    self.version.as_deref().unwrap_or("(none)"),
                    meta.size,
                    meta.e_tag.as_deref().unwrap_or("(none)")
                ),
                source: None,
            });
        }
        Ok(())
    }

    /// GET bytes `range` of the object, of the version that was listed: an object
    /// replaced since is an error naming it (`StorageError::Changed`), never the new
    /// object's bytes read at the old offsets.
    pub async fn get_range(&self, range: Range<u64>) -> Result<Bytes, StorageError> {
        let url = self.url();
        let what = format!("GET bytes {}..{}", range.start, range.end);
        if range.end > self.size {
            return Err(StorageError::Request {
                url,
                what,
                reason: format!("the object has only {} bytes", self.size),
                source: None,
            });
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let got = self
            .bucket
            .store()?
            .get_opts(
                &self.bucket.path(&self.key)?,
                self.pinned().with_range(Some(range.clone())),
            )
            .await
            .map_err(|e| StorageError::request(&url, what.clone(), e))?;
        self.check_served(&what, &got.meta)?;
        let bytes = got
            .bytes()
            .await
            .map_err(|e| StorageError::request(&url, what.clone(), e))?;
        if bytes.len() as u64 != range.end - range.start {
            return Err(StorageError::Request {
                url,
                what,
                reason: format!("got {} bytes (the object changed?)", bytes.len()),
                source: None,
            });
        }
        Ok(bytes)
    }

    /// GET the whole object.
    pub async fn get(&self) -> Result<Bytes, StorageError> {
        self.get_range(0..self.size).await
    }

    /// GET the whole object (the version listed) as a stream of chunks, for objects
    /// too big to hold.
    pub async fn stream(
        &self,
    ) -> Result<futures_util::stream::BoxStream<'static, Result<Bytes, StorageError>>, StorageError>
    {
        let url = self.url();
        let got = self
            .bucket
            .store()?
            .get_opts(&self.bucket.path(&self.key)?, self.pinned())
            .await
            .map_err(|e| StorageError::request(&url, "GET", e))?;
        self.check_served("GET", &got.meta)?;
        Ok(got
            .into_stream()
            .map(move |r| r.map_err(|e| StorageError::request(&url, "GET (reading the body)", e)))
            .boxed())
    }
}

/// Upload the local file `path` as the object `url` (for tests, benchmarks and
/// `stoker-load pack ... s3://...`). Synchronous.
pub fn upload_file(
    path: &LocalPath,
    url: &str,
    options: &RemoteOptions,
) -> Result<(), StorageError> {
    let (bucket, key) = Bucket::open(url, options)?;
    let bytes = std::fs::read(path).map_err(|e| StorageError::Cache {
        path: path.to_path_buf(),
        what: "reading a file to upload".into(),
        source: e,
    })?;
    super::wait(async move { bucket.put(&key, Bytes::from(bytes)).await })?
}

/// Upload every file under the local folder `dir` to the prefix `url` (keys keep the
/// relative paths), `parallel` PUTs at a time. Returns the number of files.
pub fn upload_dir(
    dir: &LocalPath,
    url: &str,
    options: &RemoteOptions,
    parallel: usize,
) -> Result<usize, StorageError> {
    let (bucket, prefix) = Bucket::open(url, options)?;
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let io = |path: &LocalPath, e| StorageError::Cache {
        path: path.to_path_buf(),
        what: "listing a folder to upload".into(),
        source: e,
    };
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| io(&d, e))? {
            let entry = entry.map_err(|e| io(&d, e))?;
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    let prefix = if prefix.is_empty() || prefix.ends_with('/') {
        prefix
    } else {
        format!("{prefix}/")
    };
    let mut jobs = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(dir).unwrap_or(f);
        let rel: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        jobs.push((f.clone(), format!("{prefix}{}", rel.join("/"))));
    }
    let n = jobs.len();
    // A manifest (a tar pack's shards.json, `source::tar::MANIFEST_NAME`) says the
    // files beside it are whole: it goes up only after all of them.
    let (last, jobs): (Vec<_>, Vec<_>) = jobs
        .into_iter()
        .partition(|(f, _)| f.file_name().is_some_and(|n| n == "shards.json"));
    super::wait(async move {
        for batch in [jobs, last] {
            put_all(&bucket, batch, parallel).await?;
        }
        Ok::<_, StorageError>(())
    })??;
    Ok(n)
}

/// PUTs each (local file, key), `parallel` at a time.
async fn put_all(
    bucket: &Bucket,
    jobs: Vec<(std::path::PathBuf, String)>,
    parallel: usize,
) -> Result<(), StorageError> {
    let puts = futures_util::stream::iter(jobs.into_iter().map(|(file, key)| {
        let bucket = bucket.clone();
        async move {
            // Small files, read whole; a slow disk only slows the upload.
            let bytes = std::fs::read(&file).map_err(|e| StorageError::Cache {
                path: file.clone(),
                what: "reading a file to upload".into(),
                source: e,
            })?;
            bucket.put(&key, Bytes::from(bytes)).await
        }
    }))
    .buffer_unordered(parallel.max(1));
    futures_util::pin_mut!(puts);
    while let Some(r) = puts.next().await {
        r?;
    }
    Ok(())
}
