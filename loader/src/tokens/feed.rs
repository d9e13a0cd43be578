//! The feed: a rank's documents, in the epoch's order, read chunk by chunk and
//! tokenized; on the consumer's thread (sync) or by worker threads (async), whose
//! results a reorder step puts back in the feeder's order, so both give the same
//! stream. At most `ahead` chunks are read and not yet consumed, which bounds memory.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, unbounded, Receiver};

use super::docs::{DocReader, Docs};
use super::{TextTokenizer, TokenError};

/// The largest chunk and read buffer held so far, in bytes.
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub chunk: AtomicUsize,
    pub buffer: AtomicUsize,
}

/// One unit of work: a chunk of a document's text, or its EOS. `doc` is the
/// document's place in the rank's epoch order.
enum Job {
    Text { doc: usize, text: String },
    Eos { doc: usize },
}

/// What the feeder reads: the documents of `order[next..]`, chunk by chunk.
pub(crate) struct Jobs {
    docs: Arc<Docs>,
    order: Arc<Vec<usize>>,
    next: usize,
    reader: Option<DocReader>,
    chunk_bytes: usize,
    held: Arc<Held>,
}

impl Jobs {
    pub(crate) fn new(
        docs: Arc<Docs>,
        order: Arc<Vec<usize>>,
        from: usize,
        chunk_bytes: usize,
        held: Arc<Held>,
    ) -> Jobs {
        Jobs {
            docs,
            order,
            next: from,
            reader: None,
            chunk_bytes,
            held,
        }
    }

    fn next_job(&mut self) -> Option<Result<Job, TokenError>> {
        let doc = self.next;
        let &index = self.order.get(doc)?;
        let reader = match &mut self.reader {
            Some(r) => r,
            None => match self.docs.reader(index, self.chunk_bytes) {
                Ok(r) => self.reader.insert(r),
                Err(e) => return Some(self.fail(e)),
            },
        };
        match reader.next_chunk() {
            Ok(Some(text)) => {
                self.held.chunk.fetch_max(text.len(), Ordering::Relaxed);
                self.held.buffer.fetch_max(reader.held(), Ordering::Relaxed);
                Some(Ok(Job::Text { doc, text }))
            }
            Ok(None) => {
                self.reader = None;
                self.next += 1;
                Some(Ok(Job::Eos { doc }))
            }
            Err(e) => Some(self.fail(e)),
        }
    }

    /// Ends the feed after an error: nothing past it is read.
    fn fail(&mut self, e: TokenError) -> Result<Job, TokenError> {
        self.next = self.order.len();
        self.reader = None;
        Err(e)
    }

    fn what(&self, doc: usize) -> String {
        self.docs.describe(self.order[doc])
    }
}

/// A run of one document's tokens, in stream order.
pub(crate) type Tokens = (usize, Vec<u32>);

fn run(
    job: Job,
    tok: &TextTokenizer,
    eos: u32,
    what: impl Fn(usize) -> String,
) -> Result<Tokens, TokenError> {
    match job {
        Job::Eos { doc } => Ok((doc, vec![eos])),
        Job::Text { doc, text } => {
            // A tokenizer that panics on some text is that document's error.
            let out = catch_unwind(AssertUnwindSafe(|| tok.encode(&text)))
                .unwrap_or_else(|_| Err("the tokenizer panicked".to_string()));
            out.map(|ids| (doc, ids))
                .map_err(|r| TokenError::record(what(doc), format!("tokenizing: {r}")))
        }
    }
}

/// Tokens of the rank's documents in order.
pub(crate) enum Feed {
    Sync {
        jobs: Jobs,
        tok: TextTokenizer,
        eos: u32,
    },
    Async(AsyncFeed),
}

impl Feed {
    pub(crate) fn next(&mut self) -> Result<Option<Tokens>, TokenError> {
        match self {
            Feed::Sync { jobs, tok, eos } => match jobs.next_job() {
                None => Ok(None),
                Some(job) => {
                    let docs = jobs.docs.clone();
                    let order = jobs.order.clone();
                    run(job?, tok, *eos, |d| docs.describe(order[d])).map(Some)
                }
            },
            Feed::Async(a) => a.next(),
        }
    }

