//! Mixtures end to end: proportions, the same batches in every mode and worker count,
//! exact resume under each stop rule, weights changed at a resume, classes combined
//! by name, and the inputs that are refused before anything is read.

use crate::engine_support;

use std::sync::Arc;

use engine_support::{within_a_minute, RawSource};
use stoker_augment::Pipeline;
use stoker_loader::state::MixtureState;
use stoker_loader::{
    Digest, Loader, LoaderConfig, LoaderError, LoaderState, Mixture, MixtureSpec, Mode, Source,
    Stop,
};

fn raw(n: usize, offset: usize) -> Arc<dyn Source> {
    let mut s = RawSource::new(n, 4);
    s.label_offset = offset;
    Arc::new(s)
}

fn mixture(
    parts: &[Arc<dyn Source>],
    weights: &[f64],
    stop: Stop,
    steps: Option<usize>,
) -> Arc<dyn Source> {
    let spec = MixtureSpec {
        weights: weights.to_vec(),
        stop,
        epoch_batches: steps,
    };
    Arc::new(Mixture::new(parts.to_vec(), spec).expect("mixture"))
}

fn cfg(mode: Mode, workers: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: 8,
        mode,
        workers: stoker_loader::Workers::Fixed(workers),
        seed: 9,
        transform: Pipeline::parse("rrc:4,flip").unwrap(),
        ..LoaderConfig::default()
    }
}

/// Each batch's digest over `epochs` epochs.
fn digests(src: Arc<dyn Source>, c: LoaderConfig, epochs: u64) -> Vec<String> {
    let mut loader = Loader::new(src, c).expect("loader");
    let mut out = Vec::new();
    for e in 0..epochs {
        for b in loader.epoch(e) {
            let mut d = Digest::new();
            d.update(&b.expect("batch"));
            out.push(d.hex());
        }
    }
    out
}

#[test]
fn proportions_follow_the_weights_within_one_percent() {
    let (a, b) = (raw(6000, 0), raw(5000, 0));
    for (wa, wb) in [(0.7, 0.3), (0.5, 0.5), (0.9, 0.1)] {
        let src = mixture(&[a.clone(), b.clone()], &[wa, wb], Stop::Never, Some(1250));
        let mut loader = Loader::new(src, cfg(Mode::Sync, 1)).unwrap();
        let cursor = loader.start_epoch(0);
        let got = cursor.indices();
        assert_eq!(got.len(), 10_000);
        let from_a = got.iter().filter(|&&i| i < 6000).count() as f64 / 10_000.0;
        assert!(
            (from_a - wa).abs() < 0.01,
            "weights {wa}/{wb}: {from_a} from a"
        );
    }
}

#[test]
fn the_same_batches_in_every_mode_and_worker_count() {
    let src = mixture(
        &[raw(50, 0), raw(30, 1)],
        &[0.7, 0.3],
        Stop::AllExhausted,
        None,
    );
    let want = digests(src.clone(), cfg(Mode::Sync, 1), 2);
    assert_eq!(
        want.len(),
        2 * 10,
        "all_exhausted: every sample of both, 80 / 8"
    );
    for workers in [1, 2, 4] {
        assert_eq!(
            digests(src.clone(), cfg(Mode::Async, workers), 2),
            want,
            "{workers} workers"
        );
    }
    // Another seed draws another mixture.
    let other = LoaderConfig {
        seed: 10,
        ..cfg(Mode::Sync, 1)
    };
    assert_ne!(digests(src, other, 1), want[..10]);
}

