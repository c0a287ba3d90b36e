//! The ranks of one job, side by side: when a batch holds several ranks of
//! a distributed job, the summary compares their peaks.
//!
//! A row's rank comes from the trace (Kineto's `distributedInfo`: rank and
//! world size) or, as a fallback, from a rank number in the file name
//! (`rank3`, `rank-3`, `rank_3`; the world size is then unknown). A *job* is
//! the files of one folder with one world size, compared per device kind
//! (`cuda`, `cpu`, …): Kineto's `tensorboard_trace_handler` writes each
//! run's ranks into one folder. A rank with several files (several steps)
//! counts with its highest peak.
//!
//! Everything here is computed from the summary rows alone (each ranked row
//! carries its categories at the peak), so a summary merged from shards
//! shows the same table as a single run.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Row;
use crate::model::Category;
use crate::schema::{DeviceReport, Report};
use crate::units::human_bytes;

/// A rank whose peak is further than this share from the median is an outlier.
pub const OUTLIER_SHARE: f64 = 0.10;

/// Jobs with more ranks than this list only their outliers and extremes.
const LIST_ALL_UP_TO: usize = 32;

/// Where a row's rank number comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankSource {
    /// Kineto's `distributedInfo` in the trace.
    DistributedInfo,
    /// A rank number in the file name (`rank3`, `rank-3`, `rank_3`).
    FileName,
}

/// The rank a summary row belongs to, and what it held at its peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RankOf {
    pub rank: u32,
    /// `None` when the rank comes from the file name.
    pub world_size: Option<u32>,
    pub from: RankSource,
    /// Allocated bytes by category at the device's peak (no
    /// `allocator_cache`, no zeros): what the rank table compares.
    pub peak_by_category: BTreeMap<Category, u64>,
}

/// The rank of an analysed device's row, if the trace or its file name says.
pub(super) fn rank_of(file: &str, report: &Report, device: &DeviceReport) -> Option<RankOf> {
    let (rank, world_size, from) = match report.source.distributed {
        Some(d) => (d.rank, Some(d.world_size), RankSource::DistributedInfo),
        None => (rank_in_name(file)?, None, RankSource::FileName),
    };
    let peak_by_category = device
        .peak
        .by_category
        .iter()
        .filter(|(c, b)| **c != Category::AllocatorCache && **b > 0)
        .map(|(c, b)| (*c, *b))
        .collect();
    Some(RankOf {
        rank,
        world_size,
        from,
        peak_by_category,
    })
}

/// The rank number in a file's name: the last `rank` (not preceded by a
/// letter; any case) followed by an optional `-` or `_` and digits.
pub fn rank_in_name(path: &str) -> Option<u32> {
    let name = Path::new(path).file_name()?.to_str()?.to_ascii_lowercase();
    let b = name.as_bytes();
    let mut found = None;
    let mut from = 0;
    while let Some(i) = name[from..].find("rank").map(|i| i + from) {
        from = i + 4;
        if i > 0 && b[i - 1].is_ascii_alphabetic() {
            continue;
        }
        let mut j = i + 4;
        if j < b.len() && (b[j] == b'-' || b[j] == b'_') {
            j += 1;
        }
        let digits: String = name[j..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if let Ok(r) = digits.parse::<u32>() {
            found = Some(r);
        }
    }
    found
}

/// One rank of a [`Job`]: its highest peak and the file it is from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RankPeak {
    pub rank: u32,
    pub peak_bytes: u64,
    pub file: String,
    /// How many files of this rank the job holds (steps, …).
    pub files: usize,
    pub peak_by_category: BTreeMap<Category, u64>,
}

/// A rank whose peak is more than [`OUTLIER_SHARE`] from the median.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Outlier {
    pub rank: u32,
    /// Peak − median, in bytes.
    pub delta_bytes: i128,
    /// The category whose bytes at the peak differ most from the median
    /// rank's in the same direction, and by how much.
    pub category: Option<(Category, i128)>,
}

