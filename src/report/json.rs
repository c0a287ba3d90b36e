//! JSON: the machine contract. `schema_version` first, field names fixed by
//! [`super::Report`], pretty-printed so two saved reports `diff` well.

use super::Report;

pub fn render(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).expect("a report always serialises");
    s.push('\n');
    s
}

/// Reads a saved report back (the round trip `diff` relies on).
pub fn parse(text: &str) -> Result<Report, serde_json::Error> {
    serde_json::from_str(text)
}
