//! The seed's component-list mode: `[{name, peak_gb, cuttable}]` and a
//! target in decimal GB; a cut removes a whole component. The three steps
//! keep the seed's names — [`summarize_peak_sources`], [`plan_memory_cuts`],
//! [`recommend`] (the seed's `recommend_memory_followup`) — and
//! [`plan_components`] runs them and gives what `memcut plan` prints. It
//! reproduces the seed's worked example exactly (see the tests).

use std::fmt::Write;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::schema::Verdict;

/// One entry of a component list: `{"name": "weights", "peak_gb": 10.0, "cuttable": false}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    pub name: String,
    /// Decimal GB (10^9 bytes), used exactly as given.
    pub peak_gb: f64,
    pub cuttable: bool,
}

/// The largest contributor (ties: the first listed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeakSummary {
    /// Empty for an empty list.
    pub largest_source: String,
    pub largest_peak_gb: f64,
    /// Sum of all components: the peak before any cut.
    pub total_peak_gb: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutStep {
    pub name: String,
    pub saved_gb: f64,
    pub peak_after_gb: f64,
}

/// Cuts in order, with the estimated peak after each and at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutPlan {
    pub target_gb: f64,
    pub peak_before_gb: f64,
    pub cut_order: Vec<String>,
    pub steps: Vec<CutStep>,
    pub estimated_peak_gb: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    pub verdict: Verdict,
    /// How far over the target the plan still is (0 unless `does_not_fit`).
    pub gap_gb: f64,
    pub reason: String,
}

/// Rounds decimal GB to whole bytes, so that float noise (`21.0 − 8.0`,
/// `0.1 + 0.2`) never shows: the result is the double nearest to a whole
/// number of bytes, and prints as such.
pub fn round_gb(x: f64) -> f64 {
    let r = (x * 1e9).round() / 1e9;
    if r == 0.0 {
        0.0 // no "-0.0"
    } else {
        r
    }
}

/// Why a component list was refused (one line each).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ComponentsError {
    #[error("bad JSON: {0}")]
    Json(serde_json::Error),
    #[error("expected a JSON list of {{\"name\", \"peak_gb\", \"cuttable\"}} objects")]
    NotAList,
    #[error("empty component list")]
    Empty,
    /// The component at this position (1-based) is not `{name, peak_gb, cuttable}`.
    #[error("component {index}: {error}")]
    Component {
        index: usize,
        error: serde_json::Error,
    },
    #[error("component {index} ({name}): peak_gb must be a size >= 0, got {peak_gb}")]
    BadSize {
        index: usize,
        name: String,
        peak_gb: f64,
    },
}

/// Parses and checks a component list (JSON).
pub fn parse_components(text: &str) -> Result<Vec<Component>, ComponentsError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(ComponentsError::Json)?;
    let items = value.as_array().ok_or(ComponentsError::NotAList)?;
    if items.is_empty() {
        return Err(ComponentsError::Empty);
    }
    let mut out = Vec::with_capacity(items.len());
    for (k, item) in items.iter().enumerate() {
        let c: Component =
            serde_json::from_value(item.clone()).map_err(|error| ComponentsError::Component {
                index: k + 1,
                error,
            })?;
        if !c.peak_gb.is_finite() || c.peak_gb < 0.0 {
            return Err(ComponentsError::BadSize {
                index: k + 1,
                name: c.name,
                peak_gb: c.peak_gb,
            });
        }
        out.push(c);
    }
    Ok(out)
}

/// The largest source at the peak (the seed's `summarize_peak_sources`).
pub fn summarize_peak_sources(components: &[Component]) -> PeakSummary {
    let mut largest: Option<&Component> = None;
    for c in components {
        if largest.is_none_or(|l| c.peak_gb > l.peak_gb) {
            largest = Some(c);
        }
    }
    PeakSummary {
        largest_source: largest.map(|c| c.name.clone()).unwrap_or_default(),
        largest_peak_gb: largest.map_or(0.0, |c| round_gb(c.peak_gb)),
        total_peak_gb: round_gb(components.iter().map(|c| c.peak_gb).sum()),
    }
}