/// The ranks of one job on one kind of device.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Job {
    /// The folder of the job's files (`.` for none).
    pub folder: String,
    pub world_size: Option<u32>,
    /// `cuda`, `cpu`, … (the device name before `:`).
    pub device_kind: String,
    pub from: RankSource,
    /// By rank.
    pub ranks: Vec<RankPeak>,
    pub median_bytes: u64,
    /// Per category, the median over the ranks of its bytes at their peaks.
    pub median_by_category: BTreeMap<Category, u64>,
    /// Highest peak / median peak; `None` when the median is 0.
    pub imbalance: Option<f64>,
    /// By rank.
    pub outliers: Vec<Outlier>,
}

impl Job {
    /// The rank with the highest peak (the lowest rank on ties).
    pub fn max(&self) -> &RankPeak {
        let mut best = &self.ranks[0];
        for r in &self.ranks[1..] {
            if r.peak_bytes > best.peak_bytes {
                best = r;
            }
        }
        best
    }

    /// Ranks below the world size that have no analysed file here.
    pub fn missing_ranks(&self) -> Vec<u32> {
        let Some(n) = self.world_size else {
            return Vec::new();
        };
        let have: Vec<u32> = self.ranks.iter().map(|r| r.rank).collect();
        (0..n).filter(|r| have.binary_search(r).is_err()).collect()
    }
}

/// The jobs of several ranks among `rows` (a job needs two ranks or more),
/// ordered by folder, world size and device kind.
pub fn jobs(rows: &[Row]) -> Vec<Job> {
    type Key = (String, Option<u32>, String, RankSource);
    let mut groups: BTreeMap<Key, BTreeMap<u32, RankPeak>> = BTreeMap::new();
    for row in rows {
        let (Some(r), Some(peak)) = (&row.distributed, row.peak_bytes) else {
            continue;
        };
        let folder = Path::new(&row.file)
            .parent()
            .map(|p| p.display().to_string())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| ".".into());
        let kind = row.device.split(':').next().unwrap_or("").to_owned();
        let ranks = groups
            .entry((folder, r.world_size, kind, r.from))
            .or_default();
        let candidate = RankPeak {
            rank: r.rank,
            peak_bytes: peak,
            file: row.file.clone(),
            files: 1,
            peak_by_category: r.peak_by_category.clone(),
        };
        match ranks.get_mut(&r.rank) {
            None => {
                ranks.insert(r.rank, candidate);
            }
            Some(seen) => {
                let files = seen.files + 1;
                // The highest peak; on ties the first file by name.
                if (candidate.peak_bytes, std::cmp::Reverse(&candidate.file))
                    > (seen.peak_bytes, std::cmp::Reverse(&seen.file))
                {
                    *seen = candidate;
                }
                seen.files = files;
            }
        }
    }
    groups
        .into_iter()
        .filter(|(_, ranks)| ranks.len() >= 2)
        .map(|((folder, world_size, device_kind, from), ranks)| {
            job(
                folder,
                world_size,
                device_kind,
                from,
                ranks.into_values().collect(),
            )
        })
        .collect()
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    let n = values.len();
    if n == 0 {
        0
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        ((values[n / 2 - 1] as u128 + values[n / 2] as u128) / 2) as u64
    }
}

fn job(
    folder: String,
    world_size: Option<u32>,
    device_kind: String,
    from: RankSource,
    ranks: Vec<RankPeak>,
) -> Job {
    let median_bytes = median(ranks.iter().map(|r| r.peak_bytes).collect());
    let mut categories: Vec<Category> = ranks
        .iter()
        .flat_map(|r| r.peak_by_category.keys().copied())
        .collect();
    categories.sort();
    categories.dedup();
    let median_by_category: BTreeMap<Category, u64> = categories
        .iter()
        .map(|c| {
            let bytes = ranks
                .iter()
                .map(|r| r.peak_by_category.get(c).copied().unwrap_or(0))
                .collect();
            (*c, median(bytes))
        })
        .collect();
    let outliers = ranks
        .iter()
        .filter_map(|r| {
            let delta = r.peak_bytes as i128 - median_bytes as i128;
            if (delta.unsigned_abs() as f64) <= OUTLIER_SHARE * median_bytes as f64 {
                return None;
            }
            // The category that moves furthest in the peak's direction.
            let category = categories
                .iter()
                .map(|c| {
                    let mine = r.peak_by_category.get(c).copied().unwrap_or(0) as i128;
                    (*c, mine - median_by_category[c] as i128)
                })
                .filter(|(_, d)| d.signum() == delta.signum())
                .max_by(|a, b| a.1.abs().cmp(&b.1.abs()).then(b.0.cmp(&a.0)));
            Some(Outlier {
                rank: r.rank,
                delta_bytes: delta,
                category,
            })
        })
        .collect();
    let max = ranks.iter().map(|r| r.peak_bytes).max().unwrap_or(0);
    Job {
        folder,
        world_size,
        device_kind,
        from,
        imbalance: (median_bytes > 0).then(|| max as f64 / median_bytes as f64),
        median_bytes,
        median_by_category,
        outliers,
        ranks,
    }
}

