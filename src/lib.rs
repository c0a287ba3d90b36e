//! memcut: the post-mortem on GPU memory.
//!
//! Pipeline (DESIGN.md §1): bytes → [`input`] (sniff, gunzip) → `formats`
//! (parse into a [`model::Trace`]) → `timeline` (replay) → `classify` →
//! `analysis` (peak, contributors, OOMs) → `plan` → `report`.

pub mod error;
pub mod formats;
pub mod model;

pub use error::{Error, Result};