#[test]
fn the_stop_rules_end_epochs_where_they_say() {
    let (a, b) = (raw(40, 0), raw(10, 0));
    let count = |stop, steps| {
        let mut l = Loader::new(
            mixture(&[a.clone(), b.clone()], &[0.5, 0.5], stop, steps),
            cfg(Mode::Sync, 1),
        )
        .unwrap();
        let c = l.start_epoch(0);
        let idx = c.indices().to_vec();
        let from_b = idx.iter().filter(|&&i| i >= 40).count();
        (idx, from_b)
    };
    // first_exhausted: b (10 samples, half the draws) runs out at about draw 20.
    let (idx, from_b) = count(Stop::FirstExhausted, None);
    assert_eq!(from_b, 10);
    assert!(idx.len() < 25, "{}", idx.len());
    assert!(
        idx.last().is_some_and(|&i| i >= 40),
        "the last sample empties b"
    );
    // all_exhausted: every sample once.
    let (mut idx, _) = count(Stop::AllExhausted, None);
    idx.sort_unstable();
    assert_eq!(idx, (0..50).collect::<Vec<_>>());
    // never: 10 steps of 8; b runs out and starts again with another order.
    let (idx, from_b) = count(Stop::Never, Some(10));
    assert_eq!(idx.len(), 80);
    assert!(from_b > 10);
    let bs: Vec<usize> = idx.iter().copied().filter(|&i| i >= 40).collect();
    let (first, second) = (&bs[..10], &bs[10..20]);
    let mut f = first.to_vec();
    f.sort_unstable();
    assert_eq!(f, (40..50).collect::<Vec<_>>(), "b's first epoch whole");
    assert_ne!(first, second, "b's second epoch is shuffled anew");
}

#[test]
fn classes_are_combined_by_name() {
    struct Named(Vec<String>, u32);
    impl Source for Named {
        fn len(&self) -> usize {
            4
        }
        fn classes(&self) -> &[String] {
            &self.0
        }
        fn label(&self, _: usize) -> u32 {
            self.1
        }
        fn describe(&self, i: usize) -> String {
            format!("named {i}")
        }
        fn read(
            &self,
            _: usize,
            buf: &mut Vec<u8>,
        ) -> Result<stoker_loader::RecordKind, stoker_loader::SourceError> {
            buf.clear();
            buf.extend_from_slice(&[0; 12]);
            Ok(stoker_loader::RecordKind::Raw {
                width: 2,
                height: 2,
                channels: 3,
            })
        }
        fn format(&self) -> &'static str {
            "named"
        }
    }
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // a: cat=0, dog=1; b: bird=0, cat=1 (its samples are cats).
    let a: Arc<dyn Source> = Arc::new(Named(names(&["cat", "dog"]), 1));
    let b: Arc<dyn Source> = Arc::new(Named(names(&["bird", "cat"]), 1));
    let m = mixture(&[a, b], &[1.0, 1.0], Stop::AllExhausted, None);
    assert_eq!(m.classes(), &names(&["cat", "dog", "bird"])[..]);
    assert_eq!(m.label(0), 1, "a's dog");
    assert_eq!(m.label(4), 0, "b's cat is a's cat");
}

/// The batches of a straight run from `from` on, against a resumed one.
fn resumes_exactly(src: Arc<dyn Source>, c: LoaderConfig, epoch: u64, at: usize) {
    let mut straight = Loader::new(src.clone(), c.clone()).unwrap();
    let mut want = Vec::new();
    let mut state = None;
    for e in 0..=epoch + 1 {
        let mut ep = straight.epoch(e);
        let mut k = 0;
        loop {
            if e == epoch && k == at {
                state = Some(ep.state());
            }
            let Some(b) = ep.next() else { break };
            let b = b.unwrap();
            if e > epoch || (e == epoch && k >= at) {
                let mut d = Digest::new();
                d.update(&b);
                want.push(d.hex());
            }
            k += 1;
        }
    }
    let json = state.expect("state").to_json();
    let state = LoaderState::from_json(&json).unwrap();
    let mut resumed = Loader::new(src, c).unwrap();
    let mut got = Vec::new();
    for b in resumed.resume(&state).unwrap() {
        let mut d = Digest::new();
        d.update(&b.unwrap());
        got.push(d.hex());
    }
    for b in resumed.epoch(epoch + 1) {
        let mut d = Digest::new();
        d.update(&b.unwrap());
        got.push(d.hex());
    }
    assert_eq!(got, want);
}

