//! `stoker-fuzz`: write the seed corpora, list the harnesses, or run files through a
//! harness and print how far each got (to look at a crash the fuzzer saved).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use stoker_fuzz::alloc_cap::CappedAlloc;
use stoker_fuzz::{harness, seeds, HARNESSES};

const USAGE: &str = "usage:
  stoker-fuzz seeds [DIR] [--all]    write the seed corpora (default: benches/fuzz/corpus);
                                     --all: also the seeds too large to keep
  stoker-fuzz list                   the harnesses
  stoker-fuzz run HARNESS FILE...    run files through a harness, print each outcome";

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("seeds") => {
            let everything = args.iter().any(|a| a == "--all");
            let root = match args[1..].iter().find(|a| *a != "--all") {
                Some(d) => PathBuf::from(d),
                None => Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"),
            };
            let n = seeds::write_corpus(&root, everything)?;
            println!("wrote {n} seeds under {}", root.display());
        }
        Some("list") => {
            for h in &HARNESSES {
                println!("{:<12} {}", h.name, h.about);
            }
        }
        Some("run") => {
            let Some(name) = args.get(1) else {
                bail!("run: no harness named\n{USAGE}");
            };
            let h = harness(name).with_context(|| {
                let names: Vec<&str> = HARNESSES.iter().map(|h| h.name).collect();
                format!(
                    "run: unknown harness '{name}' (known: {})",
                    names.join(", ")
                )
            })?;
            for file in &args[2..] {
                let data = std::fs::read(file).with_context(|| format!("run: reading {file}"))?;
                println!("{file}: {}", (h.exercise)(&data));
            }
        }
        _ => bail!("{USAGE}"),
    }
    Ok(())
}
