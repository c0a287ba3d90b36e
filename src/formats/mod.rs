//! Parsers: one module per input format, each producing a [`crate::model::Trace`].

pub mod chrome;
pub mod pickle;
pub mod timeline_export;
