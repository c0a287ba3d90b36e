//! Where `memcut analyze` writes its reports, and how several share one
//! output (docs/outputs.md, "Output rules"):
//!
//! | inputs | text, md | json | `--jsonl` | html |
//! |---|---|---|---|---|
//! | one | the report | the report (an object) | one line | the page |
//! | several | the reports one after another | one JSON list of reports | one line each | refused |
//!
//! The output (stdout or `-o FILE`) is opened at the first report, so an
//! input that fails leaves no empty file behind; every write error names
//! the path it was writing.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;

use memcut::{OutputFormat, Report};

/// How reports are laid out in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Each report in this format, one after the other.
    Each(OutputFormat),
    /// One JSON list holding every report.
    JsonList,
    /// One compact JSON report per line.
    JsonLines,
}

/// A write that failed, and where it was going.
#[derive(Debug)]
pub struct WriteError {
    /// `None`: stdout.
    path: Option<PathBuf>,
    error: std::io::Error,
}

impl WriteError {
    /// A reader that went away (`memcut … | head`): not worth an error.
    pub fn is_broken_pipe(&self) -> bool {
        self.path.is_none() && self.error.kind() == std::io::ErrorKind::BrokenPipe
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "cannot write {}: {}", p.display(), self.error),
            None => write!(f, "cannot write to stdout: {}", self.error),
        }
    }
}

/// The output of `analyze`: stdout or a file, opened at the first write.
pub struct Sink {
    path: Option<PathBuf>,
    layout: Layout,
    out: Option<Box<dyn Write>>,
    written: usize,
}

impl Sink {
    pub fn new(path: Option<PathBuf>, layout: Layout) -> Sink {
        Sink {
            path,
            layout,
            out: None,
            written: 0,
        }
    }

    /// Writes one report.
    pub fn write(&mut self, report: &Report) -> Result<(), WriteError> {
        if self.layout == Layout::Each(OutputFormat::Json) {
            // Streamed: a big report's JSON is never held whole.
            self.written += 1;
            let path = self.path.clone();
            let out = self.out()?;
            // Each report reaches the output whole before the next one
            // starts (stdout is buffered here, not by lines).
            return memcut::write_json(report, &mut *out)
                .and_then(|()| out.flush())
                .map_err(|error| WriteError { path, error });
        }
        let text = match self.layout {
            Layout::Each(format) => {
                let text = memcut::render(report, format);
                // Text reports are for reading: a blank line between two.
                if self.written > 0 && format == OutputFormat::Text {
                    format!("\n{text}")
                } else {
                    text
                }
            }
            Layout::JsonList => {
                let json = memcut::render(report, OutputFormat::Json);
                let indented = indent(&json);
                let open = if self.written == 0 { "[\n" } else { ",\n" };
                format!("{open}{}", indented.trim_end())
            }
            Layout::JsonLines => {
                let mut line = serde_json::to_string(report).expect("a report always serialises");
                line.push('\n');
                line
            }
        };
        self.written += 1;
        self.put(&text)
    }

    /// Ends the output: closes the JSON list (an empty list when no input
    /// could be analysed) and flushes.
    pub fn finish(mut self) -> Result<(), WriteError> {
        if self.layout == Layout::JsonList {
            let close = if self.written == 0 { "[]\n" } else { "\n]\n" };
            self.put(close)?;
        }
        match self.out.as_mut() {
            Some(out) => out.flush().map_err(|error| WriteError {
                path: self.path.clone(),
                error,
            }),
            None => Ok(()),
        }
    }

    fn put(&mut self, text: &str) -> Result<(), WriteError> {
        let path = self.path.clone();
        let out = self.out()?;
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|error| WriteError { path, error })
    }

    /// The output, opened at the first write.
    fn out(&mut self) -> Result<&mut Box<dyn Write>, WriteError> {
        if self.out.is_none() {
            self.out = Some(match &self.path {
                Some(p) => Box::new(std::io::BufWriter::new(std::fs::File::create(p).map_err(
                    |error| WriteError {
                        path: self.path.clone(),
                        error,
                    },
                )?)),
                // Not `stdout`'s own line buffer: a streamed report of
                // millions of lines would be millions of writes.
                None => Box::new(std::io::BufWriter::with_capacity(
                    1 << 16,
                    std::io::stdout().lock(),
                )),
            });
        }
        Ok(self.out.as_mut().expect("opened above"))
    }
}

/// Two spaces before every line (a report inside the JSON list; JSON
/// strings hold no raw newline, so this changes no value).
fn indent(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 8);
    for line in json.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Writes `text` to stdout.
pub fn write_stdout(text: &str) -> Result<(), WriteError> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|error| WriteError { path: None, error })
}

/// What a file given to `memcut plan` is when it is a trace rather than a
/// component list (gzip, a pickle, a JSON object of a trace's shape).
pub fn trace_hint(bytes: &[u8]) -> Option<&'static str> {
    let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let start = text.iter().position(|b| !b.is_ascii_whitespace())?;
    let head = &text[start..text.len().min(start + (1 << 16))];
    let has = |key: &[u8]| head.windows(key.len()).any(|w| w == key);
    if bytes.starts_with(&[0x1f, 0x8b]) {
        Some("a gzip file (a compressed trace?)")
    } else if bytes.first() == Some(&0x80) {
        Some("a pickle (a memory snapshot?)")
    } else if head[0] == b'{'
        && (has(b"\"traceEvents\"") || has(b"\"device_traces\"") || has(b"\"segments\""))
    {
        Some("a memory trace")
    } else {
        None
    }
}
