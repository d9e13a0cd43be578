//! The seed corpora, made in code so that anyone can remake them: `cargo run -p
//! stoker-fuzz -- seeds` writes them to `benches/fuzz/corpus/<harness>/`. Each seed
//! is small and says whether its harness should accept it; the replay test checks
//! that it still does, so a format change that leaves the corpus stale shows up.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::{ExtendedColorType, ImageEncoder};
use jpeg_encoder::{ColorType, Encoder, SamplingFactor};
use stoker_augment::SampleRng;
use stoker_loader::source::cifar;
use stoker_loader::source::PackedWriter;
use stoker_loader::{LoaderState, RecordKind};
use stoker_trainer::checkpoint;
use stoker_trainer::{CpuBackend, Model, Optimizer};

use crate::join_prefixed;

/// One seed input.
pub struct Seed {
    pub harness: &'static str,
    /// File name in the corpus folder.
    pub name: String,
    pub bytes: Vec<u8>,
    /// Whether the harness should accept it (else it should reject it, cleanly).
    pub accepted: bool,
    /// Whether it belongs in the committed corpus. A whole checkpoint of the harness's
    /// model is about 270 KB, too large to keep; the replay test makes it afresh.
    pub stored: bool,
}

fn seed(harness: &'static str, name: &str, bytes: Vec<u8>, accepted: bool) -> Seed {
    Seed {
        harness,
        name: name.to_string(),
        bytes,
        accepted,
        stored: true,
    }
}

/// Every seed of every harness.
pub fn all() -> Result<Vec<Seed>> {
    let mut out = decode()?;
    out.extend(packed()?);
    out.extend(mnist()?);
    out.extend(cifar());
    out.extend(checkpoint()?);
    out.extend(spec());
    out.extend(state());
    Ok(out)
}

/// Write the stored seeds (with `everything`, all of them) to `root/<harness>/<name>`,
/// replacing files of the same name.
pub fn write_corpus(root: &Path, everything: bool) -> Result<usize> {
    let mut n = 0;
    for s in all()?.into_iter().filter(|s| s.stored || everything) {
        let dir = root.join(s.harness);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(&s.name);
        std::fs::write(&path, &s.bytes).with_context(|| format!("writing {}", path.display()))?;
        n += 1;
    }
    Ok(n)
}

/// Smooth gradients with a little noise: compresses like a small photograph.
fn pixels(width: usize, height: usize, channels: usize, seed: u64) -> Vec<u8> {
    let mut rng = SampleRng::from_seed(seed);
    let mut out = Vec::with_capacity(width * height * channels);
    for y in 0..height {
        for x in 0..width {
            for c in 0..channels {
                let base = (x * 255 / width.max(2) + y * 97 / height.max(2) + c * 60) % 256;
                out.push((base as u64 + rng.below(24)) as u8);
            }
        }
    }
    out
}

fn png(width: u32, height: u32, color: ExtendedColorType, channels: usize) -> Result<Vec<u8>> {
    let bytes_per_sample = if matches!(color, ExtendedColorType::Rgba16) {
        2
    } else {
        1
    };
    let data = pixels(
        width as usize,
        height as usize,
        channels * bytes_per_sample,
        1,
    );
    let mut out = Vec::new();
    PngEncoder::new(&mut out)
        .write_image(&data, width, height, color)
        .context("encoding a PNG seed")?;
    Ok(out)
}

fn jpeg_image(
    width: u32,
    height: u32,
    color: ExtendedColorType,
    channels: usize,
) -> Result<Vec<u8>> {
    let data = pixels(width as usize, height as usize, channels, 2);
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, 80)
        .write_image(&data, width, height, color)
        .context("encoding a JPEG seed")?;
    Ok(out)
}

/// A JPEG from jpeg-encoder, which can write what `image`'s encoder cannot:
/// progressive scans, restart markers, other subsampling, CMYK.
fn jpeg_with(
    width: u16,
    height: u16,
    color: ColorType,
    channels: usize,
    set: impl FnOnce(&mut Encoder<&mut Vec<u8>>),
) -> Result<Vec<u8>> {
    let data = pixels(width as usize, height as usize, channels, 3);
    let mut out = Vec::new();
    let mut enc = Encoder::new(&mut out, 75);
    set(&mut enc);
    enc.encode(&data, width, height, color)
        .context("encoding a JPEG seed")?;
    Ok(out)
}

