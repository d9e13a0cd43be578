//! Build script: compile the libjpeg-turbo shim (csrc/turbo.c) and link the system's
//! libjpeg-turbo wherever the machine has it (>= 1.5, for `jpeg_crop_scanline`;
//! Debian: `libjpeg62-turbo-dev`), so the crop-window, DCT-scaled JPEG decode is the
//! default. Where it is missing the crate still builds, decoding JPEG with zune-jpeg,
//! and says so as a cargo warning.
//!
//! - `--features turbo` requires it: a missing library is a build error.
//! - `STOKER_NO_TURBO=1` builds without it (to test the zune-jpeg path on a machine
//!   that has the library).
//! - `STOKER_JPEG_DIR=PREFIX` uses the install under PREFIX (include/, lib/).
//!
//! When found, the crate is compiled with `--cfg stoker_turbo`.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/turbo.c");
    println!("cargo:rerun-if-env-changed=STOKER_NO_TURBO");
    println!("cargo:rerun-if-env-changed=STOKER_JPEG_DIR");
    println!("cargo::rustc-check-cfg=cfg(stoker_turbo)");
    let required = std::env::var_os("CARGO_FEATURE_TURBO").is_some();
    let refused = std::env::var("STOKER_NO_TURBO").is_ok_and(|v| !v.is_empty() && v != "0");
    if refused {
        if required {
            panic!("the `turbo` feature requires libjpeg-turbo, but STOKER_NO_TURBO is set");
        }
        println!("cargo:warning=STOKER_NO_TURBO is set: JPEGs decode with zune-jpeg");
        return;
    }
    match find() {
        Ok(lib) => {
            link(&lib);
            println!("cargo:rustc-cfg=stoker_turbo");
        }
        Err(why) if required => panic!(
            "the `turbo` feature requires libjpeg-turbo >= 1.5 ({why}); install it \
             (Debian: apt-get install libjpeg62-turbo-dev) or set STOKER_JPEG_DIR"
        ),
        Err(why) => println!(
            "cargo:warning=libjpeg-turbo not found ({why}): JPEGs decode with zune-jpeg, \
             without the crop-window and DCT-scaled fast path (Debian: apt-get install \
             libjpeg62-turbo-dev)"
        ),
    }
}

/// Where the headers and the library are.
struct Lib {
    includes: Vec<PathBuf>,
    link_paths: Vec<PathBuf>,
}

fn find() -> Result<Lib, String> {
    let lib = if let Some(dir) = std::env::var_os("STOKER_JPEG_DIR") {
        let dir = PathBuf::from(dir);
        Lib {
            includes: vec![dir.join("include")],
            link_paths: vec![dir.join("lib")],
        }
    } else {
        match pkg_config::Config::new()
            .cargo_metadata(false)
            .env_metadata(false)
            .probe("libjpeg")
        {
            Ok(found) => Lib {
                includes: found.include_paths,
                link_paths: found.link_paths,
            },
            // No pkg-config (or no .pc file): the compiler's default paths may still
            // hold it; the test compile below decides.
            Err(_) => Lib {
                includes: Vec::new(),
                link_paths: Vec::new(),
            },
        }
    };
    // The shim uses jpeg_crop_scanline and jpeg_skip_scanlines (libjpeg-turbo >= 1.5):
    // compiling it is the test that the headers have them.
    let mut build = shim(&lib);
    build.cargo_metadata(false).cargo_warnings(false);
    build
        .try_compile("stoker_turbo_probe")
        .map_err(|e| format!("the shim does not compile against the headers found: {e}"))?;
    if !library_present(&lib) {
        return Err("no libjpeg shared or static library in the link paths".into());
    }
    Ok(lib)
}

fn shim(lib: &Lib) -> cc::Build {
    let mut build = cc::Build::new();
    build.file("csrc/turbo.c").warnings(true).opt_level(2);
    for dir in &lib.includes {
        build.include(dir);
    }
    build
}

/// Whether a libjpeg to link exists: in the given paths, or in the usual system ones.
fn library_present(lib: &Lib) -> bool {
    let mut dirs = lib.link_paths.clone();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    for d in [
        "/usr/lib",
        "/usr/local/lib",
        "/lib",
        "/usr/lib64",
        "/opt/homebrew/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    if os == "linux" {
        dirs.push(PathBuf::from(format!("/usr/lib/{arch}-linux-gnu")));
        dirs.push(PathBuf::from(format!("/lib/{arch}-linux-gnu")));
    }
    dirs.iter().any(|d| {
        ["libjpeg.so", "libjpeg.a", "libjpeg.dylib", "jpeg.lib"]
            .iter()
            .any(|f| d.join(f).exists())
    })
}

fn link(lib: &Lib) {
    shim(lib).compile("stoker_turbo");
    for dir in &lib.link_paths {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    println!("cargo:rustc-link-lib=jpeg");
}