#[test]
fn mid_epoch_resume_is_exact_under_every_stop_rule() {
    let parts = [raw(50, 0), raw(30, 1)];
    for (stop, steps) in [
        (Stop::FirstExhausted, None),
        (Stop::AllExhausted, None),
        (Stop::Never, Some(7)),
    ] {
        for mode in [Mode::Sync, Mode::Async] {
            let src = mixture(&parts, &[0.6, 0.4], stop, steps);
            resumes_exactly(src.clone(), cfg(mode, 2), 1, 3);
            // Under never, epoch 2 starts where epoch 1 ended (parts mid-epoch).
            resumes_exactly(src, cfg(mode, 2), 2, 5);
        }
    }
}

#[test]
fn a_never_state_in_epoch_u64_max_resumes_to_its_end_in_every_mode() {
    let parts = [raw(50, 0), raw(30, 1)];
    let src = mixture(&parts, &[0.6, 0.4], Stop::Never, Some(4));
    let l = Loader::new(src.clone(), cfg(Mode::Sync, 1)).unwrap();
    // The state says where its epoch starts (`base`, `end`), so no epoch before it
    // need be drawn, and none follows it.
    let state = LoaderState {
        epoch: u64::MAX,
        ..l.state_at(0, 1)
    };
    let rest = |mode| {
        let (src, state) = (src.clone(), state.clone());
        within_a_minute(move || {
            let mut l = Loader::new(src, cfg(mode, 2)).unwrap();
            let out: Vec<String> = l
                .resume(&state)
                .unwrap()
                .map(|b| {
                    let mut d = Digest::new();
                    d.update(&b.unwrap());
                    d.hex()
                })
                .collect();
            out
        })
    };
    let sync = rest(Mode::Sync);
    assert_eq!(sync.len(), 3);
    assert_eq!(rest(Mode::Async), sync);
}

#[test]
fn never_steps_past_what_a_plan_can_count_or_hold_are_refused_naming_steps() {
    let parts = [raw(50, 0), raw(30, 1)];
    let refused = |steps: usize, batch_size: usize, world: usize| {
        let c = LoaderConfig {
            batch_size,
            world_size: world,
            ..cfg(Mode::Sync, 1)
        };
        let src = mixture(&parts, &[0.6, 0.4], Stop::Never, Some(steps));
        match Loader::new(src, c) {
            Err(LoaderError::Setting(e)) => {
                assert_eq!(e.setting, stoker_loader::Setting::EpochBatches);
                e.problem
            }
            Err(e) => panic!("{steps} steps: another error: {e}"),
            Ok(_) => panic!("{steps} steps of {batch_size} on {world} ranks were accepted"),
        }
    };
    // 2^62 x 4 and 2^61 x 2 x 4 ranks: 2^64 draws, past the 64-bit draw counter.
    let m = refused(1 << 62, 4, 1);
    assert!(
        m.starts_with("4611686018427387904 batches of 4 on each of 1 ranks")
            && m.contains("more than 2^64 draws"),
        "{m}"
    );
    let m = refused(1 << 61, 2, 4);
    assert!(
        m.contains("on each of 4 ranks") && m.contains("2^64 draws"),
        "{m}"
    );
    // 2^63 draws can be counted, but their indices alone are 2^66 bytes.
    let m = refused(1 << 61, 4, 1);
    assert!(
        m.contains("9223372036854775808 draws") && m.contains("more than 2^64 bytes"),
        "{m}"
    );
}

#[test]
fn the_draws_end_at_the_last_counter_value() {
    // A never epoch ending at counter 2^64 - 1, from 2^64 - 4: three draws, which two
    // ranks would round up to four (a fourth would take the counter past 2^64 - 1).
    let parts = [raw(50, 0), raw(30, 1)];
    let src = mixture(&parts, &[0.6, 0.4], Stop::Never, Some(4));
    let c = LoaderConfig {
        world_size: 2,
        ..cfg(Mode::Sync, 1)
    };
    let mut l = Loader::new(src, c).unwrap();
    let mut state = l.state_at(0, 0);
    let ms = state.mixture.as_mut().unwrap();
    ms.base.counter = u64::MAX - 3;
    ms.at.counter = u64::MAX - 3;
    ms.end = Some(u64::MAX);
    let sizes: Vec<usize> = l
        .resume(&state)
        .unwrap()
        .map(|b| b.unwrap().len())
        .collect();
    // Rank 0's share of the three: the first and the third (rank 1 takes the second
    // and, as padding, the first again).
    assert_eq!(sizes, [2]);
}

