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
use std::path::Path;

use super::Row;
use crate::model::Category;
use crate::schema::{DeviceReport, Report};

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

pub use crate::schema::batch::{Job, Outlier, RankOf, RankPeak, RankSource, OUTLIER_SHARE};

/// The rank tables of the Markdown summary; empty when the rows hold no
/// job of several ranks.
pub fn render_markdown(rows: &[Row]) -> String {
    crate::report::summary::ranks_markdown(&jobs(rows))
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
}