fn decode() -> Result<Vec<Seed>> {
    let h = "decode";
    Ok(vec![
        seed(
            h,
            "rgb-16x12.png",
            png(16, 12, ExtendedColorType::Rgb8, 3)?,
            true,
        ),
        seed(
            h,
            "gray-9x7.png",
            png(9, 7, ExtendedColorType::L8, 1)?,
            true,
        ),
        seed(
            h,
            "rgba16-5x4.png",
            png(5, 4, ExtendedColorType::Rgba16, 4)?,
            true,
        ),
        seed(
            h,
            "gray-alpha-3x3.png",
            png(3, 3, ExtendedColorType::La8, 2)?,
            true,
        ),
        seed(
            h,
            "baseline-444-16x12.jpg",
            jpeg_image(16, 12, ExtendedColorType::Rgb8, 3)?,
            true,
        ),
        seed(
            h,
            "gray-8x8.jpg",
            jpeg_image(8, 8, ExtendedColorType::L8, 1)?,
            true,
        ),
        seed(
            h,
            "progressive-420-20x14.jpg",
            jpeg_with(20, 14, ColorType::Rgb, 3, |e| {
                e.set_progressive(true);
                e.set_sampling_factor(SamplingFactor::R_4_2_0);
            })?,
            true,
        ),
        seed(
            h,
            "restart-422-24x10.jpg",
            jpeg_with(24, 10, ColorType::Rgb, 3, |e| {
                e.set_sampling_factor(SamplingFactor::R_4_2_2);
                e.set_restart_interval(1);
            })?,
            true,
        ),
        // (jpeg-encoder 0.7.1 panics on optimized tables with restart markers.)
        seed(
            h,
            "optimized-huffman-440-16x16.jpg",
            jpeg_with(16, 16, ColorType::Rgb, 3, |e| {
                e.set_sampling_factor(SamplingFactor::R_4_4_0);
                e.set_optimized_huffman_tables(true);
            })?,
            true,
        ),
        seed(
            h,
            "cmyk-10x6.jpg",
            jpeg_with(10, 6, ColorType::Cmyk, 4, |_| {})?,
            true,
        ),
        seed(
            h,
            "not-an-image.gif",
            b"GIF89a\x01\x00\x01\x00".to_vec(),
            false,
        ),
    ])
}

