//! Rules the user gives (`--rules FILE`, a JSON list): tried before the
//! built-in ones, each naming a category for the allocations it matches.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Classification, Rule};
use crate::model::{Category, Frame, SiteId, Sites};
use crate::timeline::Interval;

/// A user rule (from `--rules FILE`, a JSON list), tried before the built-in ones.
/// Every present condition must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserRule {
    pub name: String,
    pub category: Category,
    /// Text that some frame must contain: in its path (`\` read as `/`,
    /// on either side), its function name, or the `path:LINE name` text a
    /// report prints for it (so `train.py:42` matches line 42 of train.py).
    #[serde(default)]
    pub site_contains: Option<String>,
    /// Only allocations that are (or are not) alive at the end of the trace.
    #[serde(default)]
    pub alive_at_end: Option<bool>,
    /// Only allocations at least this large.
    #[serde(default)]
    pub min_bytes: Option<u64>,
}

/// Why a rules file was refused (one line).
#[derive(Debug, thiserror::Error)]
#[error("bad rules file: {0}")]
pub struct RulesError(serde_json::Error);

/// Parses a rules file (JSON list of [`UserRule`]).
pub fn parse_rules(text: &str) -> Result<Vec<UserRule>, RulesError> {
    serde_json::from_str(text).map_err(RulesError)
}

impl UserRule {
    /// `sites_ok`: [`UserRule::site_table`] for this rule.
    pub(super) fn matches(
        &self,
        sites_ok: Option<&[bool]>,
        interval: &Interval,
        alive_at_end: bool,
    ) -> bool {
        sites_ok.is_none_or(|ok| ok[interval.site as usize])
            && self.alive_at_end.is_none_or(|a| a == alive_at_end)
            && self.min_bytes.is_none_or(|m| interval.size >= m)
    }

    /// Whether each site satisfies `site_contains` (`None` without one):
    /// decided once per site, not once per allocation.
    pub(super) fn site_table(&self, sites: &Sites) -> Option<Vec<bool>> {
        let needle = self.site_contains.as_deref()?.replace('\\', "/");
        let frame_ok = |fr: &Frame| {
            let name = sites.str(fr.name);
            let file = sites.str(fr.filename).replace('\\', "/");
            name.contains(&needle)
                || file.contains(&needle)
                || (needle.contains(':') && format!("{file}:{} {name}", fr.line).contains(&needle))
        };
        Some(
            (0..sites.len())
                .into_par_iter()
                .map(|site| sites.frames(site as SiteId).iter().any(frame_ok))
                .collect(),
        )
    }
}

/// How many allocations each user rule classified, over `classes` (the
/// first rule that matches wins, so a rule can match and count none).
pub fn user_rule_counts(classes: &[Classification], rules: usize) -> Vec<u64> {
    let mut counts = vec![0u64; rules];
    for c in classes {
        if let Rule::User(i) = c.rule {
            counts[i as usize] += 1;
        }
    }
    counts
}
