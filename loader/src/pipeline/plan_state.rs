//! Plans and states of a running loader: which [`Plan`] an epoch follows (the
//! sampler's, a mixture's, or the rest of an epoch taken over by a resume), the plans
//! kept because they are not a pure function of the epoch, the state at each batch,
//! and how a state turns back into a plan and a batch. The `Plan` type itself is in
//! `epoch_plan.rs`.

use std::sync::{Arc, Mutex, MutexGuard};

use super::Shared;
use crate::config::{MAX_BATCH_SIZE, MAX_WORLD};
use crate::elastic::{self, Elastic};
use crate::epoch_plan::{Plan, PlanMeta};
use crate::sampler::deal;
use crate::source::mixture::order::Generator;
use crate::source::mixture::{MixPos, Mixture, Stop};
use crate::state::{LoaderState, MixtureState};
use crate::LoaderError;

/// Plans that are not a pure function of the epoch: a resumed epoch's, and a
/// mixture's (which cost a pass over the draws, so the last one is kept).
#[derive(Default)]
pub(crate) struct KeptPlans {
    /// The epoch a resume continues, until an epoch is started afresh.
    pub resumed: Mutex<Option<Arc<Plan>>>,
    /// The last mixture plan made.
    pub last_mix: Mutex<Option<Arc<Plan>>>,
    /// Where each epoch of a `never` mixture starts, as far as known.
    pub mix_starts: Mutex<std::collections::HashMap<u64, MixPos>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded values are replaced whole, never left half-written.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Global draws in one `never` epoch of `steps` batches of `batch_size` on each of
/// `world` ranks; `None` past 2^64.
fn never_draws(steps: usize, batch_size: usize, world: usize) -> Option<u64> {
    let n = |v: usize| u64::try_from(v).ok();
    n(steps)?
        .checked_mul(n(batch_size)?)?
        .checked_mul(n(world.max(1))?)
}

/// Why a plan of `draws` mixture draws cannot be made, if it cannot. The plan holds
/// each draw's index (8 bytes) at least while it deals them to the ranks; more than
/// the memory the process may use would end the process on a failed allocation.
fn draws_refused(draws: u64) -> Option<String> {
    let index = std::mem::size_of::<usize>() as u64;
    let memory = crate::system::physical_memory().map_or(u64::MAX, |m| m as u64);
    match draws.checked_mul(index) {
        Some(bytes) if bytes <= memory => None,
        Some(bytes) => Some(format!(
            "{draws} draws, whose plan needs at least {bytes} bytes, more than the {memory} \
             this process may use"
        )),
        None => Some(format!(
            "{draws} draws, whose plan needs more than 2^64 bytes"
        )),
    }
}

/// Refuses a `never` mixture whose epoch of `steps` batches of `batch_size` on each
/// of `world` ranks cannot be counted in the 64-bit draw counter or planned in memory.
pub(crate) fn check_never_steps(
    mix: &Mixture,
    batch_size: usize,
    world: usize,
) -> Result<(), LoaderError> {
    let spec = mix.spec();
    let Some(steps) = spec.epoch_batches.filter(|_| spec.stop == Stop::Never) else {
        return Ok(());
    };
    let why = match never_draws(steps, batch_size, world) {
        None => "more than 2^64 draws".to_string(),
        Some(draws) => match draws_refused(draws) {
            None => return Ok(()),
            Some(why) => why,
        },
    };
    Err(crate::SettingError::new(
        crate::Setting::EpochBatches,
        format!(
            "{steps} batches of {batch_size} on each of {world} ranks make an epoch of {why} \
             (lower it)"
        ),
    )
    .into())
}

/// Refuses a state whose layout no loader has: a world or batch size out of the
/// ranges [`LoaderConfig::validate`](crate::LoaderConfig::validate) allows, or a rank
/// outside its world. Resuming at another layout makes an order per rank of the
/// state's first layout, so its world must be one a run could have had.
fn check_layout(state: &LoaderState) -> Result<(), String> {
    let range = |field: &str, value: usize, most: usize| {
        if (1..=most).contains(&value) {
            Ok(())
        } else {
            Err(format!(
                "the state's {field} is {value}, out of range (a loader has 1 to {most})"
            ))
        }
    };
    range("world_size", state.world_size, MAX_WORLD)?;
    range("batch_size", state.batch_size, MAX_BATCH_SIZE)?;
    if state.rank >= state.world_size {
        return Err(format!(
            "the state's rank is {}, out of range for its world_size of {}",
            state.rank, state.world_size
        ));
    }
    if let Some(e) = &state.elastic {
        range("elastic world_size", e.world_size, MAX_WORLD)?;
        range("elastic batch_size", e.batch_size, MAX_BATCH_SIZE)?;
    }
    Ok(())
}

/// Refuses a mixture state whose plan could not be made: a `never` epoch without its
/// end would draw forever, one whose end lies far beyond its start would outgrow
/// memory, and positions no run reaches (a counter past an exhausted epoch's draws, a
/// source past its last sample or in more epochs than draws were made) would take
/// the counters past their range.
fn check_mixture(mix: &Mixture, ms: &MixtureState) -> Result<(), String> {
    let never = mix.spec().stop == Stop::Never;
    // Each draw of an exhausted epoch takes a sample no draw took before.
    let most = ms
        .lens
        .iter()
        .fold(0u64, |n, &len| n.saturating_add(len as u64));
    for (name, pos) in [("base", &ms.base), ("at", &ms.at)] {
        if !never && pos.counter > most {
            return Err(format!(
                "the state's mixture {name} is at draw {}, past the {most} draws an epoch of \
                 these sources has",
                pos.counter
            ));
        }
        for (k, (p, len)) in pos.parts.iter().zip(&ms.lens).enumerate() {
            if p.next > *len {
                return Err(format!(
                    "the state's mixture {name} has source {k} at sample {}, past its {len}",
                    p.next
                ));
            }
            // Under never a source starts its next epoch after a draw of its last sample.
            if never && p.epoch > pos.counter {
                return Err(format!(
                    "the state's mixture {name} has source {k} in its epoch {}, more epochs \
                     than the {} draws made",
                    p.epoch, pos.counter
                ));
            }
        }
    }
    if ms.at.counter < ms.base.counter {
        return Err(format!(
            "the state's mixture is at draw {}, before the draw {} its plan starts at",
            ms.at.counter, ms.base.counter
        ));
    }
    match (never, ms.end) {
        (true, None) => Err(
            "the state's mixture has no \"end\" (the draw a stop=never epoch ends at), so \
             the length of its epoch is unknown: it cannot be resumed exactly"
                .into(),
        ),
        (true, Some(end)) => match draws_refused(end.saturating_sub(ms.base.counter)) {
            Some(why) => Err(format!(
                "the state's mixture \"end\" is {end}: its epoch from draw {} would be {why}",
                ms.base.counter
            )),
            None => Ok(()),
        },
        (false, Some(end)) => Err(format!(
            "the state's mixture has an \"end\" ({end}), which only a stop=never epoch has"
        )),
        (false, None) => Ok(()),
    }
}

impl Shared {
    /// The plan of `epoch` on this rank.
    pub fn plan(&self, epoch: u64) -> Arc<Plan> {
        if let Some(p) = lock(&self.kept_plans.resumed)
            .as_ref()
            .filter(|p| p.epoch == epoch)
        {
            return p.clone();
        }
        self.own_plan(epoch)
    }

