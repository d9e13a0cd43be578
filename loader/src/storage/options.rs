//! How remote calls behave: per-request timeouts, bounded retries with exponential
//! backoff, and settings given in code rather than the environment.

use std::collections::BTreeMap;
use std::time::Duration;

/// Timeouts, retries and extra store settings for remote data.
///
/// [`RemoteOptions::default`] reads `STOKER_IO_RETRIES`, `STOKER_IO_TIMEOUT_MS`,
/// `STOKER_IO_BACKOFF_MS`, `STOKER_IO_RETRY_TIMEOUT_MS` and `STOKER_THROTTLE_MS` from
/// the environment (see `docs/remote-data.md`); the store's own configuration
/// (endpoint, credentials, region) comes from the usual `AWS_*`, `GOOGLE_*` and
/// `AZURE_*` variables, with [`settings`](Self::settings) applied on top.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteOptions {
    /// Retries after the first try of a request (object_store's `max_retries`).
    pub retries: usize,
    /// Limit on one request, from sending it to the end of its body.
    pub timeout: Duration,
    /// Limit on opening a connection.
    pub connect_timeout: Duration,
    /// The first backoff; each retry waits twice as long as the one before, up to
    /// `max_backoff`.
    pub backoff: Duration,
    /// The longest wait between two tries.
    pub max_backoff: Duration,
    /// No retry starts later than this after the first try.
    pub retry_timeout: Duration,
    /// Added to every GET and LIST, to measure a distant store on a near one
    /// (object_store's ThrottledStore). Zero: none.
    pub throttle: Duration,
    /// Store settings by object_store's key names (`aws_endpoint`,
    /// `aws_access_key_id`, `aws_allow_http`, `google_service_account`, ...), applied
    /// after the environment's.
    pub settings: BTreeMap<String, String>,
}

fn env_ms(name: &str, default_ms: u64) -> Duration {
    let ms = std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(default_ms);
    Duration::from_millis(ms)
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            retries: std::env::var("STOKER_IO_RETRIES")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(5)
                .min(100),
            timeout: env_ms("STOKER_IO_TIMEOUT_MS", 60_000),
            connect_timeout: env_ms("STOKER_IO_CONNECT_TIMEOUT_MS", 5_000),
            backoff: env_ms("STOKER_IO_BACKOFF_MS", 100),
            max_backoff: Duration::from_secs(15),
            retry_timeout: env_ms("STOKER_IO_RETRY_TIMEOUT_MS", 120_000),
            throttle: env_ms("STOKER_THROTTLE_MS", 0),
            settings: BTreeMap::new(),
        }
    }
}

impl RemoteOptions {
    /// object_store's retry policy for these options.
    pub(crate) fn retry_config(&self) -> object_store::RetryConfig {
        object_store::RetryConfig {
            backoff: object_store::BackoffConfig {
                init_backoff: self.backoff,
                max_backoff: self.max_backoff.max(self.backoff),
                base: 2.0,
            },
            max_retries: self.retries,
            retry_timeout: self.retry_timeout,
        }
    }

    /// The longest a single request can take with every retry: what a caller may
    /// have to wait before a dead endpoint turns into an error.
    pub fn worst_case(&self) -> Duration {
        let tries = self.retries as u32 + 1;
        let mut backoff = Duration::ZERO;
        let mut b = self.backoff;
        for _ in 0..self.retries {
            backoff += b;
            b = (b * 2).min(self.max_backoff.max(self.backoff));
        }
        (self.timeout + self.connect_timeout) * tries + backoff
    }
}

/// Humantime text for a duration, as object_store's client keys take it.
pub(crate) fn humantime(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_case_adds_tries_and_backoff() {
        let o = RemoteOptions {
            retries: 2,
            timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            ..RemoteOptions::default()
        };
        // 3 tries of at most 2 s, then 100 + 200 ms of backoff.
        assert_eq!(o.worst_case(), Duration::from_millis(6_300));
        assert_eq!(humantime(Duration::from_millis(250)), "250ms");
    }
}
