//! `memcut summary merge A.jsonl B.jsonl …`: the summaries of a batch run
//! in shards ([`super::shard`]), joined into the summary a single run
//! gives, byte for byte, in any summary format.
//!
//! The `.jsonl` summary is the one that keeps every field of a [`Row`]
//! (CSV and Markdown drop the ranks' categories), so it is what shards
//! write and what the merge reads. The rows are concatenated and sorted
//! as the batch sorts them; a file found in two inputs means the shards
//! overlapped, and is refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{sort_rows, Row};

/// Why summaries could not be merged (one line each).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}: not a summary row ({source}); merge reads the .jsonl summaries of `memcut batch --summary FILE.jsonl`", path.display())]
    NotARow {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("`{file}` is in both {} and {}: were the shards run with the same paths and the same N?", first.display(), second.display())]
    Overlap {
        file: String,
        first: PathBuf,
        second: PathBuf,
    },
}

/// The rows of one `.jsonl` summary (`path` names it in errors).
pub fn parse_jsonl(path: &Path, text: &str) -> Result<Vec<Row>, MergeError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|source| MergeError::NotARow {
                path: path.to_owned(),
                line: i + 1,
                source,
            })
        })
        .collect()
}

/// The summaries' rows as one batch's, sorted; refuses a file that is in
/// two of them.
pub fn merge_rows(parts: Vec<(PathBuf, Vec<Row>)>) -> Result<Vec<Row>, MergeError> {
    let mut owner: BTreeMap<String, usize> = BTreeMap::new();
    for (k, (_, rows)) in parts.iter().enumerate() {
        for r in rows {
            let first = *owner.entry(r.file.clone()).or_insert(k);
            if first != k {
                return Err(MergeError::Overlap {
                    file: r.file.clone(),
                    first: parts[first].0.clone(),
                    second: parts[k].0.clone(),
                });
            }
        }
    }
    let mut rows: Vec<Row> = parts.into_iter().flat_map(|(_, rows)| rows).collect();
    sort_rows(&mut rows);
    Ok(rows)
}

/// Reads `.jsonl` summaries and merges them ([`merge_rows`]).
pub fn read_summaries(paths: &[PathBuf]) -> Result<Vec<Row>, MergeError> {
    let parts = paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).map_err(|source| MergeError::Read {
                path: path.clone(),
                source,
            })?;
            Ok((path.clone(), parse_jsonl(path, &text)?))
        })
        .collect::<Result<Vec<_>, MergeError>>()?;
    merge_rows(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{render_jsonl, Status};

    fn row(file: &str, device: &str, peak: Option<u64>, status: Status) -> Row {
        Row {
            file: file.into(),
            status,
            format: String::new(),
            device: device.into(),
            peak_bytes: peak,
            reserved_bytes: None,
            top_category: String::new(),
            verdict: String::new(),
            report: String::new(),
            error: String::new(),
            findings: String::new(),
            next_step_bytes: None,
            distributed: None,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn rows_are_joined_and_sorted_and_an_overlap_is_refused() {
        let a = vec![
            row("x", "cuda:1", Some(5), Status::Ok),
            row("s", "", None, Status::Skipped),
        ];
        let b = vec![
            row("y", "cpu", Some(9), Status::Ok),
            row("x2", "cuda:0", Some(5), Status::Ok),
        ];
        let text = render_jsonl(&a);
        let back = parse_jsonl(Path::new("a.jsonl"), &format!("{text}\n")).unwrap();
        assert_eq!(back, a);
        let merged = merge_rows(vec![
            ("a.jsonl".into(), back),
            ("b.jsonl".into(), b.clone()),
        ])
        .unwrap();
        let files: Vec<&str> = merged.iter().map(|r| r.file.as_str()).collect();
        assert_eq!(files, ["y", "x", "x2", "s"]);
        let e = merge_rows(vec![("a.jsonl".into(), b.clone()), ("b.jsonl".into(), b)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`y` is in both a.jsonl and b.jsonl: were the shards run with the same paths and the same N?"
        );
    }

    #[test]
    fn a_line_that_is_not_a_row_names_its_file_and_line() {
        let e = parse_jsonl(Path::new("s.csv"), "file,status\nx,ok\n").unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("s.csv:1: not a summary row ("), "{msg}");
        assert!(
            msg.ends_with(
                "merge reads the .jsonl summaries of `memcut batch --summary FILE.jsonl`"
            ),
            "{msg}"
        );
        assert!(parse_jsonl(Path::new("empty.jsonl"), "")
            .unwrap()
            .is_empty());
    }
}
