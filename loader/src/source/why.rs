//! [`Why`]: why a helper of a source failed, in words, with the error under it where
//! there is one. Helpers (parsers, readers of a part) know what went wrong but not what
//! to call the file; their callers name it and make the [`SourceError`], which keeps
//! the error under it as its [`source`](std::error::Error::source).

use std::path::PathBuf;

use super::{Cause, SourceError};

/// A helper's failure: the reason a [`SourceError`] will give, and the error that
/// caused it, if any. A plain check's message (`format 'x', expected 'y'`) has none;
/// `?` and `.into()` make one from a `String`.
#[derive(Debug)]
pub(crate) struct Why {
    /// What is wrong, in the words the error's message gives.
    pub(crate) reason: String,
    /// The error the reason reports (a parser's, an I/O error), to keep as the source.
    pub(crate) cause: Option<Cause>,
}

impl Why {
    /// `reason`, which reports `cause` in its own words, with `cause` kept.
    pub(crate) fn because(reason: impl Into<String>, cause: impl Into<Cause>) -> Why {
        Why {
            reason: reason.into(),
            cause: Some(cause.into()),
        }
    }

    /// `e`, its message the reason.
    pub(crate) fn of<E: std::error::Error + Send + Sync + 'static>(e: E) -> Why {
        Why::because(e.to_string(), e)
    }

    /// The same cause under other words (the caller's context around the reason).
    pub(crate) fn reword(self, f: impl FnOnce(String) -> String) -> Why {
        Why {
            reason: f(self.reason),
            cause: self.cause,
        }
    }

    /// A [`Format`](SourceError::Format) error about `path`.
    pub(crate) fn format(self, path: impl Into<PathBuf>) -> SourceError {
        let e = SourceError::format(path, self.reason);
        keep(e, self.cause)
    }

    /// A [`Record`](SourceError::Record) error about the record `what`.
    pub(crate) fn record(self, what: impl Into<String>) -> SourceError {
        let e = SourceError::record(what, self.reason);
        keep(e, self.cause)
    }

    /// A [`Remote`](SourceError::Remote) error about the object at `url`.
    #[cfg(feature = "remote")]
    pub(crate) fn remote(self, url: impl Into<String>) -> SourceError {
        let e = SourceError::remote(url, self.reason);
        keep(e, self.cause)
    }
}

fn keep(e: SourceError, cause: Option<Cause>) -> SourceError {
    match cause {
        Some(c) => e.caused_by(c),
        None => e,
    }
}

impl From<String> for Why {
    fn from(reason: String) -> Why {
        Why {
            reason,
            cause: None,
        }
    }
}

impl From<&str> for Why {
    fn from(reason: &str) -> Why {
        Why::from(reason.to_string())
    }
}

/// For the public functions that give their reason as a `String`: the words stay, the
/// cause is dropped.
impl From<Why> for String {
    fn from(why: Why) -> String {
        why.reason
    }
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn the_cause_goes_under_the_error_its_caller_makes() {
        let parse = serde_json::from_slice::<serde_json::Value>(b"{").unwrap_err();
        let why = Why::because(format!("not JSON: {parse}"), parse).reword(|r| format!("a: {r}"));
        let e = why.format("x.json");
        assert!(e.to_string().starts_with("x.json: a: not JSON: "), "{e}");
        assert!(e.source().unwrap().is::<serde_json::Error>());
        let plain = Why::from("format 'x', expected 'y'").record("r");
        assert_eq!(plain.to_string(), "r: format 'x', expected 'y'");
        assert!(plain.source().is_none());
    }
}