/// A packed file made by the real writer.
fn pack(layout: RecordKind, classes: &[&str], records: &[(&[u8], u32)]) -> Result<Vec<u8>> {
    let dir = tempfile::tempdir().context("temporary folder for a packed seed")?;
    let path = dir.path().join("seed.pack");
    let classes: Vec<String> = classes.iter().map(|c| c.to_string()).collect();
    let mut w = PackedWriter::create(&path, layout, &classes)?;
    for (bytes, label) in records {
        w.append(bytes, *label)?;
    }
    w.finish()?;
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

/// A version 3 packed file (raw pixels with a shape per record) made by the real writer.
fn pack_shaped(records: &[(u32, u32, u8, &[u8], u32)]) -> Result<Vec<u8>> {
    let dir = tempfile::tempdir().context("temporary folder for a packed seed")?;
    let path = dir.path().join("seed.pack");
    let mut w = PackedWriter::create_shaped(&path, &["a".to_string(), "b".to_string()], None)?;
    for &(width, height, channels, pixels, label) in records {
        w.append_raw(width, height, channels, pixels, label)?;
    }
    w.finish()?;
    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
}

fn packed() -> Result<Vec<Seed>> {
    let h = "packed";
    let raw = RecordKind::Raw {
        width: 2,
        height: 2,
        channels: 1,
    };
    let png = png(3, 2, ExtendedColorType::Rgb8, 3)?;
    let mut damaged = pack(raw, &["zero", "one"], &[(&[1, 2, 3, 4], 1)])?;
    let last = damaged.len() - 1;
    damaged[last] ^= 0x55;
    Ok(vec![
        seed(
            h,
            "raw-2x2x1-3-records.pack",
            pack(
                raw,
                &["zero", "one"],
                &[(&[1, 2, 3, 4], 0), (&[5, 6, 7, 8], 1), (&[9; 4], 1)],
            )?,
            true,
        ),
        seed(
            h,
            "encoded-2-records.pack",
            pack(
                RecordKind::Encoded,
                &["cat", "dog", "\u{e9}l\u{e9}phant"],
                &[(&png, 2), (b"not an image, packed all the same", 0)],
            )?,
            true,
        ),
        seed(
            h,
            "shaped-2-records.pack",
            pack_shaped(&[(2, 1, 3, &[1, 2, 3, 4, 5, 6], 0), (1, 2, 1, &[7, 8], 1)])?,
            true,
        ),
        seed(
            h,
            "empty.pack",
            pack(RecordKind::Encoded, &["only"], &[])?,
            true,
        ),
        // The harness fixes the checksums of its second copy, which then opens.
        seed(h, "index-checksum-damaged.pack", damaged, true),
    ])
}

fn idx_images(count: u32, rows: u32, cols: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [2051, count, rows, cols] {
        out.extend_from_slice(&u32::to_be_bytes(v));
    }
    out.extend(pixels(cols as usize, (rows * count) as usize, 1, 4));
    out
}

fn idx_labels(labels: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [2049, labels.len() as u32] {
        out.extend_from_slice(&u32::to_be_bytes(v));
    }
    out.extend_from_slice(labels);
    out
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).context("gzip")?;
    enc.finish().context("gzip")
}

fn mnist() -> Result<Vec<Seed>> {
    let h = "mnist";
    Ok(vec![
        seed(
            h,
            "3-images-4x4.idx",
            join_prefixed(&idx_images(3, 4, 4), &idx_labels(&[0, 9, 5])),
            true,
        ),
        seed(
            h,
            "2-images-3x2-gzipped.idx",
            join_prefixed(&gzip(&idx_images(2, 3, 2))?, &gzip(&idx_labels(&[7, 1]))?),
            true,
        ),
        seed(
            h,
            "no-images.idx",
            join_prefixed(&idx_images(0, 28, 28), &idx_labels(&[])),
            true,
        ),
        seed(
            h,
            "label-out-of-range.idx",
            join_prefixed(&idx_images(1, 2, 2), &idx_labels(&[10])),
            false,
        ),
    ])
}

fn cifar_records(labels: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, &l) in labels.iter().enumerate() {
        out.push(l);
        out.extend(pixels(cifar::SIDE, cifar::SIDE, 3, 10 + i as u64));
    }
    out
}

fn cifar() -> Vec<Seed> {
    let h = "cifar";
    let names = cifar::CLASSES.join("\n") + "\n";
    vec![
        seed(
            h,
            "2-records.bin",
            join_prefixed(b"", &cifar_records(&[3, 9])),
            true,
        ),
        seed(
            h,
            "1-record-with-meta.bin",
            join_prefixed(names.as_bytes(), &cifar_records(&[0])),
            true,
        ),
        seed(
            h,
            "short-meta.bin",
            join_prefixed(b"cat\ndog\n", &cifar_records(&[1])),
            false,
        ),
    ]
}

/// A safetensors file written by hand, so that its header's keys come in a fixed
/// order (the safetensors crate writes metadata from a HashMap): the 8-byte header
/// length, the JSON header, then the f32 tensors' bytes, all zero.
fn forge(meta: &BTreeMap<String, String>, tensors: &[(&str, &[usize])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!(meta));
    let mut at = 0;
    for (name, shape) in tensors {
        let len = shape.iter().product::<usize>() * 4;
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [at, at + len]}),
        );
        at += len;
    }
    let mut json = serde_json::Value::Object(header).to_string().into_bytes();
    // safetensors pads the header to a multiple of 8 bytes with spaces.
    json.resize(json.len().div_ceil(8) * 8, b' ');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.resize(out.len() + at, 0);
    out
}