/// `+1.0 MiB`, `-680.6 KiB`.
fn signed_bytes(delta: i128) -> String {
    let sign = if delta < 0 { "-" } else { "+" };
    format!(
        "{sign}{}",
        human_bytes(delta.unsigned_abs().min(u64::MAX as u128) as u64)
    )
}

/// `+72.4%` of the median (`n/a` when the median is 0).
fn signed_share(delta: i128, median: u64) -> String {
    if median == 0 {
        return "n/a".into();
    }
    let pct = delta as f64 * 100.0 / median as f64;
    if pct.abs() < 0.05 {
        "0.0%".into() // never `-0.0%`
    } else {
        format!("{pct:+.1}%")
    }
}

/// `0, 2–5, 7`.
fn ranges(ranks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if j > i + 1 {
            format!("{}–{}", ranks[i], ranks[j])
        } else if j == i + 1 {
            format!("{}, {}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    out.join(", ")
}

/// The rank tables of the Markdown summary; empty when the rows hold no
/// job of several ranks.
pub fn render_markdown(rows: &[Row]) -> String {
    let jobs = jobs(rows);
    if jobs.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n## Ranks\n");
    let code = |s: &str| s.replace('`', "'").replace('|', "\\|");
    for job in &jobs {
        let max = job.max();
        let of = match job.world_size {
            Some(n) => format!("{} of {n} ranks (distributedInfo)", job.ranks.len()),
            None => format!(
                "{} ranks (numbers from the file names; world size unknown)",
                job.ranks.len()
            ),
        };
        let _ = writeln!(
            out,
            "\n### `{}` · {} · {of}\n",
            code(&job.folder),
            job.device_kind
        );
        let imbalance = job
            .imbalance
            .map_or("unknown (median 0)".into(), |x| format!("{x:.2}×"));
        let _ = writeln!(
            out,
            "Peak per rank: median {}, max {} (rank {}); max/median {imbalance}.",
            human_bytes(job.median_bytes),
            human_bytes(max.peak_bytes),
            max.rank,
        );
        let outlier_ranks: Vec<u32> = job.outliers.iter().map(|o| o.rank).collect();
        let pct = OUTLIER_SHARE * 100.0;
        if outlier_ranks.is_empty() {
            let _ = writeln!(
                out,
                "No outlier: every peak is within {pct:.0}% of the median."
            );
        } else {
            let _ = writeln!(
                out,
                "Outliers (peak more than {pct:.0}% from the median): rank {}.",
                ranges(&outlier_ranks)
            );
        }
        let missing = job.missing_ranks();
        if !missing.is_empty() {
            let _ = writeln!(
                out,
                "No analysed trace for rank {} (skipped, failed or not in the batch).",
                ranges(&missing)
            );
        }
        let _ = writeln!(
            out,
            "\n| Rank | Peak | vs median | Differs most from the median rank | File |\n|---:|---:|---:|---|---|"
        );
        let min = job
            .ranks
            .iter()
            .min_by_key(|r| r.peak_bytes)
            .map(|r| r.rank);
        let listed: Vec<&RankPeak> = job
            .ranks
            .iter()
            .filter(|r| {
                job.ranks.len() <= LIST_ALL_UP_TO
                    || outlier_ranks.contains(&r.rank)
                    || r.rank == max.rank
                    || Some(r.rank) == min
            })
            .collect();
        for r in &listed {
            let delta = r.peak_bytes as i128 - job.median_bytes as i128;
            let differs = job
                .outliers
                .iter()
                .find(|o| o.rank == r.rank)
                .and_then(|o| o.category)
                .map_or(String::new(), |(c, d)| format!("{c} {}", signed_bytes(d)));
            let files = if r.files > 1 {
                format!(" (highest of {} files)", r.files)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {differs} | `{}`{files} |",
                r.rank,
                human_bytes(r.peak_bytes),
                signed_share(delta, job.median_bytes),
                code(&r.file),
            );
        }
        if listed.len() < job.ranks.len() {
            let _ = writeln!(
                out,
                "\n{} more ranks within {pct:.0}% of the median are not listed (the .jsonl summary has every rank).",
                job.ranks.len() - listed.len()
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Status;

    #[test]
    fn rank_numbers_in_file_names() {
        for (name, rank) in [
            ("runs/sampled_rank-0.json.gz", Some(0)),
            ("rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz", Some(70)),
            ("bs_32_rank0.json.gz", Some(0)),
            (
                "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
                Some(0),
            ),
            ("RANK12.json", Some(12)),
            ("rank3/trace.json", None), // a folder's name is not the file's
            ("frank3.json", None),
            ("ranked_4.json", None),
            ("worker3_step_12.json", None),
            ("rank1_then_rank2.json", Some(2)),
            ("rank99999999999.json", None),
        ] {
            assert_eq!(rank_in_name(name), rank, "{name}");
        }
    }

    fn ranked(
        file: &str,
        device: &str,
        rank: u32,
        world: Option<u32>,
        cats: &[(Category, u64)],
    ) -> Row {
        Row {
            file: file.into(),
            status: Status::Ok,
            format: "chrome_trace".into(),
            device: device.into(),
            peak_bytes: Some(cats.iter().map(|c| c.1).sum()),
            reserved_bytes: None,
            top_category: String::new(),
            verdict: String::new(),
            report: String::new(),
            error: String::new(),
            findings: String::new(),
            next_step_bytes: None,
            distributed: Some(RankOf {
                rank,
                world_size: world,
                from: if world.is_some() {
                    RankSource::DistributedInfo
                } else {
                    RankSource::FileName
                },
                peak_by_category: cats.iter().copied().collect(),
            }),
            warnings: Vec::new(),
        }
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_outlier_and_the_category_that_makes_the_difference() {
        use Category::*;
        let base = [
            (Parameter, 10 * MIB),
            (OptimizerState, 20 * MIB),
            (Activation, 30 * MIB),
        ];
        let mut rows: Vec<Row> = (0..4)
            .map(|r| {
                ranked(
                    &format!("job/r{r}.json"),
                    &format!("cuda:{r}"),
                    r,
                    Some(8),
                    &base,
                )
            })
            .collect();
        // Rank 2 holds 50% more activations; rank 1 a little less (within 10%).
        rows[2] = ranked(
            "job/r2.json",
            "cuda:2",
            2,
            Some(8),
            &[
                (Parameter, 10 * MIB),
                (OptimizerState, 20 * MIB),
                (Activation, 60 * MIB),
            ],
        );
        rows[1] = ranked(
            "job/r1.json",
            "cuda:1",
            1,
            Some(8),
            &[
                (Parameter, 10 * MIB),
                (OptimizerState, 20 * MIB),
                (Activation, 27 * MIB),
            ],
        );
        // Another job in another folder (a single rank: no table), a CPU
        // device row of rank 0 (compared with CPU rows only), and a row without a rank.
        rows.push(ranked("other/r0.json", "cuda:0", 0, Some(2), &base));
        rows.push(ranked("job/r0.json", "cpu", 0, Some(8), &[(Input, MIB)]));
        let mut plain = ranked("job/x.json", "cuda:0", 0, None, &base);
        plain.distributed = None;
        rows.push(plain);
        let jobs = jobs(&rows);
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        let job = &jobs[0];
        assert_eq!(
            (
                job.folder.as_str(),
                job.world_size,
                job.device_kind.as_str()
            ),
            ("job", Some(8), "cuda")
        );
        assert_eq!(
            job.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(job.median_bytes, 60 * MIB);
        assert_eq!(job.imbalance, Some(1.5));
        assert_eq!(job.outliers.len(), 1);
        assert_eq!(job.outliers[0].rank, 2);
        assert_eq!(job.outliers[0].delta_bytes, 30 * MIB as i128);
        assert_eq!(
            job.outliers[0].category,
            Some((Activation, 30 * MIB as i128))
        );
        assert_eq!(job.missing_ranks(), [4, 5, 6, 7]);
        let md = render_markdown(&rows);
        assert!(
            md.contains("### `job` · cuda · 4 of 8 ranks (distributedInfo)"),
            "{md}"
        );
        assert!(
            md.contains("max 90.0 MiB (rank 2); max/median 1.50×"),
            "{md}"
        );
        assert!(
            md.contains("Outliers (peak more than 10% from the median): rank 2."),
            "{md}"
        );
        assert!(
            md.contains("| 2 | 90.0 MiB | +50.0% | activation +30.0 MiB | `job/r2.json` |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | 57.0 MiB | -5.0% |  | `job/r1.json` |"),
            "{md}"
        );
        assert!(md.contains("No analysed trace for rank 4–7"), "{md}");
    }

    #[test]
    fn a_rank_below_the_median_names_what_it_lacks_and_steps_count_once() {
        use Category::*;
        let rows = vec![
            ranked(
                "j/rank0_step1.json",
                "cuda:0",
                0,
                None,
                &[(Activation, 10 * MIB)],
            ),
            ranked(
                "j/rank0_step2.json",
                "cuda:0",
                0,
                None,
                &[(Activation, 12 * MIB)],
            ),
            ranked(
                "j/rank1_step1.json",
                "cuda:0",
                1,
                None,
                &[(Activation, 10 * MIB)],
            ),
            ranked(
                "j/rank2_step1.json",
                "cuda:0",
                2,
                None,
                &[(Activation, 2 * MIB), (Temporary, MIB)],
            ),
        ];
        let job = &jobs(&rows)[0];
        assert_eq!(job.from, RankSource::FileName);
        assert_eq!(job.ranks[0].peak_bytes, 12 * MIB);
        assert_eq!(job.ranks[0].files, 2);
        assert_eq!(job.median_bytes, 10 * MIB);
        let low = job.outliers.iter().find(|o| o.rank == 2).unwrap();
        assert_eq!(low.category, Some((Activation, -(8 * MIB as i128))));
        let md = render_markdown(&rows);
        assert!(
            md.contains("3 ranks (numbers from the file names; world size unknown)"),
            "{md}"
        );
        assert!(md.contains("| 0 | 12.0 MiB | +20.0% | activation +2.0 MiB | `j/rank0_step2.json` (highest of 2 files) |"), "{md}");
        assert!(
            md.contains("| 2 | 3.0 MiB | -70.0% | activation -8.0 MiB |"),
            "{md}"
        );
    }

    #[test]
    fn no_table_without_two_ranks_and_big_jobs_list_only_what_stands_out() {
        use Category::*;
        assert_eq!(render_markdown(&[]), "");
        let one = [ranked(
            "j/a.json",
            "cuda:0",
            0,
            Some(2),
            &[(Activation, MIB)],
        )];
        assert_eq!(render_markdown(&one), "");
        let mut rows: Vec<Row> = (0..64)
            .map(|r| {
                ranked(
                    &format!("big/{r}.json"),
                    "cuda:0",
                    r,
                    Some(64),
                    &[(Activation, 100 * MIB + r as u64)],
                )
            })
            .collect();
        rows[40] = ranked(
            "big/40.json",
            "cuda:0",
            40,
            Some(64),
            &[(Activation, 200 * MIB)],
        );
        let md = render_markdown(&rows);
        let listed = md
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| Rank"))
            .count();
        assert_eq!(listed, 2, "{md}"); // rank 0 (lowest), rank 40 (outlier and highest)
        assert!(
            md.contains("62 more ranks within 10% of the median are not listed"),
            "{md}"
        );
        // A median of 0 (no bytes at any peak) says so rather than dividing.
        let zero: Vec<Row> = (0..2)
            .map(|r| ranked(&format!("z/{r}.json"), "cpu", r, Some(2), &[]))
            .collect();
        assert!(render_markdown(&zero).contains("max/median unknown (median 0)"));
    }

    #[test]
    fn ranges_are_compact() {
        assert_eq!(ranges(&[0, 2, 3, 4, 5, 7, 8]), "0, 2–5, 7, 8");
        assert_eq!(ranges(&[]), "");
    }
}
