//! Elastic resume: a state saved by W ranks continued by W' ranks (and again by W''),
//! for a plain source, a sharded one (the shard-dealt order of tar and Parquet) and
//! a mixture; every sample of the epoch is delivered once, the only repeats being the
//! padding of the last layout's final step.

use crate::engine_support;

use std::ops::Range;
use std::sync::Arc;

use engine_support::{within_a_minute, RawSource};
use proptest::prelude::*;
use stoker_loader::elastic::Elastic;
use stoker_loader::{
    Loader, LoaderConfig, LoaderError, LoaderState, Mixture, MixtureSpec, Mode, RecordKind, Source,
    SourceError, Stop,
};

/// A raw source stored in shards of the given sizes.
struct Sharded {
    raw: RawSource,
    shards: Vec<Range<usize>>,
}

impl Sharded {
    fn new(sizes: &[usize]) -> Sharded {
        let mut start = 0;
        let shards = sizes
            .iter()
            .map(|&n| {
                start += n;
                start - n..start
            })
            .collect();
        Sharded {
            raw: RawSource::new(start, 1),
            shards,
        }
    }
}

impl Source for Sharded {
    fn len(&self) -> usize {
        self.raw.len()
    }
    fn classes(&self) -> &[String] {
        self.raw.classes()
    }
    fn label(&self, i: usize) -> u32 {
        self.raw.label(i)
    }
    fn describe(&self, i: usize) -> String {
        self.raw.describe(i)
    }
    fn read(&self, i: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        self.raw.read(i, buf)
    }
    fn format(&self) -> &'static str {
        "sharded"
    }
    fn shards(&self) -> Option<&[Range<usize>]> {
        Some(&self.shards)
    }
}

fn cfg(rank: usize, world: usize, batch_size: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size,
        rank,
        world_size: world,
        mode: Mode::Sync,
        seed: 21,
        shuffle_buffer: 5,
        ..LoaderConfig::default()
    }
}

/// The epoch's samples delivered by a run through `layouts` of (world, batch, batches
/// taken; `None`: to the end), each continuing the state the one before saved at
/// rank 0; the last layout runs to the end.
fn delivered(
    src: &Arc<dyn Source>,
    epoch: u64,
    layouts: &[(usize, usize, Option<usize>)],
) -> Vec<Vec<usize>> {
    let mut all = Vec::new();
    let mut state: Option<LoaderState> = None;
    for &(world, batch, take) in layouts {
        let mut out = Vec::new();
        let mut next = None;
        for rank in 0..world {
            let mut l = Loader::new(src.clone(), cfg(rank, world, batch)).unwrap();
            let c = match &state {
                None => l.start_epoch(epoch),
                // Through JSON, as a checkpoint holds it.
                Some(s) => l
                    .resume_cursor(&LoaderState::from_json(&s.to_json()).unwrap())
                    .unwrap(),
            };
            let from = c.position();
            let to = take.map_or(c.len(), |t| (from + t).min(c.len()));
            for b in from..to {
                out.extend_from_slice(c.batch_indices(b));
            }
            if rank == 0 {
                // The state of the first rank after `to` batches (any rank's would do).
                next = Some(l.state_at(epoch, to));
            }
        }
        state = next;
        all.push(out);
    }
    all
}

