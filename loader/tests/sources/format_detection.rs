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

/// The split's check lives where a data set is opened, once for every front end: a
/// name that cannot name a split, and a split by name of a set that has none, are
/// refused as the setting `split`, before anything is read whole or the wrong part.
#[test]
fn a_split_the_data_set_cannot_have_is_refused_as_the_split_setting() {
    use stoker_loader::spec::{DataSpec, LoaderSpec, SourceSpec, SpecError};
    use stoker_loader::Setting;

    let dir = tmp();
    let root = dir.path();
    make_folder(&root.join("folder"));
    synthetic::write_mnist(&root.join("mnist"), 7, 0).unwrap();
    let opened = |path: &Path, split: &str| {
        let options = source::OpenOptions {
            split: source::Split::named(split),
            ..source::OpenOptions::default()
        };
        source::open_with(path, &options)
    };
    let refused = |path: &Path, split: &str| match opened(path, split) {
        Ok(s) => panic!(
            "{} opened with split {split:?} as {}",
            path.display(),
            s.format()
        ),
        Err(SourceError::Setting(e)) => {
            assert_eq!(e.setting, Setting::Split, "{e}");
            e.to_string()
        }
        Err(e) => panic!("{split:?}: another error: {e}"),
    };
    // By name, MNIST's parts are train and test; any other name is refused.
    let m = opened(&root.join("mnist"), "test").unwrap();
    assert!(m.describe(0).contains("t10k-images"));
    let m = opened(&root.join("mnist"), "train").unwrap();
    assert!(m.describe(0).contains("train-images"));
    let e = refused(&root.join("mnist"), "validation");
    assert!(
        e.starts_with("split: 'validation' is a split by name, and an MNIST set has none"),
        "{e}"
    );
    // A folder reads whole for train and test, and refuses other names.
    assert_eq!(opened(&root.join("folder"), "test").unwrap().len(), 7);
    let e = refused(&root.join("folder"), "validation");
    assert!(
        e.contains("an image folder has none: give train or test"),
        "{e}"
    );
    // Not a name at all: refused before the path is looked at.
    for bad in ["", " ", "a/b"] {
        let e = refused(&root.join("missing"), bad);
        assert_eq!(
            e,
            format!("split: {bad:?} is not a split's name (give train, test, validation, ...)")
        );
    }
    // Through a spec (the command lines and Python), the error names the data set and
    // the setting.
    let spec = LoaderSpec {
        data: DataSpec {
            sources: vec![SourceSpec {
                path: root.join("folder"),
                options: source::OpenOptions {
                    split: source::Split::named("x/y"),
                    ..source::OpenOptions::default()
                },
            }],
            ..DataSpec::default()
        },
        ..LoaderSpec::default()
    };
    let e = match spec.build() {
        Ok(_) => panic!("built"),
        Err(e) => e,
    };
    assert!(matches!(e, SpecError::Open { .. }), "{e}");
    assert_eq!(e.setting(), Some(Setting::Split));
    assert!(
        e.to_string().starts_with(&format!(
            "opening {}: split: \"x/y\"",
            root.join("folder").display()
        )),
        "{e}"
    );
}
