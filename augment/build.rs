//! Build script: with the `turbo` feature, compile the libjpeg shim (csrc/turbo.c)
//! against the system's libjpeg-turbo headers and link the system library
//! (Debian: `libjpeg62-turbo-dev`). Without the feature it does nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "turbo")]
    turbo();
}

#[cfg(feature = "turbo")]
fn turbo() {
    println!("cargo:rerun-if-changed=csrc/turbo.c");
    // STOKER_JPEG_DIR: a libjpeg-turbo install prefix (include/, lib/) to use instead
    // of the system's.
    println!("cargo:rerun-if-env-changed=STOKER_JPEG_DIR");
    let mut build = cc::Build::new();
    build.file("csrc/turbo.c").warnings(true).opt_level(2);
    if let Some(dir) = std::env::var_os("STOKER_JPEG_DIR") {
        let dir = std::path::PathBuf::from(dir);
        build.include(dir.join("include"));
        println!(
            "cargo:rustc-link-search=native={}",
            dir.join("lib").display()
        );
    }
    build.compile("stoker_turbo");
    println!("cargo:rustc-link-lib=jpeg");
}
