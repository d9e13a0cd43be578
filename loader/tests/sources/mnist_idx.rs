//! MNIST's IDX files.

use super::*;

/// IDX files with known content: image i has pixel k = (i * 7 + k) % 256.
fn write_idx(dir: &Path, prefix: &str, n: u32, rows: u32, cols: u32) -> (Vec<u8>, Vec<u8>) {
    let mut images = Vec::new();
    for v in [2051u32, n, rows, cols] {
        images.extend_from_slice(&v.to_be_bytes());
    }
    for i in 0..n {
        images.extend((0..rows * cols).map(|k| ((i * 7 + k) % 256) as u8));
    }
    let mut labels = Vec::new();
    for v in [2049u32, n] {
        labels.extend_from_slice(&v.to_be_bytes());
    }
    labels.extend((0..n).map(|i| ((i * 3) % 10) as u8));
    write(&dir.join(format!("{prefix}-images-idx3-ubyte")), &images);
    write(&dir.join(format!("{prefix}-labels-idx1-ubyte")), &labels);
    (images, labels)
}

fn check_known_mnist(m: &Mnist, n: u32) {
    assert_eq!(m.len(), n as usize);
    assert_eq!(m.classes().len(), 10);
    assert_eq!(m.classes()[3], "3");
    assert_eq!(m.format(), "mnist");
    let mut buf = Vec::new();
    for i in 0..n {
        let kind = m.read(i as usize, &mut buf).unwrap();
        assert_eq!(
            kind,
            RecordKind::Raw {
                width: 28,
                height: 28,
                channels: 1
            }
        );
        let want: Vec<u8> = (0..784).map(|k| ((i * 7 + k) % 256) as u8).collect();
        assert_eq!(buf, want, "image {i}");
        assert_eq!(m.label(i as usize), (i * 3) % 10);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn mnist_reads_plain_and_gzipped_files() {
    let dir = tmp();
    let plain = dir.path().join("plain");
    let (images, labels) = write_idx(&plain, "train", 6, 28, 28);
    write_idx(&plain, "t10k", 4, 28, 28);
    check_known_mnist(&Mnist::open_dir(&plain, true).unwrap(), 6);
    check_known_mnist(&Mnist::open_dir(&plain, false).unwrap(), 4);

    let gz = dir.path().join("gz");
    write(&gz.join("train-images-idx3-ubyte.gz"), &gzip(&images));
    write(&gz.join("train-labels-idx1-ubyte.gz"), &gzip(&labels));
    check_known_mnist(&Mnist::open_dir(&gz, true).unwrap(), 6);
    let e = Mnist::open_dir(&gz, false).unwrap_err();
    assert!(e.to_string().contains("t10k-images-idx3-ubyte"), "{e}");

    let dotted = dir.path().join("dotted");
    write(&dotted.join("train-images.idx3-ubyte"), &images);
    write(&dotted.join("train-labels.idx1-ubyte"), &labels);
    let m = source::open(&dotted, source::Split::Train).unwrap();
    assert_eq!(m.format(), "mnist");
    assert_eq!(m.len(), 6);
    // One file given directly: the partner is found beside it.
    let m = source::open(dotted.join("train-labels.idx1-ubyte"), source::Split::Train).unwrap();
    assert_eq!(m.len(), 6);
    let m = source::open(gz.join("train-images-idx3-ubyte.gz"), source::Split::Train).unwrap();
    assert_eq!(m.len(), 6);
}

#[test]
fn mnist_rejects_inconsistent_files() {
    let dir = tmp();
    let (images, labels) = write_idx(dir.path(), "train", 5, 28, 28);
    let ip = dir.path().join("train-images-idx3-ubyte");
    let lp = dir.path().join("train-labels-idx1-ubyte");
    let expect = |images: &[u8], labels: &[u8], what: &str| {
        fs::write(&ip, images).unwrap();
        fs::write(&lp, labels).unwrap();
        let e = Mnist::open(&ip, &lp).unwrap_err();
        assert!(e.to_string().contains(what), "{e} lacks {what}");
    };
    let mut b = images.clone();
    b[3] = 0x01;
    expect(&b, &labels, "bad magic 2049");
    expect(&images, &images, "bad magic 2051");
    expect(
        &images[..images.len() - 1],
        &labels,
        "need 3936 bytes, file has 3935",
    );
    expect(&images[..10], &labels, "truncated");
    let mut l = labels.clone();
    l[7] = 4;
    expect(&images, &l, "4 labels, but");
    let mut l = labels.clone();
    l[10] = 10;
    expect(&images, &l, "record 2 has label 10");
    expect(
        &images,
        &labels[..labels.len() - 1],
        "5 labels need 13 bytes",
    );
    expect(&images, &gzip(&labels)[..20], "bad gzip");
}
