//! Parsers: one module per input format, each producing a [`crate::model::Trace`].

pub mod pickle;
