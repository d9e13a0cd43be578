//! A Chrome trace of the pipeline's stages over time (opens in Perfetto or
//! chrome://tracing), so a user can see whether reading overlaps compute.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

#[derive(Serialize)]
struct Event {
    name: &'static str,
    ph: &'static str,
    ts: f64,
    dur: f64,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<serde_json::Value>,
}

/// Collects spans from every pipeline thread. Cheap enough to leave on for a bench
/// run (one mutex push per sample); off unless asked for.
pub struct Trace {
    start: Instant,
    inner: Mutex<TraceInner>,
}

#[derive(Default)]
struct TraceInner {
    events: Vec<Event>,
    threads: HashMap<String, u32>,
}

impl Default for Trace {
    fn default() -> Self {
        Trace::new()
    }
}

impl Trace {
    pub fn new() -> Trace {
        Trace {
            start: Instant::now(),
            inner: Mutex::new(TraceInner::default()),
        }
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
        let next = inner.threads.len() as u32 + 1;
        let tid = *inner.threads.entry(tname.to_string()).or_insert(next);
        inner.events.push(Event {
            name,
            ph: "X",
            ts,
            dur,
            pid: 1,
            tid,
            args,
        });
    }

    /// Number of spans recorded.
    pub fn len(&self) -> usize {
        self.inner.lock().map(|i| i.events.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the trace as Chrome's JSON object format.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let inner = self
            .inner
            .lock()
            .map_err(|_| std::io::Error::other("trace lock poisoned"))?;
        let mut names: Vec<serde_json::Value> = inner
            .threads
            .iter()
            .map(|(name, tid)| {
                serde_json::json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                    "args": {"name": name}})
            })
            .collect();
        names.sort_by_key(|v| v["tid"].as_u64());
        let doc = serde_json::json!({
            "traceEvents": names.into_iter()
                .chain(inner.events.iter().map(|e| serde_json::to_value(e).unwrap_or_default()))
                .collect::<Vec<_>>(),
            "displayTimeUnit": "ms",
        });
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        serde_json::to_writer(&mut f, &doc)?;
        f.flush()
    }
}
