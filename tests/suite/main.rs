//! The integration tests, one binary (issue 30): they were 22 test
//! crates, each compiling and linking against the whole library. Measured
//! on the 2-core machine (release, once each): recompiling the tests alone
//! 26.9 s -> 20.9 s wall (47.2 -> 34.4 s CPU); after a change to the
//! library 115.9 s -> 106.9 s; from a clean target directory (`cargo test
//! --release --no-run`, twice each) 195.8 s and 178.8 s -> 162.2 s and
//! 151.6 s. Each file is a module; `cargo test --release --test suite
//! what_if_pairs::` runs one file's tests.

mod common;

mod api;
mod at;
mod attribution_matrix;
mod broken;
mod cli;
mod cli_batch;
mod cli_outputs;
mod corpus;
mod cross_format;
mod ddp_buckets;
mod diff;
mod fleet;
mod fx_graphs;
mod html_chart;
mod inferred_workspace;
mod json_contract;
mod model_input;
mod module_graph;
mod plan_cli;
mod plan_corpus;
mod reports;
mod segments;
mod viewer;
mod weights_read;
mod what_if_pairs;