/// The samples of the epoch: those its first layout deals to its ranks (a shard
/// deal leaves out what does not fit the common length; padding comes once).
fn epoch_samples(
    src: &Arc<dyn Source>,
    epoch: u64,
    (world, batch, _): (usize, usize, Option<usize>),
) -> Vec<usize> {
    let mut all: Vec<usize> = (0..world)
        .flat_map(|rank| {
            let mut l = Loader::new(src.clone(), cfg(rank, world, batch)).unwrap();
            l.start_epoch(epoch).indices().to_vec()
        })
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Every sample of `all` delivered, and after the first layout (whose own deal may
/// repeat samples, as in any epoch) nothing delivered again beyond `pad` repeats.
fn exactly_once(got: Vec<Vec<usize>>, all: &[usize], pad: usize) -> Result<(), String> {
    let mut seen = vec![0usize; all.iter().max().map_or(0, |m| m + 1)];
    let mut union: Vec<usize> = got.concat();
    union.sort_unstable();
    union.dedup();
    if union != all {
        return Err(format!(
            "{} of {} samples delivered",
            union.len(),
            all.len()
        ));
    }
    for &i in &got[0] {
        seen[i] = 1;
    }
    let mut repeats = 0;
    for &i in got[1..].iter().flatten() {
        repeats += seen[i];
        seen[i] = 1;
    }
    if repeats > pad {
        return Err(format!(
            "{repeats} repeats after the first layout, at most {pad} allowed"
        ));
    }
    Ok(())
}

/// `got` with the layouts that continue the first one unchanged (same ranks, same
/// batch: not an elastic resume, the epoch's own deal goes on) joined to it, since the
/// repeats of that deal (a rank whose shards hold fewer samples repeats its own) are
/// the epoch's, not the resume's.
fn first_layout_joined(
    mut got: Vec<Vec<usize>>,
    plan: &[(usize, usize, Option<usize>)],
) -> Vec<Vec<usize>> {
    let same = plan
        .iter()
        .take_while(|l| (l.0, l.1) == (plan[0].0, plan[0].1))
        .count();
    let first: Vec<usize> = got.drain(..same).flatten().collect();
    got.insert(0, first);
    got
}

fn plain(n: usize) -> Arc<dyn Source> {
    Arc::new(RawSource::new(n, 1))
}

fn mixed(a: usize, b: usize) -> Arc<dyn Source> {
    let spec = MixtureSpec {
        weights: vec![0.6, 0.4],
        stop: Stop::AllExhausted,
        epoch_batches: None,
    };
    let parts: Vec<Arc<dyn Source>> = vec![plain(a), Arc::new(Sharded::new(&[b / 2, b - b / 2]))];
    Arc::new(Mixture::new(parts, spec).unwrap())
}

#[test]
fn two_to_three_and_three_to_one_deliver_each_sample_once() {
    let sources: Vec<(&str, Arc<dyn Source>)> = vec![
        ("plain", plain(101)),
        ("sharded", Arc::new(Sharded::new(&[13, 20, 7, 30, 31]))),
        ("mixture", mixed(60, 41)),
    ];
    for (name, src) in &sources {
        for (layouts, pad) in [
            (vec![(2, 4, Some(5)), (3, 4, None)], 2),
            (vec![(3, 4, Some(3)), (1, 4, None)], 0),
            (vec![(2, 4, Some(3)), (3, 5, Some(2)), (1, 7, None)], 0),
        ] {
            let got = delivered(src, 1, &layouts);
            let all = epoch_samples(src, 1, layouts[0]);
            assert!(
                all.len() * 2 > src.len(),
                "{name}: most samples are in the epoch"
            );
            exactly_once(got, &all, pad).unwrap_or_else(|e| panic!("{name} {layouts:?}: {e}"));
        }
        // The test can fail: without the resume the first layout's samples come twice.
        let twice = vec![
            delivered(src, 1, &[(2, 4, Some(5))]).concat(),
            delivered(src, 1, &[(3, 4, None)]).concat(),
        ];
        assert!(exactly_once(twice, &epoch_samples(src, 1, (2, 4, None)), 2).is_err());
    }
}

#[test]
fn the_same_layout_resumes_at_the_same_batch() {
    let src: Arc<dyn Source> = Arc::new(Sharded::new(&[13, 20, 7, 30, 31]));
    let mut a = Loader::new(src.clone(), cfg(1, 2, 4)).unwrap();
    let whole = a.start_epoch(0).indices().to_vec();
    let state = a.state_at(0, 3);
    let mut b = Loader::new(src, cfg(1, 2, 4)).unwrap();
    let c = b.resume_cursor(&state).unwrap();
    assert_eq!(c.position(), 3);
    assert_eq!(c.indices(), &whole[..]);
    assert!(state.elastic.is_none());
}

#[test]
fn a_layout_resumed_unchanged_after_no_batches_repeats_only_its_own_deal() {
    // Shards of 6, 5 and 9 on two ranks: one rank's shards hold 5 of its 10 samples,
    // so its own deal repeats 5, and a resume at the same layout keeps that deal.
    let src: Arc<dyn Source> = Arc::new(Sharded::new(&[6, 5, 9]));
    let plan = [(2, 3, Some(0)), (2, 3, None)];
    let got = delivered(&src, 3, &plan);
    assert!(got[0].is_empty());
    let own: Vec<usize> = (0..2)
        .flat_map(|rank| {
            let mut l = Loader::new(src.clone(), cfg(rank, 2, 3)).unwrap();
            l.start_epoch(3).indices().to_vec()
        })
        .collect();
    assert_eq!(got[1], own, "the epoch's own deal, not an elastic one");
    let all = epoch_samples(&src, 3, plan[0]);
    exactly_once(first_layout_joined(got, &plan), &all, 1).unwrap();
}

/// The message of the resume error `state` gets from `loader`.
fn refused(loader: &mut Loader, state: &LoaderState) -> String {
    match loader.resume_cursor(state) {
        Err(LoaderError::Resume(m)) => m,
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted: {state:?}"),
    }
}

#[test]
fn a_state_of_a_layout_no_loader_has_is_refused_naming_the_field() {
    let mut l = Loader::new(plain(40), cfg(0, 1, 4)).unwrap();
    let good = l.state_at(0, 2);
    let taken_over = Elastic {
        world_size: 1 << 40,
        batch_size: 4,
        batches: 1,
        offset: 0,
    };
    for (state, says) in [
        // Resuming it elsewhere made an order per rank: 2^40 of them aborted the
        // process on allocation.
        (
            LoaderState {
                world_size: 1 << 40,
                ..good.clone()
            },
            "the state's world_size is 1099511627776, out of range (a loader has 1 to 1048576)",
        ),
        (
            LoaderState {
                world_size: 0,
                ..good.clone()
            },
            "the state's world_size is 0, out of range",
        ),
        // Loaded silently before.
        (
            LoaderState {
                rank: 5,
                ..good.clone()
            },
            "the state's rank is 5, out of range for its world_size of 1",
        ),
        (
            LoaderState {
                batch_size: 0,
                ..good.clone()
            },
            "the state's batch_size is 0, out of range (a loader has 1 to 1048576)",
        ),
        (
            LoaderState {
                batch_size: 1 << 21,
                ..good.clone()
            },
            "the state's batch_size is 2097152, out of range",
        ),
        (
            LoaderState {
                world_size: 2,
                elastic: Some(taken_over),
                ..good.clone()
            },
            "the state's elastic world_size is 1099511627776, out of range",
        ),
    ] {
        let m = refused(&mut l, &state);
        assert!(m.contains(says), "{m}");
    }
    assert!(l.resume_cursor(&good).is_ok());
}

#[test]
fn a_state_from_the_largest_world_is_taken_over_in_one_pass() {
    // Taking an epoch over makes the order of every rank of the state's first
    // layout: for 2^20 ranks one at a time, 2^40 steps (a hang).
    let most = stoker_loader::config::MAX_WORLD;
    let sharded: Arc<dyn Source> = Arc::new(Sharded::new(&[13, 20, 7]));
    for src in [plain(40), sharded] {
        let saved = Loader::new(src.clone(), cfg(0, most, 4))
            .unwrap()
            .state_at(0, 0);
        // A plain source's strided order is continued without a remainder unless
        // the epoch was taken over already: from 2^20 ranks by 2, say.
        let state = match src.shards() {
            Some(_) => saved,
            None => LoaderState {
                world_size: 2,
                elastic: Some(Elastic {
                    world_size: most,
                    batch_size: 4,
                    batches: 0,
                    offset: 0,
                }),
                ..saved
            },
        };
        let mut got = within_a_minute(move || {
            let mut l = Loader::new(src, cfg(0, 1, 4)).unwrap();
            l.resume_cursor(&state).unwrap().indices().to_vec()
        });
        got.sort_unstable();
        assert_eq!(got, (0..40).collect::<Vec<_>>(), "each sample once");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn any_layouts_deliver_each_sample_once(
        kind in 0u8..3,
        n in 20usize..120,
        layouts in proptest::collection::vec((1usize..6, 1usize..9, 0usize..6), 1..4),
        last in (1usize..6, 1usize..9),
    ) {
        let src: Arc<dyn Source> = match kind {
            0 => plain(n),
            1 => Arc::new(Sharded::new(&[n / 3, n / 4, n - n / 3 - n / 4])),
            _ => mixed(n / 2, n - n / 2),
        };
        let mut plan: Vec<(usize, usize, Option<usize>)> =
            layouts.iter().map(|&(w, b, t)| (w, b, Some(t))).collect();
        plan.push((last.0, last.1, None));
        let pad = plan.iter().map(|l| l.0 - 1).max().unwrap_or(0);
        let got = first_layout_joined(delivered(&src, 3, &plan), &plan);
        let all = epoch_samples(&src, 3, plan[0]);
        let r = exactly_once(got, &all, pad);
        prop_assert!(r.is_ok(), "{:?}: {:?}", plan, r);
    }
}
