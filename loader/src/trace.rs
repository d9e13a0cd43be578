//! A Chrome trace of the pipeline's stages over time (opens in Perfetto or
//! chrome://tracing), so a user can see whether reading overlaps compute.
//!
//! Spans are streamed to the trace file as they end (through a buffered writer), so a
//! long run's trace costs disk, not memory: what stays in memory is one name per
//! thread.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

#[derive(Serialize)]
struct Event<'a> {
    name: &'a str,
    ph: &'static str,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<serde_json::Value>,
}

/// Streams spans from every pipeline thread to a file. Cheap enough to leave on for a
/// bench run (one mutex-guarded buffered write per span); off unless asked for.
pub struct Trace {
    start: Instant,
    path: PathBuf,
    inner: Mutex<TraceInner>,
}

struct TraceInner {
    out: Option<BufWriter<File>>,
    threads: HashMap<String, u32>,
    spans: usize,
    /// The first write error; the trace stops there and `finish` reports it.
    error: Option<std::io::Error>,
}

impl TraceInner {
    fn write(&mut self, event: &Event<'_>) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let comma = if self.spans + self.threads.len() > 1 {
            ","
        } else {
            ""
        };
        let res = out
            .write_all(comma.as_bytes())
            .and_then(|()| serde_json::to_writer(&mut *out, event).map_err(std::io::Error::other))
            .and_then(|()| out.write_all(b"\n"));
        if let Err(e) = res {
            self.error = Some(e);
            self.out = None;
        }
    }
}

impl Trace {
    /// Creates (truncates) the trace file at `path`.
    pub fn create(path: &Path) -> std::io::Result<Trace> {
        let mut out = BufWriter::new(File::create(path)?);
        out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        Ok(Trace {
            start: Instant::now(),
            path: path.to_path_buf(),
            inner: Mutex::new(TraceInner {
                out: Some(out),
                threads: HashMap::new(),
                spans: 0,
                error: None,
            }),
        })
    }

    /// The trace file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a span `name` from `begin` to now on the calling thread's track.
    pub fn span(&self, name: &'static str, begin: Instant, args: Option<serde_json::Value>) {
        let end = Instant::now();
        let thread = std::thread::current();
        let tname = thread.name().unwrap_or("unnamed");
        let ts = begin.saturating_duration_since(self.start).as_secs_f64() * 1e6;
        let dur = end.saturating_duration_since(begin).as_secs_f64() * 1e6;
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let tid = match inner.threads.get(tname) {
            Some(&tid) => tid,
            None => {
                let tid = inner.threads.len() as u32 + 1;
                inner.threads.insert(tname.to_string(), tid);
                let meta = Event {
                    name: "thread_name",
                    ph: "M",
                    ts: 0.0,
                    dur: None,
                    pid: 1,
                    tid,
                    args: Some(serde_json::json!({ "name": tname })),
                };
                inner.write(&meta);
                tid
            }
        };
        inner.spans += 1;
        inner.write(&Event {
            name,
            ph: "X",
            ts,
            dur: Some(dur),
            pid: 1,
            tid,
            args,
        });
    }

    /// Number of spans recorded.
    pub fn len(&self) -> usize {
        self.inner.lock().map(|i| i.spans).unwrap_or(0)
    }

    /// Whether no span has been recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes the JSON document and flushes the file; reports the first write error.
    /// Spans recorded afterwards are dropped.
    pub fn finish(&self) -> std::io::Result<()> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| std::io::Error::other("trace lock poisoned"))?;
        if let Some(e) = inner.error.take() {
            return Err(e);
        }
        match inner.out.take() {
            Some(mut out) => {
                out.write_all(b"]}\n")?;
                out.flush()
            }
            None => Ok(()),
        }
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_stream_to_a_valid_chrome_trace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let t = std::sync::Arc::new(Trace::create(&path).unwrap());
        let t0 = Instant::now();
        t.span("read", t0, Some(serde_json::json!({ "index": 3 })));
        let t2 = t.clone();
        std::thread::Builder::new()
            .name("other".into())
            .spawn(move || t2.span("decode", Instant::now(), None))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(t.len(), 2);
        t.finish().unwrap();
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        let names: Vec<&str> = events.iter().filter_map(|e| e["name"].as_str()).collect();
        assert_eq!(names, ["thread_name", "read", "thread_name", "decode"]);
        assert_eq!(events[1]["args"]["index"], 3);
        assert_eq!(events[2]["args"]["name"], "other");
    }
}