/// The seed's `plan_memory_cuts`: cuttable components by `peak_gb`
/// descending (ties: file order); the running total starts at the sum of all
/// components; a component is cut only while the total is still above the
/// target.
pub fn plan_memory_cuts(components: &[Component], target_gb: f64) -> CutPlan {
    let mut total = round_gb(components.iter().map(|c| c.peak_gb).sum());
    let peak_before_gb = total;
    let mut candidates: Vec<&Component> = components.iter().filter(|c| c.cuttable).collect();
    candidates.sort_by(|a, b| b.peak_gb.total_cmp(&a.peak_gb));
    let mut steps = Vec::new();
    for c in candidates {
        if total <= target_gb {
            break;
        }
        total = round_gb(total - c.peak_gb);
        steps.push(CutStep {
            name: c.name.clone(),
            saved_gb: round_gb(c.peak_gb),
            peak_after_gb: total,
        });
    }
    CutPlan {
        target_gb,
        peak_before_gb,
        cut_order: steps.iter().map(|s| s.name.clone()).collect(),
        steps,
        estimated_peak_gb: total,
    }
}

/// The seed's `recommend_memory_followup`: verdict, remaining gap, one line.
pub fn recommend(summary: &PeakSummary, plan: &CutPlan) -> Recommendation {
    let g = fmt_gb;
    let target = plan.target_gb;
    if plan.peak_before_gb <= target {
        return Recommendation {
            verdict: Verdict::Fits,
            gap_gb: 0.0,
            reason: format!(
                "peak {} GB is within the {} GB target; nothing to cut",
                g(plan.peak_before_gb),
                g(target)
            ),
        };
    }
    if plan.estimated_peak_gb <= target {
        return Recommendation {
            verdict: Verdict::FitsAfterCuts,
            gap_gb: 0.0,
            reason: format!(
                "cutting {} brings the peak from {} GB to {} GB, within the {} GB target",
                plan.cut_order.join(", "),
                g(plan.peak_before_gb),
                g(plan.estimated_peak_gb),
                g(target)
            ),
        };
    }
    let gap = round_gb(plan.estimated_peak_gb - target);
    let cut = if plan.cut_order.is_empty() {
        "nothing is cuttable".to_owned()
    } else {
        format!("even after cutting {}", plan.cut_order.join(", "))
    };
    Recommendation {
        verdict: Verdict::DoesNotFit,
        gap_gb: gap,
        reason: format!(
            "{cut}: the peak is {} GB, {} GB over the {} GB target (largest source: {}, {} GB)",
            g(plan.estimated_peak_gb),
            g(gap),
            g(target),
            summary.largest_source,
            g(summary.largest_peak_gb)
        ),
    }
}

/// Decimal GB for people: `13.0`, `13.25`, never `13` or `12.999999999`.
pub fn fmt_gb(x: f64) -> String {
    let x = round_gb(x);
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// Everything `memcut plan` prints (the JSON form is this struct).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentReport {
    pub largest_source: String,
    pub largest_peak_gb: f64,
    pub peak_gb: f64,
    pub target_gb: f64,
    pub cut_order: Vec<String>,
    pub steps: Vec<CutStep>,
    pub estimated_peak_gb: f64,
    pub verdict: Verdict,
    pub gap_gb: f64,
    pub reason: String,
}

impl ComponentReport {
    /// Runs the three steps on a component list.
    pub fn new(components: &[Component], target_gb: f64) -> ComponentReport {
        let summary = summarize_peak_sources(components);
        let plan = plan_memory_cuts(components, target_gb);
        let rec = recommend(&summary, &plan);
        ComponentReport {
            largest_source: summary.largest_source,
            largest_peak_gb: summary.largest_peak_gb,
            peak_gb: plan.peak_before_gb,
            target_gb,
            cut_order: plan.cut_order,
            steps: plan.steps,
            estimated_peak_gb: plan.estimated_peak_gb,
            verdict: rec.verdict,
            gap_gb: rec.gap_gb,
            reason: rec.reason,
        }
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("always serialises");
        s.push('\n');
        s
    }

