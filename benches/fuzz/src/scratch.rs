//! A fresh temporary folder per input, for the parsers that read files.
//!
//! It lives under the system temporary folder (`TMPDIR`; `scripts/fuzz.sh` points it
//! at a folder in /dev/shm that it removes afterwards, so that folders left by
//! crashed or killed fuzz targets go with it).

use std::path::PathBuf;

use tempfile::TempDir;

use crate::Outcome;

pub(crate) struct Scratch {
    dir: TempDir,
}

impl Scratch {
    /// A new empty folder; an error is an [`Outcome::Skipped`], not the input's fault.
    pub(crate) fn new() -> Result<Self, Outcome> {
        tempfile::Builder::new()
            .prefix("stoker-fuzz-")
            .tempdir()
            .map(|dir| Scratch { dir })
            .map_err(|e| Outcome::Skipped(format!("cannot make a scratch folder: {e}")))
    }

    /// Write `bytes` to `name` in the folder and return its path.
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, Outcome> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes)
            .map(|()| path.clone())
            .map_err(|e| Outcome::Skipped(format!("cannot write {}: {e}", path.display())))
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}
