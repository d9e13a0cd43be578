//! Sync mode: each batch is read, decoded and collated on the consumer's thread when
//! asked for, through the same per-sample code as async mode.

use std::time::Instant;

use stoker_augment::retain::Retention;
use stoker_augment::Scratch;

use super::fields::FieldScratch;
use super::work::{Input, ReadSample};
use super::Shared;
use crate::epoch_plan::Plan;
use crate::metrics::add_time;
use crate::pool::Pool;
use crate::{Batch, LoaderError};

/// Buffers reused from batch to batch.
#[derive(Default)]
pub(crate) struct SyncState {
    scratch: Scratch,
    bytes: Vec<u8>,
    /// Shrinks `bytes` after an outlier (see stoker_augment::retain).
    retention: Retention,
    /// For sources with fields.
    ann: crate::Annotation,
    fields: FieldScratch,
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
        let (mask, masks_at) = (shared.mask_bytes(), shared.masks_offset());
        let mut errors = Vec::new();
        let mut outs = Vec::new();
        for (pos, &index) in indices.iter().enumerate() {
            let data = buf.as_mut_slice();
            let (images, masks) = data.split_at_mut(masks_at);
            let out = &mut images[pos * slot..(pos + 1) * slot];
            let hit = shared.lookup(index);
            let res = match &hit {
                Some(d) => Ok(Input::Cached(d)),
                None => shared
                    .read(index, &mut self.bytes, &mut self.ann)
                    .map(|kind| Input::Read {
                        kind,
                        bytes: &self.bytes,
                        ann: &self.ann,
                    }),
            }
            .and_then(|input| {
                let sample = ReadSample {
                    epoch: plan.epoch,
                    index,
                    input,
                };
                if shared.fields.is_none() {
                    return shared.decode(&sample, &mut self.scratch, out);
                }
                let m = &mut masks[pos * mask..(pos + 1) * mask];
                let f =
                    shared.decode_sample(sample, &mut self.scratch, &mut self.fields, out, m)?;
                outs.push((pos, f));
                Ok(())
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
        let out = shared.finish(buf, plan.epoch, step, indices.to_vec(), errors, outs);
        // In sync mode all of the data time is time the consumer waits.
        add_time(&shared.counters.wait_ns, t0.elapsed());
        if let Some(tr) = &shared.trace {
            tr.span("wait", t0, Some(serde_json::json!({ "step": step })));
        }
        out
    }
}
