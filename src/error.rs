//! The library's error type: one line each, naming what is wrong. The binary
//! prefixes the file name (`memcut: error: FILE: …`).

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    #[error("empty file")]
    Empty,
    #[error("not a memory trace: {0}")]
    UnknownFormat(String),
    #[error("bad pickle at byte {offset}: {message}")]
    Pickle { offset: u64, message: String },
    #[error("bad JSON: {0}")]
    Json(String),
    #[error("not a PyTorch memory snapshot: {0}")]
    Schema(String),
    #[error("no memory events; record with torch.profiler.profile(profile_memory=True)")]
    NoMemoryEvents,
    #[error("input exceeds a limit: {0}")]
    Limit(String),
    #[error("{0}")]
    Usage(String),
}

pub type Result<T> = std::result::Result<T, Error>;