    /// The plan of `epoch` as a straight run makes it (ignoring a resumed one).
    fn own_plan(&self, epoch: u64) -> Arc<Plan> {
        let Some(mix) = self.source.mixture() else {
            return Arc::new(Plan::with_shards(
                &self.sampler,
                self.source.len(),
                self.source.shards(),
                epoch,
                self.batch_size,
                self.drop_last,
            ));
        };
        if let Some(p) = lock(&self.kept_plans.last_mix)
            .as_ref()
            .filter(|p| p.epoch == epoch)
        {
            return p.clone();
        }
        let base = self.mix_start(mix, epoch);
        let end = self.mix_epoch_end(mix, &base);
        let p = Arc::new(self.mix_plan(mix, epoch, base, end));
        *lock(&self.kept_plans.last_mix) = Some(p.clone());
        p
    }

    /// True when a state in `epoch` says more than (epoch, batch): a mixture's, or
    /// a resumed epoch's.
    pub(crate) fn plan_in_state(&self, epoch: u64) -> bool {
        self.source.mixture().is_some()
            || lock(&self.kept_plans.resumed)
                .as_ref()
                .is_some_and(|p| p.epoch == epoch)
    }

    /// Drops a resumed plan: the next plan of its epoch is the epoch's own. True when
    /// there was one for `epoch`.
    pub(crate) fn forget_resumed(&self, epoch: u64) -> bool {
        lock(&self.kept_plans.resumed)
            .take()
            .is_some_and(|p| p.epoch == epoch)
    }

