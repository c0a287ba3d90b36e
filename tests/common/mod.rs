//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

/// The real-trace corpus (`$MEMCUT_CORPUS`, else `../shared/corpus`), or
/// `None` with a message saying the test is skipped.
pub fn corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("MEMCUT_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus"));
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: corpus not found at {} (set MEMCUT_CORPUS)",
            dir.display()
        );
        None
    }
}
