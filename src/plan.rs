//! The cut planner (DESIGN.md §6): summarise peak sources → plan cuts → recommend.

use serde::{Deserialize, Serialize};

use crate::model::Category;

/// A device's cut plan against a memory budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub budget_bytes: u64,
    pub headroom_bytes: u64,
    pub target_bytes: u64,
    pub peak_before_bytes: u64,
    pub steps: Vec<PlanStep>,
    pub estimated_peak_bytes: u64,
    pub verdict: Verdict,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    pub lever: String,
    pub action: String,
    pub cost: String,
    pub categories: Vec<Category>,
    pub saved_bytes: u64,
    pub peak_after_bytes: u64,
    pub peak_moved_to: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Fits,
    FitsAfterCuts,
    DoesNotFit,
}