/// One change to a mixture state.
type Tamper = fn(&mut MixtureState);

#[test]
fn a_mixture_state_whose_plan_cannot_be_made_is_refused_naming_the_field() {
    let parts = [raw(50, 0), raw(30, 1)];
    let resume_error = |stop: Stop, steps, change: Tamper| {
        let src = mixture(&parts, &[0.6, 0.4], stop, steps);
        let mut l = Loader::new(src, cfg(Mode::Sync, 1)).unwrap();
        let mut state = l.state_at(0, 1);
        change(state.mixture.as_mut().unwrap());
        // Without the checks some of these drew forever: a bound on a hang.
        within_a_minute(move || match l.resume_cursor(&state) {
            Err(LoaderError::Resume(m)) => m,
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("accepted: {state:?}"),
        })
    };
    let never = Some(4);
    let cases: [(Stop, Option<usize>, Tamper, &str); 7] = [
        // An endless epoch (memory grew until the process died).
        (
            Stop::Never,
            never,
            |m| m.end = None,
            "the state's mixture has no \"end\"",
        ),
        // An epoch of 2^64 draws.
        (
            Stop::Never,
            never,
            |m| m.end = Some(u64::MAX),
            "the state's mixture \"end\" is 18446744073709551615: its epoch from draw 0 \
             would be 18446744073709551615 draws",
        ),
        (
            Stop::AllExhausted,
            None,
            |m| m.end = Some(5),
            "an \"end\" (5), which only a stop=never epoch has",
        ),
        // The draw counter overflowed at the next draw.
        (
            Stop::AllExhausted,
            None,
            |m| m.base.counter = u64::MAX,
            "the state's mixture base is at draw 18446744073709551615, past the 80 draws",
        ),
        (
            Stop::Never,
            never,
            |m| m.base.counter = 9,
            "the state's mixture is at draw 8, before the draw 9 its plan starts at",
        ),
        // A source's place overflowed when it was drawn.
        (
            Stop::Never,
            never,
            |m| m.at.parts[1].next = usize::MAX,
            "the state's mixture at has source 1 at sample 18446744073709551615, past its 30",
        ),
        (
            Stop::Never,
            never,
            |m| m.base.parts[0].epoch = u64::MAX,
            "the state's mixture base has source 0 in its epoch 18446744073709551615, more \
             epochs than the 0 draws made",
        ),
    ];
    for (stop, steps, change, says) in cases {
        let m = resume_error(stop, steps, change);
        assert!(m.contains(says), "{m}");
    }
}

#[test]
fn changed_weights_apply_from_the_resume_point() {
    let parts = [raw(50, 0), raw(30, 1)];
    let src = mixture(&parts, &[0.5, 0.5], Stop::AllExhausted, None);
    let mut l = Loader::new(src, cfg(Mode::Sync, 1)).unwrap();
    let mut ep = l.epoch(0);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.extend(ep.next().unwrap().unwrap().indices);
    }
    let state = ep.state();
    drop(ep);
    // Only the second source from here on; the first (weight 0) is not drawn again.
    let only_b = mixture(&parts, &[0.0, 1.0], Stop::AllExhausted, None);
    let mut l = Loader::new(only_b, cfg(Mode::Sync, 1)).unwrap();
    let rest: Vec<usize> = l
        .resume(&state)
        .unwrap()
        .flat_map(|b| b.unwrap().indices)
        .collect();
    let b_left = 30 - seen.iter().filter(|&&i| i >= 50).count();
    assert!(rest[..b_left].iter().all(|&i| i >= 50), "{rest:?}");
    // A zero weight is never drawn: a's rest is not delivered in this epoch.
    assert_eq!(rest.len(), b_left);
    let mut all = [seen, rest].concat();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 24 + b_left, "nothing twice");
}

