//! Helpers shared by the integration tests: the unit tests' own
//! (`src/test_support.rs`), compiled in here too rather than written twice.

#[path = "../../src/test_support.rs"]
mod test_support;

#[allow(unused_imports)] // each test crate uses some of them
pub use test_support::{corpus_dir as corpus, read_maybe_gz};

/// Every file directly in `dir`, by name, with its bytes.
#[allow(dead_code)] // used by some test crates only
pub fn files_in(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect()
}
