//! `memcut batch … --shard I/N`: one of N processes' part of a batch, for
//! any scheduler that starts N copies of one command with an index (Slurm
//! job arrays, Kubernetes indexed jobs, a shell loop).
//!
//! Every shard lists all the inputs (cheap: names and sizes) and keeps the
//! files whose path hashes to its index. The split depends on each path
//! alone, as the batch names it, so it is the same in every shard and does
//! not move when other files come or go; output names are made from the
//! whole listing, so each report gets the name a single run gives it.
//! `memcut summary merge` joins the shards' `.jsonl` summaries into the
//! summary of a single run ([`super::merge`]).

use std::fmt;
use std::str::FromStr;

use super::{Input, Row};

/// Shard `index` of `count` (`0 <= index < count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    index: u32,
    count: u32,
}

/// A `--shard` value that is not `I/N` with `0 <= I < N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a shard: give I/N with 0 <= I < N, e.g. 0/4 … 3/4")]
pub struct ShardError(pub String);

impl Shard {
    pub fn new(index: u32, count: u32) -> Result<Shard, ShardError> {
        if index < count {
            Ok(Shard { index, count })
        } else {
            Err(ShardError(format!("{index}/{count}")))
        }
    }

    pub fn index(self) -> u32 {
        self.index
    }

    pub fn count(self) -> u32 {
        self.count
    }

    /// Whether the file the batch names `path` belongs to this shard.
    pub fn holds(self, path: &str) -> bool {
        spread(fnv1a(path.as_bytes())) % u64::from(self.count) == u64::from(self.index)
    }

    /// This shard's inputs, and the rows of paths that named nothing (a
    /// missing path is reported by the one shard it hashes to).
    pub fn select(self, inputs: Vec<Input>, rows: Vec<Row>) -> (Vec<Input>, Vec<Row>) {
        (
            inputs
                .into_iter()
                .filter(|i| self.holds(&i.display))
                .collect(),
            rows.into_iter().filter(|r| self.holds(&r.file)).collect(),
        )
    }
}

impl FromStr for Shard {
    type Err = ShardError;
    fn from_str(s: &str) -> Result<Shard, ShardError> {
        let bad = || ShardError(s.to_owned());
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let i: u32 = i.trim().parse().map_err(|_| bad())?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        Shard::new(i, n).map_err(|_| bad())
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// SplitMix64's finaliser: FNV-1a's low bits follow the last bytes
/// closely (`rank0`…`rank9` would fall into few shards), so the hash is
/// mixed before taking it modulo N.
fn spread(mut h: u64) -> u64 {
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// 64-bit FNV-1a: fixed here (never a std hasher, whose output may change
/// between Rust versions), so shards made by different builds agree.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_i_of_n() {
        assert_eq!("0/2".parse::<Shard>(), Shard::new(0, 2));
        assert_eq!(" 3 / 4 ".parse::<Shard>().unwrap().to_string(), "3/4");
        for bad in ["2/2", "1", "-1/2", "a/b", "0/0", "1/2/3", ""] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("`{bad}` is not a shard: give I/N with 0 <= I < N, e.g. 0/4 … 3/4")
            );
        }
    }

    /// The split is pinned: shards run by different memcut builds must agree.
    #[test]
    fn the_split_is_fixed_and_covers_every_path_once() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(spread(fnv1a(b"a")), 0x02c0_bdbf_4814_20f8);
        let paths: Vec<String> = (0..1000).map(|i| format!("runs/rank{i}.json.gz")).collect();
        let shards: Vec<Shard> = (0..7).map(|i| Shard::new(i, 7).unwrap()).collect();
        let mut sizes = [0usize; 7];
        for p in &paths {
            let owners: Vec<u32> = shards
                .iter()
                .filter(|s| s.holds(p))
                .map(|s| s.index())
                .collect();
            assert_eq!(owners.len(), 1, "{p}");
            sizes[owners[0] as usize] += 1;
        }
        // Roughly even (1000/7 ≈ 143 each).
        assert!(sizes.iter().all(|n| (120..170).contains(n)), "{sizes:?}");
        assert!(Shard::new(0, 1).unwrap().holds("anything"));
    }
}