#[test]
fn bad_input_is_refused_before_reading() {
    struct Unreadable;
    impl Source for Unreadable {
        fn len(&self) -> usize {
            3
        }
        fn classes(&self) -> &[String] {
            &[]
        }
        fn label(&self, _: usize) -> u32 {
            0
        }
        fn describe(&self, i: usize) -> String {
            format!("u {i}")
        }
        fn read(
            &self,
            _: usize,
            _: &mut Vec<u8>,
        ) -> Result<stoker_loader::RecordKind, stoker_loader::SourceError> {
            panic!("read before the weights were checked")
        }
        fn format(&self) -> &'static str {
            "unreadable"
        }
    }
    let u = || -> Arc<dyn Source> { Arc::new(Unreadable) };
    let bad = |weights: &[f64], n: usize| {
        let spec = MixtureSpec {
            weights: weights.to_vec(),
            stop: Stop::AllExhausted,
            epoch_batches: None,
        };
        Mixture::new((0..n).map(|_| u()).collect(), spec)
            .err()
            .expect("refused")
            .to_string()
    };
    assert!(bad(&[0.5, -0.5], 2).contains("weight 1"));
    assert!(bad(&[f64::NAN, 1.0], 2).contains("weight 0"));
    assert!(bad(&[0.0, 0.0], 2).contains("every weight is 0"));
    assert!(bad(&[1.0], 2).contains("1 weights for 2 sources"));

    // A state of another mixture: other seed, other sources.
    let parts = [raw(50, 0), raw(30, 1)];
    let src = mixture(&parts, &[0.5, 0.5], Stop::AllExhausted, None);
    let mut l = Loader::new(src.clone(), cfg(Mode::Sync, 1)).unwrap();
    let state = l.state_at(0, 2);
    let other_seed = LoaderConfig {
        seed: 1,
        ..cfg(Mode::Sync, 1)
    };
    let mut l2 = Loader::new(src, other_seed).unwrap();
    assert!(matches!(l2.resume_cursor(&state), Err(LoaderError::Resume(m)) if m.contains("seed")));
    let other = mixture(
        &[raw(50, 0), raw(30, 2)],
        &[0.5, 0.5],
        Stop::AllExhausted,
        None,
    );
    let mut l3 = Loader::new(other, cfg(Mode::Sync, 1)).unwrap();
    assert!(
        matches!(l3.resume_cursor(&state), Err(LoaderError::Resume(m)) if m.contains("another data set"))
    );
    let split = mixture(
        &[raw(40, 0), raw(40, 1)],
        &[0.5, 0.5],
        Stop::AllExhausted,
        None,
    );
    let mut l4 = Loader::new(split, cfg(Mode::Sync, 1)).unwrap();
    assert!(l4.resume_cursor(&state).is_err());
    // One source's state into a mixture, and the other way.
    let mut one = Loader::new(raw(80, 0), cfg(Mode::Sync, 1)).unwrap();
    assert!(matches!(
        one.resume_cursor(&state),
        Err(LoaderError::Resume(_))
    ));
    let _ = l.start_epoch(0);
}

#[test]
fn data_sets_of_other_image_sizes_are_refused_when_the_loader_is_made() {
    // 4x4 and 6x6 images with no transform: every sample of the second set would fail.
    let parts = [
        raw(10, 0),
        Arc::new(RawSource::new(10, 6)) as Arc<dyn Source>,
    ];
    let src = mixture(&parts, &[1.0, 1.0], Stop::AllExhausted, None);
    let plain = LoaderConfig {
        transform: Pipeline::parse("").unwrap(),
        ..cfg(Mode::Sync, 1)
    };
    let e = Loader::new(src.clone(), plain)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("data set 2 of the mixture")
            && e.contains("gives 6x6")
            && e.contains("first gives 4x4"),
        "{e}"
    );
    // A transform that ends in a fixed size makes them one.
    assert!(Loader::new(src, cfg(Mode::Sync, 1)).is_ok());
}
