//! Replays every saved input through its harness: the seed corpora
//! (`corpus/<harness>/`), the inputs fuzzing found to crash or hang
//! (`regressions/<harness>/`), and the seeds as the generator makes them today. This
//! is what CI runs of the fuzzing (a campaign is `scripts/fuzz.sh`).

use std::path::{Path, PathBuf};

use stoker_fuzz::alloc_cap::CappedAlloc;
use stoker_fuzz::{harness, seeds, Outcome, HARNESSES};

// An absurd allocation aborts the test binary with its size, as it crashes the fuzzer.
#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.file_name().is_none_or(|n| n != ".gitkeep"))
        .collect();
    files.sort();
    files
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Run every file of `folder/<harness>/` through its harness; the outcomes, by file.
fn replay(folder: &str) -> Vec<(String, &'static str, Outcome)> {
    let mut out = Vec::new();
    for h in &HARNESSES {
        for path in files(&root().join(folder).join(h.name)) {
            let data =
                std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            // A panic here names neither the file nor the harness: say them first.
            eprintln!("{}: {}", h.name, path.display());
            out.push((path.display().to_string(), h.name, (h.exercise)(&data)));
        }
    }
    out
}

#[test]
fn every_corpus_replays_and_reaches_an_accepted_input() {
    let outcomes = replay("corpus");
    // A harness whose accepted seeds are all too large to keep (a whole checkpoint)
    // has only rejected inputs in its stored corpus.
    let seeds = seeds::all().expect("making the seeds");
    for h in &HARNESSES {
        let mine: Vec<_> = outcomes.iter().filter(|(_, n, _)| *n == h.name).collect();
        assert!(!mine.is_empty(), "corpus/{} is empty or missing", h.name);
        if seeds
            .iter()
            .any(|s| s.harness == h.name && s.accepted && s.stored)
        {
            assert!(
                mine.iter().any(|(_, _, o)| o.is_accepted()),
                "no input of corpus/{} gets through its harness: {:?}",
                h.name,
                mine
            );
        }
    }
}

#[test]
fn every_regression_replays() {
    // Each file is an input that once crashed or hung a harness; passing means it no
    // longer does (whatever the outcome: most are now clean rejections).
    for (file, h, outcome) in replay("regressions") {
        println!("{h}: {file}: {outcome}");
    }
}

#[test]
fn freshly_made_seeds_get_the_outcome_they_are_made_for() {
    let seeds = seeds::all().expect("making the seeds");
    for h in &HARNESSES {
        assert!(
            seeds.iter().any(|s| s.harness == h.name && s.accepted),
            "no seed meant to pass the {} harness",
            h.name
        );
    }
    for s in seeds {
        let h = harness(s.harness).expect("seeds name known harnesses");
        let outcome = (h.exercise)(&s.bytes);
        if s.accepted {
            assert_eq!(outcome, Outcome::Accepted, "{}/{}", s.harness, s.name);
        } else {
            assert!(
                matches!(outcome, Outcome::Rejected(_)),
                "{}/{}: {outcome}",
                s.harness,
                s.name
            );
        }
    }
}

#[test]
fn stored_seeds_are_small() {
    for s in seeds::all().expect("making the seeds") {
        if s.stored {
            assert!(
                s.bytes.len() <= 8 << 10,
                "{}/{}: {} bytes",
                s.harness,
                s.name,
                s.bytes.len()
            );
        }
    }
}
