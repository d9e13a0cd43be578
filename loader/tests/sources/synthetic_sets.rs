//! The synthetic data generators.

use super::*;

fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for class in fs::read_dir(dir).unwrap() {
        let class = class.unwrap().path();
        for f in fs::read_dir(&class).unwrap() {
            let f = f.unwrap().path();
            let rel = f.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            out.push((rel, fs::read(&f).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn shapes_are_deterministic_decodable_and_balanced() {
    let dir = tmp();
    let opts = ShapesOptions {
        count: 23,
        size: 32,
        classes: 4,
        seed: 9,
    };
    let a = dir.path().join("a");
    let mut last = (0, 0);
    let stats = synthetic::shapes(&a, &opts, |d, t| last = (d, t)).unwrap();
    assert_eq!(last, (23, 23));
    assert_eq!((stats.images, stats.classes), (23, 4));
    let b = dir.path().join("b");
    synthetic::shapes(&b, &opts, |_, _| {}).unwrap();
    let (ta, tb) = (tree(&a), tree(&b));
    assert_eq!(ta.len(), 23);
    assert_eq!(ta, tb, "same seed, same bytes");
    assert_eq!(
        stats.bytes,
        ta.iter().map(|(_, b)| b.len() as u64).sum::<u64>()
    );

    let c = dir.path().join("c");
    synthetic::shapes(
        &c,
        &ShapesOptions {
            seed: 10,
            ..opts.clone()
        },
        |_, _| {},
    )
    .unwrap();
    let tc = tree(&c);
    assert!(ta.iter().zip(&tc).all(|(x, y)| x.0 == y.0 && x.1 != y.1));

    let src = ImageFolder::open(&a).unwrap();
    assert_eq!(
        src.classes(),
        ["00_circle", "01_square", "02_triangle", "03_plus"]
    );
    let mut per_class = [0; 4];
    for (i, (bytes, _, _)) in all_records(&src).into_iter().enumerate() {
        let img =
            image::load_from_memory(&bytes).unwrap_or_else(|e| panic!("{}: {e}", src.describe(i)));
        assert_eq!((img.width(), img.height()), (32, 32));
        let rgb = img.to_rgb8();
        let distinct: std::collections::HashSet<_> = rgb.pixels().collect();
        assert!(distinct.len() > 50, "background is textured");
        per_class[src.label(i) as usize] += 1;
    }
    assert_eq!(per_class, [6, 6, 6, 5]);
    // Nothing but the finished sets is left.
    let mut names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
}

#[test]
fn shapes_refuses_bad_options_and_occupied_folders() {
    let dir = tmp();
    let opts = |classes, count| ShapesOptions {
        count,
        size: 16,
        classes,
        seed: 0,
    };
    let d = dir.path().join("s");
    assert!(synthetic::shapes(&d, &opts(11, 5), |_, _| {}).is_err());
    assert!(synthetic::shapes(&d, &opts(0, 5), |_, _| {}).is_err());
    assert!(synthetic::shapes(&d, &opts(3, 0), |_, _| {}).is_err());
    assert!(!d.exists());
    // An existing empty folder is filled; a non-empty one is left alone.
    fs::create_dir(&d).unwrap();
    synthetic::shapes(&d, &opts(2, 4), |_, _| {}).unwrap();
    assert_eq!(tree(&d).len(), 4);
    let e = synthetic::shapes(&d, &opts(2, 4), |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
    assert_eq!(tree(&d).len(), 4);
}

/// Several processes (ranks on machines sharing a folder) may make the same set at once:
/// each builds in its own temporary folder, one publishes, and the folder only ever
/// holds a whole set.
#[test]
fn racing_makers_leave_one_whole_set() {
    let dir = tmp();
    let d = dir.path().join("race");
    let opts = ShapesOptions {
        count: 300,
        size: 16,
        classes: 4,
        seed: 3,
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let makers: Vec<_> = (0..6)
            .map(|_| s.spawn(|| synthetic::shapes(&d, &opts, |_, _| {})))
            .collect();
        makers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().any(|r| r.is_ok()), "{results:?}");
    assert_eq!(tree(&d).len(), 300);
    let reference = dir.path().join("alone");
    synthetic::shapes(&reference, &opts, |_, _| {}).unwrap();
    assert_eq!(tree(&d), tree(&reference));
    // No temporary folder is left behind by the makers that lost.
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn generated_mnist_and_cifar_are_valid_and_deterministic() {
    let dir = tmp();
    for (name, seed) in [("m1", 4), ("m2", 4)] {
        synthetic::write_mnist(&dir.path().join(name), 13, seed).unwrap();
    }
    let m1 = Mnist::open_dir(&dir.path().join("m1"), true).unwrap();
    let m2 = Mnist::open_dir(&dir.path().join("m2"), true).unwrap();
    assert_eq!(all_records(&m1), all_records(&m2));
    assert_eq!(
        (0..13).map(|i| m1.label(i)).collect::<Vec<_>>()[..12],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    );
    let t = Mnist::open_dir(&dir.path().join("m1"), false).unwrap();
    assert_ne!(all_records(&t), all_records(&m1), "splits differ");

    synthetic::write_cifar(&dir.path().join("c"), 11, 4).unwrap();
    let c = Cifar10::open_dir(&dir.path().join("c"), true).unwrap();
    assert_eq!(c.len(), 55);
    assert_eq!(c.label(12), 1);
    let t = Cifar10::open_dir(&dir.path().join("c"), false).unwrap();
    assert_eq!(t.len(), 11);
    // No temporary names are left behind.
    assert!(fs::read_dir(dir.path().join("c")).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".tmp")));
}