    /// The name of document `doc` of the rank's order.
    pub(crate) fn what(&self, doc: usize) -> String {
        match self {
            Feed::Sync { jobs, .. } => jobs.what(doc),
            Feed::Async(a) => a.docs.describe(a.order[doc]),
        }
    }
}

/// A result of the workers: tokens, the end of the feed, or an error.
type Done = Option<Result<Tokens, TokenError>>;

/// The feeder thread, `workers` tokenizing threads and the reorder step.
pub(crate) struct AsyncFeed {
    docs: Arc<Docs>,
    order: Arc<Vec<usize>>,
    results: Receiver<(u64, Done)>,
    /// One per chunk read and not yet consumed: the feeder waits for room.
    permits: Receiver<()>,
    waiting: BTreeMap<u64, Done>,
    next_seq: u64,
    finished: bool,
    threads: Vec<JoinHandle<()>>,
}

impl AsyncFeed {
    pub(crate) fn start(
        mut jobs: Jobs,
        tok: TextTokenizer,
        eos: u32,
        workers: usize,
        ahead: usize,
    ) -> AsyncFeed {
        let (docs, order) = (jobs.docs.clone(), jobs.order.clone());
        let (permit_tx, permits) = bounded::<()>(ahead.max(1));
        let (job_tx, job_rx) = bounded::<(u64, Option<Result<Job, TokenError>>)>(ahead.max(1));
        let (result_tx, results) = unbounded::<(u64, Done)>();
        let mut threads = Vec::with_capacity(workers + 1);
        threads.push(std::thread::spawn(move || {
            let mut seq = 0u64;
            loop {
                // Room first: a consumer that went away ends the feeder here.
                if permit_tx.send(()).is_err() {
                    return;
                }
                let job = jobs.next_job();
                let last = !matches!(job, Some(Ok(_)));
                if job_tx.send((seq, job)).is_err() || last {
                    return;
                }
                seq += 1;
            }
        }));
        for _ in 0..workers.max(1) {
            let (rx, tx, tok) = (job_rx.clone(), result_tx.clone(), tok.clone());
            let (docs, order) = (docs.clone(), order.clone());
            threads.push(std::thread::spawn(move || {
                for (seq, job) in rx.iter() {
                    let done = match job {
                        None => None,
                        Some(Err(e)) => Some(Err(e)),
                        Some(Ok(job)) => Some(run(job, &tok, eos, |d| docs.describe(order[d]))),
                    };
                    if tx.send((seq, done)).is_err() {
                        return;
                    }
                }
            }));
        }
        AsyncFeed {
            docs,
            order,
            results,
            permits,
            waiting: BTreeMap::new(),
            next_seq: 0,
            finished: false,
            threads,
        }
    }

    fn next(&mut self) -> Result<Option<Tokens>, TokenError> {
        if self.finished {
            return Ok(None);
        }
        let done = loop {
            if let Some(d) = self.waiting.remove(&self.next_seq) {
                break d;
            }
            match self.results.recv() {
                Ok((seq, d)) => {
                    self.waiting.insert(seq, d);
                }
                Err(_) => {
                    self.finished = true;
                    return Err(TokenError::Stopped(
                        "a tokenizing thread ended before the epoch did".into(),
                    ));
                }
            }
        };
        self.next_seq += 1;
        // This chunk is consumed: the feeder may read one more.
        let _ = self.permits.try_recv();
        match done {
            None => {
                self.finished = true;
                Ok(None)
            }
            Some(Err(e)) => {
                self.finished = true;
                Err(e)
            }
            Some(Ok(t)) => Ok(Some(t)),
        }
    }
}

impl Drop for AsyncFeed {
    fn drop(&mut self) {
        // Closing the channels ends the feeder (waiting for room) and the workers
        // (waiting for jobs, or sending results nobody reads) before they are joined.
        self.permits = crossbeam_channel::never();
        self.results = crossbeam_channel::never();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