    /// Global draws in one `never` epoch on this layout: `steps` batches per rank.
    fn never_len(&self, mix: &Mixture) -> u64 {
        let steps = mix.spec().epoch_batches.unwrap_or(1);
        // Loader::new refused a count past 2^64 (check_never_steps).
        never_draws(steps, self.batch_size, self.sampler.world_size).unwrap_or(u64::MAX)
    }

    fn mix_epoch_end(&self, mix: &Mixture, base: &MixPos) -> Option<u64> {
        // The draws end at counter 2^64 - 1 in any case (Generator::next).
        (mix.spec().stop == Stop::Never).then(|| base.counter.saturating_add(self.never_len(mix)))
    }

    /// Where `epoch` of `mix` starts: afresh under the exhausted rules; under `never`
    /// where the epoch before it ended (found by drawing from the latest known start).
    fn mix_start(&self, mix: &Mixture, epoch: u64) -> MixPos {
        let n = mix.parts().len();
        if mix.spec().stop != Stop::Never {
            return MixPos::fresh(n, epoch);
        }
        let known = {
            let starts = lock(&self.kept_plans.mix_starts);
            starts
                .iter()
                .filter(|(&e, _)| e <= epoch)
                .max_by_key(|(&e, _)| e)
                .map(|(&e, p)| (e, p.clone()))
        };
        let (mut e, mut pos) = known.unwrap_or_else(|| (0, MixPos::fresh(n, 0)));
        let weights = &mix.spec().weights;
        let mut g = Generator::new(mix, &self.sampler, weights, 0);
        while e < epoch {
            for _ in 0..self.never_len(mix) {
                g.next(&mut pos);
            }
            e += 1;
            lock(&self.kept_plans.mix_starts).insert(e, pos.clone());
        }
        pos
    }

    /// Whether `own_plan(epoch)` of `mix` draws one epoch at most: every epoch
    /// starts afresh, or the `never` epoch's start is known.
    fn mix_start_known(&self, mix: &Mixture, epoch: u64) -> bool {
        mix.spec().stop != Stop::Never
            || epoch == 0
            || lock(&self.kept_plans.mix_starts).contains_key(&epoch)
            || lock(&self.kept_plans.last_mix)
                .as_ref()
                .is_some_and(|p| p.epoch == epoch)
    }

    /// This rank's plan of `mix` from `base`: until the stop rule ends the epoch, or
    /// (under `never`) until `end`, rounded up to whole samples per rank.
    fn mix_plan(&self, mix: &Mixture, epoch: u64, base: MixPos, end: Option<u64>) -> Plan {
        let world = self.sampler.world_size.max(1);
        let bw = self.batch_size * world;
        let weights = mix.spec().weights.clone();
        let key_epoch = if end.is_some() { 0 } else { epoch };
        let mut g = Generator::new(mix, &self.sampler, &weights, key_epoch);
        let limit = end.map(|e| {
            let draws = usize::try_from(e.saturating_sub(base.counter)).unwrap_or(usize::MAX);
            draws.div_ceil(world).saturating_mul(world)
        });
        let mut pos = base.clone();
        let mut order = Vec::new();
        // Where the mixture stands every bw draws (once every rank took one batch).
        let mut snaps = Vec::new();
        loop {
            if order.len().is_multiple_of(bw) && snaps.len() == order.len() / bw {
                snaps.push(pos.clone());
            }
            if limit.is_some_and(|l| order.len() >= l) {
                break;
            }
            match g.next(&mut pos) {
                Some(i) => order.push(i),
                None => break,
            }
        }
        // Under `never` the next epoch starts here; none follows epoch u64::MAX.
        if let (Some(_), Some(next)) = (end, epoch.checked_add(1)) {
            lock(&self.kept_plans.mix_starts).insert(next, pos.clone());
        }
        let drawn = order.len();
        let mine = deal(order, self.sampler.rank, world, self.sampler.shard_policy);
        Plan::from_indices(
            epoch,
            mine,
            self.batch_size,
            self.drop_last,
            PlanMeta::Mix {
                base,
                at: Arc::new(snaps),
                end,
                weights,
                drawn,
            },
        )
    }

