//! In-memory sources for the engine tests: raw pixels made from the index, with
//! faults (errors, panics) injected at chosen indices or threads.

use std::sync::atomic::{AtomicUsize, Ordering};

use stoker_loader::{Field, Fields, RecordKind, Source, SourceError};

pub struct RawSource {
    pub n: usize,
    pub side: usize,
    pub classes: Vec<String>,
    pub fail: Vec<usize>,
    pub panic: Vec<usize>,
    pub reads: AtomicUsize,
    /// Added to every label: another data set of the same size.
    pub label_offset: usize,
    /// What the source says it has (image and class unless set).
    pub fields: Option<Fields>,
    /// A thread on which asking for the shards panics: a bug outside any one read.
    pub panic_on_thread: Option<&'static str>,
}

impl RawSource {
    pub fn new(n: usize, side: usize) -> RawSource {
        RawSource {
            n,
            side,
            classes: vec!["a".into(), "b".into(), "c".into()],
            fail: vec![],
            panic: vec![],
            reads: AtomicUsize::new(0),
            label_offset: 0,
            fields: None,
            panic_on_thread: None,
        }
    }

    /// The pixels sample `index` holds, before any transform.
    pub fn pixels(&self, index: usize) -> Vec<u8> {
        (0..self.side * self.side * 3)
            .map(|k| ((index * 7919 + k * 31) % 251) as u8)
            .collect()
    }
}

impl Source for RawSource {
    fn len(&self) -> usize {
        self.n
    }
    fn classes(&self) -> &[String] {
        &self.classes
    }
    fn label(&self, index: usize) -> u32 {
        ((index + self.label_offset) % 3) as u32
    }
    fn describe(&self, index: usize) -> String {
        format!("mem record {index}")
    }
    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if self.panic.contains(&index) {
            panic!("injected panic at {index}");
        }
        if self.fail.contains(&index) {
            return Err(SourceError::record(
                self.describe(index),
                "injected failure",
            ));
        }
        buf.clear();
        buf.extend_from_slice(&self.pixels(index));
        Ok(RecordKind::Raw {
            width: self.side as u32,
            height: self.side as u32,
            channels: 3,
        })
    }
    fn format(&self) -> &'static str {
        "memory"
    }
    fn fields(&self) -> Fields {
        self.fields
            .unwrap_or(Fields::of(&[Field::Image, Field::Class]))
    }
    fn shards(&self) -> Option<&[std::ops::Range<usize>]> {
        let here = std::thread::current();
        if self.panic_on_thread.is_some() && here.name() == self.panic_on_thread {
            panic!("a bug on {}", here.name().unwrap_or_default());
        }
        None
    }
}

/// `f`'s result, run on a thread of its own that may take at most a minute: a bound
/// on a hang, not a measurement.
pub fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("no result within a minute (or the thread panicked)")
}
