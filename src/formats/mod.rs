//! Parsers: one module per input format, each producing a [`crate::model::Trace`].

pub mod chrome;
pub(crate) mod json_repair;
pub mod pickle;
pub mod snapshot;
pub mod timeline_export;
