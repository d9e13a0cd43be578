//! Time JPEG decode and `rrc:224,flip` with and without the libjpeg-turbo window
//! decode, one thread, over the JPEGs of a folder (searched recursively):
//! `cargo run --release -p stoker-augment --example turbo_timing -- DIR [SPEC]` (a build
//! with libjpeg-turbo).

#[cfg(stoker_turbo)]
mod timing {
    use std::path::Path;
    use std::time::Instant;

    use stoker_augment::transform::crop::rrc_box;
    use stoker_augment::transform::resize::Rect;
    use stoker_augment::turbo::{scale_denom, Header, TurboDecoder};
    use stoker_augment::{decode, Image, Pipeline, SampleRng, Scratch, Transform};

    fn jpegs(dir: &Path, out: &mut Vec<Vec<u8>>) -> std::io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let p = e.path();
            if p.is_dir() {
                jpegs(&p, out)?;
            } else if p.extension().is_some_and(|x| x == "jpg" || x == "jpeg") {
                out.push(std::fs::read(&p)?);
            }
        }
        Ok(())
    }

    /// Mean microseconds per image of `f` over `files`, best of three passes.
    fn time(files: &[Vec<u8>], mut f: impl FnMut(usize, &[u8])) -> f64 {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                for (i, b) in files.iter().enumerate() {
                    f(i, b);
                }
                t.elapsed().as_secs_f64() * 1e6 / files.len() as f64
            })
            .fold(f64::INFINITY, f64::min)
    }

    pub fn main() -> Result<(), Box<dyn std::error::Error>> {
        let mut args = std::env::args().skip(1);
        let dir = args.next().ok_or("usage: turbo_timing DIR [SPEC]")?;
        let spec = args.next().unwrap_or_else(|| "rrc:224,flip".into());
        let mut files = Vec::new();
        jpegs(Path::new(&dir), &mut files)?;
        if files.is_empty() {
            return Err(format!("no JPEG files under {dir}").into());
        }
        let (w, h) = decode::probe(&files[0])?;
        println!("{} files (first {w}x{h}), spec {spec}", files.len());

        let mut img = Image::default();
        let zune = time(&files, |_, b| {
            decode::decode_into_zune(b, 3, &mut img).expect("zune")
        });
        let mut dec = TurboDecoder::new()?;
        let mut buf = Vec::new();
        for denom in [1, 2, 4, 8] {
            let t = time(&files, |_, b| {
                let Header::Ready(hdr) = dec.header(b).expect("header") else {
                    panic!("unsupported")
                };
                let r = Rect::full(hdr.width, hdr.height);
                hdr.decode_window(r, denom, &mut buf).expect("turbo");
            });
            println!(
                "full decode at 1/{denom}: libjpeg-turbo {t:7.0} us   (zune at 1/1: {zune:.0} us)"
            );
        }

        let pipe = Pipeline::parse(&spec)?;
        for (name, on) in [("zune full decode", false), ("turbo window", true)] {
            let mut scratch = Scratch::default();
            scratch.set_turbo(on);
            let mut out = Vec::new();
            let t = time(&files, |i, b| {
                let (w, h) = decode::probe(b).expect("probe");
                let (ow, oh) = pipe.output_size(w, h);
                out.resize(ow * oh * 3, 0);
                let mut rng = SampleRng::new(0, 0, i as u64);
                pipe.run_encoded(b, 3, &mut rng, &mut scratch, &mut out)
                    .expect("pipeline");
            });
            println!(
                "{spec} per image, {name:16}: {t:7.0} us  ({:.0} img/s)",
                1e6 / t
            );
        }
        // How far the two paths are apart, per image (same seeds), by decode scale.
        let (mut za, mut tb) = (Scratch::default(), Scratch::default());
        za.set_turbo(false);
        // Per scale 1, 2, 4, 8: images, sum of per-image mean diffs, worst mean, max.
        let mut stats = [(0usize, 0.0f64, 0.0f64, 0u8); 4];
        for (i, b) in files.iter().enumerate() {
            let (w, h) = decode::probe(b)?;
            let (ow, oh) = pipe.output_size(w, h);
            let (mut x, mut y) = (vec![0u8; ow * oh * 3], vec![0u8; ow * oh * 3]);
            pipe.run_encoded(b, 3, &mut SampleRng::new(0, 0, i as u64), &mut za, &mut x)?;
            pipe.run_encoded(b, 3, &mut SampleRng::new(0, 0, i as u64), &mut tb, &mut y)?;
            let denom = match pipe.transforms().first() {
                Some(&Transform::RandomResizedCrop {
                    width,
                    height,
                    scale,
                    ratio,
                }) => {
                    let r = rrc_box(&mut SampleRng::new(0, 0, i as u64), w, h, scale, ratio);
                    scale_denom(r, width, height)
                }
                _ => 1,
            };
            let d: Vec<u8> = x.iter().zip(&y).map(|(p, q)| p.abs_diff(*q)).collect();
            let mean = d.iter().map(|&v| v as f64).sum::<f64>() / d.len() as f64;
            let st = &mut stats[denom.trailing_zeros() as usize];
            st.0 += 1;
            st.1 += mean;
            st.2 = st.2.max(mean);
            st.3 = st.3.max(d.iter().copied().max().unwrap_or(0));
        }
        for (k, (n, sum, worst, max)) in stats.into_iter().enumerate() {
            if n > 0 {
                println!(
                    "turbo vs zune at scale 1/{}: {n} images, mean abs diff {:.3} \
                     (worst image {worst:.3}), max {max}",
                    1 << k,
                    sum / n as f64
                );
            }
        }
        Ok(())
    }
}

#[cfg(stoker_turbo)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    timing::main()
}

#[cfg(not(stoker_turbo))]
fn main() {
    eprintln!("this build has no libjpeg-turbo (see augment/build.rs): nothing to time");
    std::process::exit(1);
}