    /// Where the mixture of `plan` stands once every rank took `batches` of it.
    fn mix_pos(&self, mix: &Mixture, plan: &Plan, batches: usize) -> Option<MixPos> {
        let PlanMeta::Mix {
            at,
            end,
            weights,
            drawn,
            ..
        } = &plan.meta
        else {
            return None;
        };
        let world = self.sampler.world_size.max(1);
        let bw = self.batch_size * world;
        let t = elastic::taken(
            *drawn,
            world,
            self.batch_size,
            batches,
            self.sampler.shard_policy,
        );
        let j = (t / bw).min(at.len().saturating_sub(1));
        let mut pos = at.get(j)?.clone();
        let key_epoch = if end.is_some() { 0 } else { plan.epoch };
        let mut g = Generator::new(mix, &self.sampler, weights, key_epoch);
        for _ in j * bw..t {
            g.next(&mut pos);
        }
        Some(pos)
    }

    /// The state after `next_batch` batches of `plan`.
    pub(crate) fn state_in(
        &self,
        plan: &Plan,
        next_batch: usize,
        base: LoaderState,
    ) -> LoaderState {
        let mut s = LoaderState {
            epoch: plan.epoch,
            next_batch,
            ..base
        };
        match (&plan.meta, self.source.mixture()) {
            (PlanMeta::Elastic(e), _) => s.elastic = Some(e.clone()),
            (
                PlanMeta::Mix {
                    base, end, weights, ..
                },
                Some(mix),
            ) => {
                s.mixture = Some(MixtureState {
                    stop: mix.spec().stop,
                    weights: weights.clone(),
                    lens: (0..mix.parts().len()).map(|k| mix.part_len(k)).collect(),
                    base: base.clone(),
                    at: self
                        .mix_pos(mix, plan, next_batch)
                        .unwrap_or_else(|| base.clone()),
                    end: *end,
                })
            }
            _ => {}
        }
        s
    }

    /// Makes `plan` the resumed plan of its epoch (`None`: that epoch follows its own
    /// plan again). True when this replaced or dropped another.
    pub(crate) fn set_resumed(&self, plan: Option<Arc<Plan>>) -> bool {
        let special = plan.is_some();
        let old = std::mem::replace(&mut *lock(&self.kept_plans.resumed), plan);
        special || old.is_some()
    }

