//! `source::open`: which format a path holds.

use super::*;

fn open_fails(path: &Path) -> SourceError {
    match source::open(path, source::Split::Train) {
        Ok(s) => panic!("{} opened as {}", path.display(), s.format()),
        Err(e) => e,
    }
}

#[test]
fn open_detects_each_format() {
    let dir = tmp();
    let root = dir.path();
    make_folder(&root.join("folder"));
    synthetic::write_mnist(&root.join("mnist"), 7, 0).unwrap();
    synthetic::write_cifar(&root.join("cifar"), 2, 0).unwrap();

    let f = source::open(root.join("folder"), source::Split::Train).unwrap();
    assert_eq!((f.format(), f.len()), ("folder", 7));
    packed::pack_source(f.as_ref(), &root.join("f.pack"), |_, _| {}).unwrap();
    // The magic decides, not the name.
    fs::rename(root.join("f.pack"), root.join("f.data")).unwrap();
    assert_eq!(
        source::open(root.join("f.data"), source::Split::Train)
            .unwrap()
            .format(),
        "packed"
    );

    let m = source::open(root.join("mnist"), source::Split::Train).unwrap();
    assert_eq!((m.format(), m.len()), ("mnist", 7));
    assert!(m.describe(0).contains("train-images"));
    let m = source::open(root.join("mnist"), source::Split::Test).unwrap();
    assert!(m.describe(0).contains("t10k-images"));

    let c = source::open(root.join("cifar"), source::Split::Train).unwrap();
    assert_eq!((c.format(), c.len()), ("cifar10", 10));
    let c = source::open(root.join("cifar"), source::Split::Test).unwrap();
    assert_eq!(c.len(), 2);
    let c = source::open(root.join("cifar/data_batch_3.bin"), source::Split::Train).unwrap();
    assert_eq!((c.format(), c.len()), ("cifar10", 2));

    let e = open_fails(&root.join("missing"));
    assert!(
        e.to_string().contains("missing") && reason(&e).contains("no such file"),
        "{e}"
    );
    write(&root.join("empty.pack"), b"");
    assert_eq!(reason(&open_fails(&root.join("empty.pack"))), "empty file");
    write(&root.join("notes.txt"), b"hello there");
    let e = open_fails(&root.join("notes.txt"));
    assert!(reason(&e).starts_with("unknown file format"), "{e}");
    // A damaged pack is reported as damaged, not as unknown.
    let good = fs::read(root.join("f.data")).unwrap();
    write(&root.join("cut.pack"), &good[..good.len() - 1]);
    let e = open_fails(&root.join("cut.pack"));
    assert!(reason(&e).starts_with("truncated: index"), "{e}");
}