fn checkpoint() -> Result<Vec<Seed>> {
    let h = "checkpoint";
    let dir = tempfile::tempdir().context("temporary folder for a checkpoint seed")?;
    let path = dir.path().join("seed.safetensors");
    let b = CpuBackend::new();
    let model = Model::new(&b, crate::checkpoint::model_config())?;
    let [sgd, _] = crate::checkpoint::optimizer_kinds();
    let opt = Optimizer::new(&model, sgd)?;
    let extra = BTreeMap::from([(
        "loader".to_string(),
        r#"{"seed":1,"epoch":0,"next_batch":2}"#.to_string(),
    )]);
    checkpoint::save(&path, &model, &opt, &extra)?;
    let whole = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let meta = checkpoint::read_metadata(&path)?;
    let mut adamw = meta.clone();
    adamw.insert("stoker.optimizer".into(), "adamw".into());
    let mut convnet = meta.clone();
    convnet.insert("stoker.model.kind".into(), "convnet".into());
    Ok(vec![
        Seed {
            stored: false,
            ..seed(h, "whole-sgd.safetensors", whole, true)
        },
        seed(h, "metadata-only.safetensors", forge(&meta, &[]), false),
        seed(
            h,
            "adamw-metadata-only.safetensors",
            forge(&adamw, &[]),
            false,
        ),
        seed(
            h,
            "fc1-wrong-shape.safetensors",
            forge(&meta, &[("param.fc1.weight", &[2, 2])]),
            false,
        ),
        seed(
            h,
            "fc1-only.safetensors",
            forge(&meta, &[("param.fc1.weight", &[256, 1])]),
            false,
        ),
        seed(h, "other-model.safetensors", forge(&convnet, &[]), false),
    ])
}

fn spec() -> Vec<Seed> {
    let h = "spec";
    [
        ("rrc-flip", "rrc:224,flip", true),
        ("resize-center", "resize:256,center:224", true),
        ("crop-pad-flip", "crop:32:pad=4,flip", true),
        (
            "rrc-options-jitter",
            "rrc:224:scale=0.35-1:ratio=3/4-4/3,flip,jitter:0.4",
            true,
        ),
        (
            "gray-erase-cutout",
            "resize:64x48,gray:p=0.2,erase:p=0.5:scale=0.02-0.33:ratio=0.3-3.3,cutout:16",
            true,
        ),
        (
            "jitter-keys",
            "jitter:b=0.1:c=0.2:s=0.3:h=0.05,hflip:p=1,grayscale",
            true,
        ),
        ("none", "none", true),
        ("pad", "pad:4,center:30", true),
        ("bad-pad", "pad:0", false),
        ("bad-zero-size", "rrc:0", false),
        ("bad-commas", "flip:p=2,,", false),
    ]
    .into_iter()
    .map(|(name, text, ok)| seed(h, &format!("{name}.txt"), text.as_bytes().to_vec(), ok))
    .collect()
}

fn state() -> Vec<Seed> {
    let h = "state";
    let state = |seed, epoch, next_batch, batch_size, samples, rank, world| LoaderState {
        seed,
        epoch,
        next_batch,
        batch_size,
        samples,
        rank,
        world_size: world,
        fingerprint: None,
        ..LoaderState::default()
    };
    vec![
        seed(h, "mid-epoch.json", state(7, 2, 1, 3, 10, 0, 1).to_json().into_bytes(), true),
        seed(h, "rank-1-of-2.json", state(1, 0, 0, 4, 9, 1, 2).to_json().into_bytes(), true),
        seed(h, "at-end.json", state(3, 5, 3, 5, 12, 0, 1).to_json().into_bytes(), true),
        seed(h, "past-end.json", state(3, 5, 9, 5, 12, 0, 1).to_json().into_bytes(), false),
        seed(
            h,
            "pretty.json",
            b"{\n  \"seed\": 18446744073709551615, \"epoch\": 1, \"next_batch\": 0,\n  \"batch_size\": 1, \"samples\": 1, \"rank\": 0, \"world\": 1\n}\n"
                .to_vec(),
            true,
        ),
    ]
}
