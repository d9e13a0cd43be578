//! The error of the loader's settings written as text (flags, Python arguments).
//!
//! A leaf module: the settings' modules use it, and it names none of them, so that
//! the values a message lists (the most workers, the fields' names) travel in the
//! variant.

/// A setting written as text (a flag, a Python argument) that names none of the
/// setting's values: the error of the loader's `FromStr` impls ([`Mode`](crate::Mode),
/// [`OnError`](crate::OnError), [`Workers`](crate::Workers), [`Field`](crate::Field),
/// [`Fields`](crate::Fields), [`Stop`](crate::Stop),
/// [`BoxFormat`](crate::source::BoxFormat), [`DecodedCacheSize`](crate::DecodedCacheSize),
/// [`Encoding`](crate::source::Encoding) and [`parse_size`](crate::config::parse_size)).
/// Each variant keeps the text as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseSettingError {
    /// Not `sync` or `async`.
    #[error("unknown mode '{0}' (expected sync or async)")]
    Mode(String),
    /// Not `fail` or `skip`.
    #[error("unknown error policy '{0}' (expected fail or skip)")]
    OnError(String),
    /// Neither `auto` nor a whole number in range.
    #[error("'{text}' is neither 'auto' nor a whole number from 1 to {max}")]
    Workers {
        /// The text as given.
        text: String,
        /// The most workers (`config::MAX_WORKERS`).
        max: usize,
    },
    /// Not a field's name (nor one of its other spellings); the name as read
    /// (trimmed, in lower case).
    #[error("unknown field '{name}' (known: {})", known.join(", "))]
    Field {
        /// The name as read.
        name: String,
        /// The fields' names, for the message.
        known: Vec<&'static str>,
    },
    /// Not `first_exhausted`, `all_exhausted` or `never`; the rule as read (trimmed).
    #[error("stop must be first_exhausted, all_exhausted or never, not {0:?}")]
    Stop(String),
    /// Not `xyxy` or `xywh`.
    #[error("box format '{0}': give xyxy or xywh")]
    BoxFormat(String),
    /// Not a size: a whole number of bytes with an optional K, M, G or T.
    #[error("'{0}' is not a size (a whole number with an optional K, M, G or T, e.g. 256M)")]
    Size(String),
    /// A size of more bytes than 64 bits count.
    #[error("{0} is out of range")]
    SizeOverflow(String),
    /// Not `auto` nor a size of at least one byte.
    #[error("'{0}' is neither 'auto' nor a size of at least 1 byte (e.g. 256M, 8G)")]
    DecodedCache(String),
    /// Not one of pack's image encodings.
    #[error("unknown encoding '{0}' (expected keep, raw, png or jpeg:Q with Q from 1 to 100)")]
    Encoding(String),
    /// `jpeg:Q` with a quality that is not a whole number from 1 to 100.
    #[error("JPEG quality '{0}' is not a whole number from 1 to 100 (as in jpeg:90)")]
    JpegQuality(String),
    /// A longest side of 0: no image fits it.
    #[error("max side must be at least 1 pixel, not {0}")]
    MaxSide(u64),
}
