//! Helpers shared by the unit tests, and by the integration tests
//! (`tests/common` compiles this file in).

use std::path::{Path, PathBuf};

/// The real-trace corpus (`$MEMCUT_CORPUS`, else `../shared/corpus`).
/// Tests that call this are `#[ignore = "needs ../shared/corpus (or
/// MEMCUT_CORPUS)"]`: a plain `cargo test` lists them as ignored with that
/// reason, and CI runs them (`-- --include-ignored`) with `../shared` beside
/// the checkout, where a missing corpus fails loudly instead of passing.
pub fn corpus_dir() -> PathBuf {
    let dir = std::env::var_os("MEMCUT_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"));
    assert!(
        dir.is_dir(),
        "corpus not found at {}: put ../shared beside the checkout or set MEMCUT_CORPUS",
        dir.display()
    );
    dir
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
