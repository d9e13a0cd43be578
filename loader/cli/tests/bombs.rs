//! A JPEG or PNG whose header claims 65,000 x 65,000 pixels (a few hundred bytes on
//! disk) is refused from its header, naming the file, and the process stays small.

use std::path::Path;
use std::process::Command;

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::PngEncoder;
use image::{ExtendedColorType, ImageEncoder};
use stoker_loader::synthetic::{self, ShapesOptions};

fn small_rgb() -> Vec<u8> {
    (0..16 * 16 * 3).map(|i| (i * 7 % 251) as u8).collect()
}

fn jpeg_bomb() -> Vec<u8> {
    let mut bytes = Vec::new();
    JpegEncoder::new_with_quality(&mut bytes, 90)
        .encode(&small_rgb(), 16, 16, ExtendedColorType::Rgb8)
        .unwrap();
    let sof = (0..bytes.len() - 1)
        .find(|&i| bytes[i] == 0xff && bytes[i + 1] == 0xc0)
        .expect("baseline frame header");
    bytes[sof + 5..sof + 7].copy_from_slice(&65000u16.to_be_bytes());
    bytes[sof + 7..sof + 9].copy_from_slice(&65000u16.to_be_bytes());
    bytes
}

fn png_bomb() -> Vec<u8> {
    let mut bytes = Vec::new();
    PngEncoder::new(&mut bytes)
        .write_image(&small_rgb(), 16, 16, ExtendedColorType::Rgb8)
        .unwrap();
    bytes[16..20].copy_from_slice(&65000u32.to_be_bytes());
    bytes[20..24].copy_from_slice(&65000u32.to_be_bytes());
    bytes
}

fn bench(data: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stoker-load"))
        .args([
            "bench",
            data.to_str().unwrap(),
            "--batch-size",
            "8",
            "--epochs",
            "2",
        ])
        .args(extra)
        .output()
        .expect("run stoker-load")
}

#[test]
fn bombs_are_refused_from_the_header() {
    for (name, bomb) in [("bomb.jpg", jpeg_bomb()), ("bomb.png", png_bomb())] {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("set");
        let opts = ShapesOptions {
            count: 40,
            size: 32,
            classes: 2,
            seed: 5,
        };
        synthetic::shapes(&data, &opts, |_, _| {}).unwrap();
        let class = std::fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap();
        std::fs::write(class.join(name), &bomb).unwrap();

        let out = bench(&data, &["--no-shuffle"]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(name), "the error names the file: {err}");
        assert!(err.contains("65000x65000"), "and the size: {err}");
        assert!(!err.contains("panicked"), "{err}");

        for mode in ["sync", "async"] {
            let out = bench(&data, &["--on-error", "skip", "--json", "--mode", mode]);
            assert!(out.status.success(), "{out:?}");
            let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(r["skipped"], 2, "the bomb, once per epoch: {r}");
            assert_eq!(r["samples"], 80);
            let rss = r["peak_rss_bytes"].as_u64().expect("peak RSS on Linux");
            assert!(rss < 100 << 20, "{name} {mode}: peak RSS {rss} bytes");
        }
    }
}
