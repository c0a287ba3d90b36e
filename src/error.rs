//! The library's error type: one line each, naming what is wrong. The binary
//! prefixes the file name (`memcut: error: FILE: …`).

use thiserror::Error;

/// Why an input could not be analysed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    #[error("empty file")]
    Empty,
    /// A path that names a folder was given as a trace.
    #[error("is a directory, not a trace file")]
    IsDirectory,
    /// The gzip stream ends before its end marker.
    #[error("not a memory trace: truncated gzip stream")]
    TruncatedGzip,
    /// The gzip stream is damaged (the decoder's reason).
    #[error("not a memory trace: corrupt gzip stream: {0}")]
    CorruptGzip(String),
    /// The content is not a format memcut reads (why, in words).
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
    /// `--device` names a device the trace does not have.
    #[error("no device {device} in this trace (devices: {available})")]
    NoSuchDevice { device: String, available: String },
}

/// A result whose error is an [`enum@Error`].
pub type Result<T> = std::result::Result<T, Error>;
