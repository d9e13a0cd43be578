//! Image folders: class folders, extensions, hidden and non-image files.

use super::*;

#[test]
fn folder_orders_classes_and_files_by_name() {
    let dir = tmp();
    let expected = make_folder(dir.path());
    let src = ImageFolder::open(dir.path()).expect("open");
    assert_eq!(src.classes(), ["a_cat", "b_dog", "c_eel"]);
    assert_eq!(src.len(), expected.len());
    assert_eq!(src.format(), "folder");
    let mut buf = Vec::new();
    for (i, (rel, label)) in expected.iter().enumerate() {
        let path = dir.path().join(rel);
        assert_eq!(src.path(i), Some(path.as_path()), "sample {i}");
        assert_eq!(src.label(i), *label, "label of {rel}");
        assert_eq!(src.describe(i), path.display().to_string());
        assert_eq!(src.read(i, &mut buf).expect("read"), RecordKind::Encoded);
        assert_eq!(buf, fs::read(&path).expect("file"), "bytes of {rel}");
    }
}

#[test]
fn folder_errors_name_the_path_and_the_problem() {
    let dir = tmp();
    let missing = dir.path().join("nope");
    let e = ImageFolder::open(&missing).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    assert!(reason(&e).contains("no such directory"), "{e}");

    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let e = ImageFolder::open(&empty).unwrap_err();
    assert!(reason(&e).contains("empty folder"), "{e}");
    assert!(e.to_string().contains("empty"), "{e}");

    let flat = dir.path().join("flat");
    write(&flat.join("a.jpg"), &png(1));
    write(&flat.join("b.jpg"), &png(2));
    let e = ImageFolder::open(&flat).unwrap_err();
    assert!(reason(&e).contains("no class sub-folders"), "{e}");

    let holes = dir.path().join("holes");
    write(&holes.join("cat/a.jpg"), &png(1));
    write(&holes.join("dog/readme.txt"), b"x");
    fs::create_dir_all(holes.join("eel")).unwrap();
    let e = ImageFolder::open(&holes).unwrap_err();
    let r = reason(&e);
    assert!(
        r.contains("dog") && r.contains("eel") && !r.contains("cat"),
        "{e}"
    );
    assert!(r.contains("no images"), "{e}");

    let file = dir.path().join("file.jpg");
    write(&file, &png(1));
    let e = ImageFolder::open(&file).unwrap_err();
    assert!(reason(&e).contains("not a directory"), "{e}");
}

#[test]
fn reads_reuse_the_callers_buffer() {
    let dir = tmp();
    make_folder(&dir.path().join("f"));
    synthetic::write_mnist(&dir.path().join("m"), 5, 1).unwrap();
    synthetic::write_cifar(&dir.path().join("c"), 3, 1).unwrap();
    let folder = ImageFolder::open(&dir.path().join("f")).unwrap();
    packed::pack_source(&folder, &dir.path().join("p.pack"), |_, _| {}).unwrap();
    let sources: Vec<Box<dyn Source>> = vec![
        Box::new(folder),
        Box::new(Mnist::open_dir(&dir.path().join("m"), true).unwrap()),
        Box::new(Cifar10::open_dir(&dir.path().join("c"), true).unwrap()),
        Box::new(PackedReader::open(&dir.path().join("p.pack")).unwrap()),
    ];
    for src in &sources {
        let mut buf = Vec::with_capacity(1 << 16);
        let ptr = buf.as_ptr();
        for i in 0..src.len() {
            src.read(i, &mut buf).unwrap();
            assert!(!buf.is_empty());
            assert_eq!(buf.as_ptr(), ptr, "{} reallocated", src.format());
        }
        let e = src.read(src.len(), &mut buf).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }
}

#[test]
fn sources_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ImageFolder>();
    check::<PackedReader>();
    check::<Mnist>();
    check::<Cifar10>();
}
