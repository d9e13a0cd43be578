//! CIFAR-10's binary batches.

use super::*;

/// A CIFAR batch whose record i has label (i + shift) % 10 and planes R = 10 + p % 50,
/// G = 100 + p % 50, B = 200 + i for pixel p.
fn cifar_batch(n: usize, shift: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(((i + shift) % 10) as u8);
        out.extend((0..1024).map(|p| (10 + p % 50) as u8));
        out.extend((0..1024).map(|p| (100 + p % 50) as u8));
        out.extend((0..1024).map(|_| (200 + i) as u8));
    }
    out
}

#[test]
fn cifar_reads_hwc_from_planar_batches() {
    let dir = tmp();
    let d = dir.path().join(cifar::ARCHIVE_DIR);
    write(&d.join("data_batch_1.bin"), &cifar_batch(3, 0));
    write(&d.join("data_batch_2.bin"), &cifar_batch(2, 5));
    write(&d.join("test_batch.bin"), &cifar_batch(4, 1));
    let c = Cifar10::open_dir(dir.path(), true).unwrap();
    assert_eq!(c.len(), 5);
    assert_eq!(c.classes()[0], "airplane");
    assert_eq!(c.classes()[9], "truck");
    assert_eq!(
        (0..5).map(|i| c.label(i)).collect::<Vec<_>>(),
        [0, 1, 2, 5, 6]
    );
    assert!(
        c.describe(4).ends_with("data_batch_2.bin record 1"),
        "{}",
        c.describe(4)
    );
    let mut buf = Vec::new();
    let kind = c.read(4, &mut buf).unwrap();
    assert_eq!(
        kind,
        RecordKind::Raw {
            width: 32,
            height: 32,
            channels: 3
        }
    );
    assert_eq!(buf.len(), 3072);
    for p in [0usize, 1, 33, 1023] {
        assert_eq!(
            &buf[p * 3..p * 3 + 3],
            &[(10 + p % 50) as u8, (100 + p % 50) as u8, 201],
            "pixel {p}"
        );
    }
    let t = Cifar10::open_dir(dir.path(), false).unwrap();
    assert_eq!(t.len(), 4);
    assert_eq!(t.label(0), 1);

    write(
        &d.join("batches.meta.txt"),
        b"a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n\n",
    );
    let c = Cifar10::open_dir(dir.path(), true).unwrap();
    assert_eq!(c.classes()[9], "j");
    write(&d.join("batches.meta.txt"), b"a\nb\n");
    let e = Cifar10::open_dir(dir.path(), true).unwrap_err();
    assert!(e.to_string().contains("batches.meta.txt"), "{e}");
}

#[test]
fn cifar_rejects_bad_batches() {
    let dir = tmp();
    let p = dir.path().join("data_batch_1.bin");
    let mut b = cifar_batch(3, 0);
    b.pop();
    write(&p, &b);
    let e = Cifar10::open_dir(dir.path(), true).unwrap_err();
    assert!(
        reason(&e).contains("not a multiple of the 3073-byte record"),
        "{e}"
    );
    let mut b = cifar_batch(3, 0);
    b[2 * 3073] = 10;
    write(&p, &b);
    let e = Cifar10::open_dir(dir.path(), true).unwrap_err();
    assert!(e.to_string().contains("data_batch_1.bin"), "{e}");
    assert!(reason(&e).contains("record 2 has label 10"), "{e}");
    let e = Cifar10::open_dir(dir.path(), false).unwrap_err();
    assert!(reason(&e).contains("test_batch.bin"), "{e}");
}