    /// The plan and batch that `state` continues at, checked against this loader
    /// (`mine`: this loader's state at the start of the state's epoch), and whether
    /// the plan is not the epoch's own (a resumed plan).
    pub(crate) fn resume_plan(
        &self,
        state: &LoaderState,
        mine: &LoaderState,
    ) -> Result<(Arc<Plan>, usize, bool), LoaderError> {
        let refuse = |why: String| Err(LoaderError::Resume(why));
        if state.samples != mine.samples {
            return refuse(format!(
                "the state was saved for {} samples, this data has {}",
                state.samples, mine.samples
            ));
        }
        if state.fingerprint.is_some() && state.fingerprint != mine.fingerprint {
            return refuse(format!(
                "the state was saved for another data set: its fingerprint is {:016x}, this \
                 data set's {:016x} (the same number of samples, {}, but other names, labels \
                 or classes)",
                state.fingerprint.unwrap_or_default(),
                mine.fingerprint.unwrap_or_default(),
                state.samples
            ));
        }
        if state.seed != mine.seed {
            return refuse(format!(
                "the state was saved with seed {}, this loader has seed {}",
                state.seed, mine.seed
            ));
        }
        check_layout(state).map_err(LoaderError::Resume)?;
        let same_layout =
            state.world_size == mine.world_size && state.batch_size == mine.batch_size;
        let plan = match (self.source.mixture(), &state.mixture) {
            (Some(_), None) => {
                return refuse(
                    "the state was saved by a loader over one source, this loader \
                               mixes several"
                        .into(),
                )
            }
            (None, Some(_)) => {
                return refuse(
                    "the state was saved by a mixture, this loader reads one source".into(),
                )
            }
            (Some(mix), Some(ms)) => {
                let lens: Vec<usize> = (0..mix.parts().len()).map(|k| mix.part_len(k)).collect();
                if ms.lens != lens || ms.stop != mix.spec().stop {
                    return refuse(format!(
                        "the state was saved by another mixture (sources of {:?} samples, stop \
                         {}), this one has sources of {lens:?} samples, stop {}",
                        ms.lens,
                        ms.stop,
                        mix.spec().stop
                    ));
                }
                if ms.at.parts.len() != lens.len() || ms.base.parts.len() != lens.len() {
                    return refuse("the state's mixture position has another source count".into());
                }
                check_mixture(mix, ms).map_err(LoaderError::Resume)?;
                if same_layout && ms.weights == mix.spec().weights {
                    // The epoch's own plan, if its start is known: a `never` epoch
                    // otherwise starts where every epoch before it ended, and a state
                    // far ahead (up to epoch u64::MAX) would draw them all first.
                    let own = self
                        .mix_start_known(mix, state.epoch)
                        .then(|| self.own_plan(state.epoch));
                    match own.as_ref().map(|p| (p, &p.meta)) {
                        Some((own, PlanMeta::Mix { base, end, .. }))
                            if *base == ms.base && *end == ms.end =>
                        {
                            return self.checked(own.clone(), state.next_batch, false);
                        }
                        // The plan the state counts in, rebuilt: the same batches.
                        _ => (
                            self.mix_plan(mix, state.epoch, ms.base.clone(), ms.end),
                            state.next_batch,
                        ),
                    }
                } else {
                    // The rest from where the mixture stands, on this layout and with
                    // this loader's weights.
                    (self.mix_plan(mix, state.epoch, ms.at.clone(), ms.end), 0)
                }
            }
            (None, None) => {
                if same_layout && state.elastic.is_none() {
                    // The epoch's own plan, as always.
                    return self.checked(self.own_plan(state.epoch), state.next_batch, false);
                }
                // A strided order (no shard deal) taken over after a whole number of
                // this layout's steps: the epoch's own plan from that step, which
                // takes the same samples in the same steps.
                let strided = self.source.shards().is_none() || !self.sampler.shuffle;
                let seen = state.next_batch.saturating_mul(state.batch_size);
                let step = self.batch_size * self.sampler.world_size.max(1);
                if strided && state.elastic.is_none() && state.world_size > 0 {
                    let own = self.own_plan(state.epoch);
                    let per = self.sampler.shard_len(self.source.len());
                    let old = crate::sampler::Sampler {
                        rank: 0,
                        world_size: state.world_size,
                        ..self.sampler.clone()
                    }
                    .shard_len(self.source.len());
                    if seen < old {
                        let seen = seen * state.world_size;
                        if seen.is_multiple_of(step) && seen / step <= own.len() && per > 0 {
                            return self.checked(own, seen / step, false);
                        }
                    }
                }
                {
                    let mut origin = state.elastic.clone().unwrap_or(Elastic {
                        world_size: state.world_size,
                        batch_size: state.batch_size,
                        batches: state.next_batch,
                        offset: 0,
                    });
                    let rest = elastic::remainder(
                        &self.sampler,
                        self.source.len(),
                        self.source.shards(),
                        state.epoch,
                        self.drop_last,
                        &origin,
                    );
                    let step = if same_layout {
                        state.next_batch
                    } else {
                        if state.elastic.is_some() {
                            origin.offset += elastic::taken(
                                rest.len().saturating_sub(origin.offset),
                                state.world_size.max(1),
                                state.batch_size.max(1),
                                state.next_batch,
                                self.sampler.shard_policy,
                            );
                        }
                        0
                    };
                    let p = elastic::plan(
                        &self.sampler,
                        &rest,
                        state.epoch,
                        self.batch_size,
                        self.drop_last,
                        origin,
                    );
                    (p, step)
                }
            }
        };
        let (plan, step) = plan;
        self.checked(Arc::new(plan), step, true)
    }

    fn checked(
        &self,
        plan: Arc<Plan>,
        step: usize,
        special: bool,
    ) -> Result<(Arc<Plan>, usize, bool), LoaderError> {
        if step > plan.len() {
            return Err(LoaderError::Resume(format!(
                "batch {step} is past the end of an epoch of {} batches",
                plan.len()
            )));
        }
        Ok((plan, step, special))
    }
}
