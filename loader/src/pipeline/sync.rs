//! Sync mode: each batch is read, decoded and collated on the consumer's thread when
//! asked for, through the same per-sample code as async mode.

use std::time::Instant;

use stoker_augment::retain::Retention;
use stoker_augment::Scratch;

use super::Shared;
use crate::metrics::add_time;
use crate::plan::Plan;
use crate::pool::Pool;
use crate::{Batch, LoaderError};

/// Buffers reused from batch to batch.
#[derive(Default)]
pub(crate) struct SyncState {
    scratch: Scratch,
    bytes: Vec<u8>,
    /// Shrinks `bytes` after an outlier (see stoker_augment::retain).
    retention: Retention,
}

impl SyncState {
    pub fn next_batch(
        &mut self,
        shared: &Shared,
        pool: &Pool,
        plan: &Plan,
        step: usize,
    ) -> Result<Batch, LoaderError> {
        let t0 = Instant::now();
        let mut buf = pool.acquire_now();
        let slot = shared.slot_bytes();
        let indices = plan.batch(step);
        let mut errors = Vec::new();
        for (pos, &index) in indices.iter().enumerate() {
            let out = &mut buf.as_mut_slice()[pos * slot..(pos + 1) * slot];
            let res = shared.read(index, &mut self.bytes).and_then(|kind| {
                shared.decode(plan.epoch, index, kind, &self.bytes, &mut self.scratch, out)
            });
            self.retention.note(self.bytes.len());
            self.retention.trim(&mut self.bytes);
            if let Err(e) = res {
                let fatal = matches!(e, crate::LoaderError::Panic { .. });
                errors.push((pos, e));
                if fatal || shared.on_error == super::OnError::Fail {
                    break;
                }
            }
        }
        let out = shared.finish(buf, plan.epoch, step, indices.to_vec(), errors);
        // In sync mode all of the data time is time the consumer waits.
        add_time(&shared.counters.wait_ns, t0.elapsed());
        if let Some(tr) = &shared.trace {
            tr.span("wait", t0, Some(serde_json::json!({ "step": step })));
        }
        out
    }
}
