//! Helpers shared by the integration tests: the unit tests' own
//! (`src/test_support.rs`), compiled in here too rather than written twice.

#[path = "../../src/test_support.rs"]
mod test_support;

#[allow(unused_imports)] // each test crate uses some of them
pub use test_support::{corpus_dir as corpus, read_maybe_gz};
