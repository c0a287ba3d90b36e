//! Helpers shared by the unit tests, and by the integration tests
//! (`tests/common` compiles this file in).

use std::path::{Path, PathBuf};

/// The real-trace corpus (`$MEMCUT_CORPUS`, else `../shared/corpus`), or
/// `None` with a message saying the test is skipped.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("MEMCUT_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"));
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "corpus not found at {} (set MEMCUT_CORPUS); skipping",
            dir.display()
        );
        None
    }
}

/// A file's bytes, inflated if they are gzip.
#[allow(dead_code)] // not every integration test crate reads gzip
pub fn read_maybe_gz(path: &Path) -> Vec<u8> {
    use std::io::Read;
    let raw = std::fs::read(path).unwrap();
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        raw
    }
}
