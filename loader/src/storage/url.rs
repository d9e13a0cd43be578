//! What a data URL names: the store (scheme and bucket, container or host) and the key
//! or prefix inside it.

use super::StorageError;

/// The kind of store a URL points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Amazon S3 or a compatible store: `s3://` (also `s3a://`).
    S3,
    /// Google Cloud Storage: `gs://`.
    Gcs,
    /// Azure Blob Storage: `az://` (also `azure://`, `abfs://`, `abfss://`).
    Azure,
    /// A plain HTTP(S) server: `http://` or `https://`.
    Http,
    /// The local file system: `file:///absolute/path`.
    File,
}

/// A parsed data URL: `root` names the store (`s3://bucket`, `https://host:port`,
/// `file://`), `key` the object or prefix inside it, without a leading `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataUrl {
    /// The kind of store.
    pub scheme: Scheme,
    /// The store itself: `s3://bucket`, `https://host:port`, `file://`.
    pub root: String,
    /// The object or prefix inside the store, without a leading `/`.
    pub key: String,
}

impl DataUrl {
    /// Splits a data URL; the error says why it names no data (unknown scheme,
    /// query string, missing bucket, relative `file://` path).
    pub fn parse(url: &str) -> Result<DataUrl, StorageError> {
        let bad = |reason: &str| StorageError::Url {
            url: url.to_string(),
            reason: reason.to_string(),
            source: None,
        };
        let i = url
            .find("://")
            .ok_or_else(|| bad("not a URL (expected scheme://...)"))?;
        let (scheme, rest) = (url[..i].to_ascii_lowercase(), &url[i + 3..]);
        let scheme = match scheme.as_str() {
            "s3" | "s3a" => Scheme::S3,
            "gs" => Scheme::Gcs,
            "az" | "azure" | "abfs" | "abfss" => Scheme::Azure,
            "http" | "https" => Scheme::Http,
            "file" => Scheme::File,
            _ => {
                return Err(bad(
                    "unsupported scheme (expected s3://, gs://, az://, http(s):// or file://)",
                ))
            }
        };
        if rest.contains(['?', '#']) {
            return Err(bad("query strings and fragments are not supported"));
        }
        if scheme == Scheme::File {
            // file:///abs/path (an empty host) or file://localhost/abs/path.
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            if !path.starts_with('/') {
                return Err(bad("a file:// URL needs an absolute path (file:///...)"));
            }
            return Ok(DataUrl {
                scheme,
                root: "file://".into(),
                key: path.trim_start_matches('/').to_string(),
            });
        }
        let (host, key) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() {
            return Err(bad(match scheme {
                Scheme::Http => "no host",
                _ => "no bucket or container",
            }));
        }
        Ok(DataUrl {
            scheme,
            root: format!("{}://{host}", &url[..i]),
            key: key.trim_start_matches('/').to_string(),
        })
    }

    /// The URL of `key` in the same store.
    pub fn url_of(&self, key: &str) -> String {
        if self.scheme == Scheme::File {
            format!("file:///{key}")
        } else {
            format!("{}/{key}", self.root)
        }
    }

    /// This URL again (normalised).
    pub fn url(&self) -> String {
        self.url_of(&self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_schemes() {
        let u = DataUrl::parse("s3://bucket/train/x.pack").unwrap();
        assert_eq!(
            (u.scheme, u.root.as_str(), u.key.as_str()),
            (Scheme::S3, "s3://bucket", "train/x.pack")
        );
        assert_eq!(u.url(), "s3://bucket/train/x.pack");
        let u = DataUrl::parse("gs://b").unwrap();
        assert_eq!((u.scheme, u.key.as_str()), (Scheme::Gcs, ""));
        let u = DataUrl::parse("https://host:8080/a/b.tar").unwrap();
        assert_eq!(
            (u.scheme, u.root.as_str(), u.key.as_str()),
            (Scheme::Http, "https://host:8080", "a/b.tar")
        );
        let u = DataUrl::parse("file:///tmp/data/").unwrap();
        assert_eq!((u.scheme, u.key.as_str()), (Scheme::File, "tmp/data/"));
        assert_eq!(u.url_of("tmp/x"), "file:///tmp/x");
        assert_eq!(
            DataUrl::parse("az://container/p").unwrap().scheme,
            Scheme::Azure
        );
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for (url, want) in [
            ("ftp://x/y", "unsupported scheme"),
            ("s3:///key", "no bucket"),
            ("file://relative/path", "absolute path"),
            ("s3://b/k?versionId=1", "query strings"),
        ] {
            let e = DataUrl::parse(url).unwrap_err().to_string();
            assert!(e.starts_with(url) && e.contains(want), "{e}");
        }
    }
}