    pub fn to_text(&self) -> String {
        let g = fmt_gb;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "largest source: {} ({} GB of {} GB)",
            self.largest_source,
            g(self.largest_peak_gb),
            g(self.peak_gb)
        );
        let _ = writeln!(out, "target: {} GB", g(self.target_gb));
        for (i, s) in self.steps.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {}. cut {} (saves {} GB) -> peak {} GB",
                i + 1,
                s.name,
                g(s.saved_gb),
                g(s.peak_after_gb)
            );
        }
        let _ = writeln!(
            out,
            "estimated peak: {} GB\nverdict: {} - {}",
            g(self.estimated_peak_gb),
            self.verdict.as_str(),
            self.reason
        );
        out
    }

    pub fn to_markdown(&self) -> String {
        let g = fmt_gb;
        let mut out = String::new();
        let _ = writeln!(out, "# memcut plan\n");
        let _ = writeln!(
            out,
            "Largest source: **{}** ({} GB of {} GB). Target: {} GB.\n",
            self.largest_source,
            g(self.largest_peak_gb),
            g(self.peak_gb),
            g(self.target_gb)
        );
        if !self.steps.is_empty() {
            let _ = writeln!(
                out,
                "| # | Cut | Saves (GB) | Peak after (GB) |\n|---:|---|---:|---:|"
            );
            for (i, s) in self.steps.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    i + 1,
                    s.name.replace('|', "\\|"),
                    g(s.saved_gb),
                    g(s.peak_after_gb)
                );
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "Estimated peak: {} GB.\n\n**Verdict: {}** — {}",
            g(self.estimated_peak_gb),
            self.verdict.as_str(),
            self.reason
        );
        out
    }
}

/// The seed's three steps on a component list against `target_gb`.
pub fn plan_components(components: &[Component], target_gb: f64) -> ComponentReport {
    ComponentReport::new(components, target_gb)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> Vec<Component> {
        parse_components(
            r#"[{"name": "weights", "peak_gb": 10.0, "cuttable": false},
                {"name": "activations", "peak_gb": 8.0, "cuttable": true},
                {"name": "temporary_buffers", "peak_gb": 3.0, "cuttable": true}]"#,
        )
        .unwrap()
    }

    #[test]
    fn seed_worked_example() {
        let components = seed();
        let summary = summarize_peak_sources(&components);
        assert_eq!(summary.largest_source, "weights");
        assert_eq!(summary.largest_peak_gb, 10.0);
        let plan = plan_memory_cuts(&components, 15.0);
        assert_eq!(plan.cut_order, vec!["activations".to_owned()]);
        assert_eq!(plan.estimated_peak_gb, 13.0);
        assert_eq!(plan.peak_before_gb, 21.0);
        let rec = recommend(&summary, &plan);
        assert_eq!(rec.verdict, Verdict::FitsAfterCuts);
        assert_eq!(rec.gap_gb, 0.0);
        let json = ComponentReport::new(&components, 15.0).to_json();
        assert!(json.contains("\"estimated_peak_gb\": 13.0"), "{json}");
        assert!(json.contains("\"verdict\": \"fits_after_cuts\""), "{json}");
    }

    #[test]
    fn components_fit_and_do_not_fit() {
        let components = seed();
        let summary = summarize_peak_sources(&components);
        let fits = plan_memory_cuts(&components, 21.0);
        assert!(fits.cut_order.is_empty());
        assert_eq!(recommend(&summary, &fits).verdict, Verdict::Fits);
        let both = plan_memory_cuts(&components, 10.5);
        assert_eq!(both.cut_order, vec!["activations", "temporary_buffers"]);
        assert_eq!(both.estimated_peak_gb, 10.0);
        let nope = plan_memory_cuts(&components, 9.0);
        let rec = recommend(&summary, &nope);
        assert_eq!(rec.verdict, Verdict::DoesNotFit);
        assert_eq!(rec.gap_gb, 1.0);
        assert!(rec.reason.contains("1.0 GB over"), "{}", rec.reason);
    }

    #[test]
    fn float_noise_never_shows() {
        let components = vec![
            Component {
                name: "a".into(),
                peak_gb: 0.1,
                cuttable: false,
            },
            Component {
                name: "b".into(),
                peak_gb: 0.2,
                cuttable: true,
            },
            Component {
                name: "c".into(),
                peak_gb: 0.7,
                cuttable: true,
            },
        ];
        let plan = plan_memory_cuts(&components, 0.35);
        assert_eq!(plan.peak_before_gb, 1.0);
        assert_eq!(plan.steps[0].peak_after_gb, 0.3);
        assert_eq!(fmt_gb(plan.estimated_peak_gb), "0.3");
        assert_eq!(fmt_gb(21.0 - 8.0), "13.0");
    }

    #[test]
    fn component_errors_are_one_line() {
        for bad in [
            "{}",
            "[]",
            "not json",
            r#"[{"name": "w", "cuttable": true}]"#,
            r#"[{"name": "w", "peak_gb": -1.0, "cuttable": true}]"#,
            r#"[{"name": "w", "peak_gb": "3", "cuttable": true}]"#,
        ] {
            let e = parse_components(bad).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
        }
        let e = parse_components(r#"[{"name": "w", "cuttable": true}]"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("peak_gb"), "{e}");
    }
}
