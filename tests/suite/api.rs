//! The library as a Rust program (or a Python binding) uses it: only the
//! public API, as `lib.rs` re-exports it.

use std::path::Path;

use memcut::{report::Verdict, AnalyzeOptions, Error, OutputFormat, Report};

fn sample(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces")
        .join(name)
}

/// Bytes in memory give the report a file gives, under the name given.
#[test]
fn analyze_bytes_equals_analyze_path() {
    for name in [
        "train_adamw.snapshot.pickle.gz",
        "train_adamw.trace.json.gz",
        "train_adamw.timeline.json.gz",
    ] {
        let path = sample(name);
        let from_file = memcut::analyze_path(&path, &AnalyzeOptions::default()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let from_bytes = memcut::analyze_bytes(
            &bytes,
            &path.display().to_string(),
            &AnalyzeOptions::default(),
        )
        .unwrap();
        assert_eq!(from_bytes, from_file, "{name}");
        let renamed =
            memcut::analyze_bytes(&bytes, "from python", &AnalyzeOptions::default()).unwrap();
        assert_eq!(renamed.source.path, "from python");
        assert_eq!(renamed.source.size_bytes, bytes.len() as u64);
    }
}

#[test]
fn options_budget_a_plan_and_a_saved_report_reads_back() {
    let mut options = AnalyzeOptions::default();
    options.plan.budget = Some(memcut::parse_size("16MiB").unwrap());
    options.analysis.top = 3;
    let report = memcut::analyze_path(&sample("train_adamw.snapshot.pickle.gz"), &options).unwrap();
    let device = &report.devices[0];
    assert_eq!(device.peak.top_sites.len(), 3);
    let plan = device.plan.as_ref().expect("a budget gives a plan");
    assert_eq!(plan.verdict, Verdict::FitsAfterCuts);
    assert_eq!(plan.budget_bytes, 16 << 20);
    // Shares: one denominator, the allocated peak.
    let cats = device.peak.categories();
    let total: f64 = cats.rows.iter().map(|(_, b)| device.peak.share(*b)).sum();
    assert!((total - 100.0).abs() < 1e-9, "{total}");
    let json = memcut::render(&report, OutputFormat::Json);
    assert_eq!(Report::from_json(&json).unwrap(), report);
}

#[test]
fn errors_are_typed_and_say_what_is_wrong() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
    let err = memcut::analyze_path(&dir, &AnalyzeOptions::default()).unwrap_err();
    assert!(matches!(err, Error::IsDirectory));
    assert_eq!(err.to_string(), "is a directory, not a trace file");
    let gz = std::fs::read(sample("train_adamw.snapshot.pickle.gz")).unwrap();
    let err =
        memcut::analyze_bytes(&gz[..gz.len() / 2], "cut", &AnalyzeOptions::default()).unwrap_err();
    assert!(matches!(err, Error::TruncatedGzip), "{err}");
    assert_eq!(err.to_string(), "not a memory trace: truncated gzip stream");
    assert!(matches!(
        memcut::analyze_bytes(b"", "empty", &AnalyzeOptions::default()),
        Err(Error::Empty)
    ));
    assert!(matches!(
        memcut::parse_size("80G"),
        Err(memcut::SizeError::UnknownUnit { .. })
    ));
    assert!(matches!(
        memcut::components::parse_components("[]"),
        Err(memcut::components::ComponentsError::Empty)
    ));
    let bad = r#"[{"name": "x", "scales": {"activation": 2.0}, "cost": "free", "action": "a"}]"#;
    let err = memcut::plan::parse_levers(bad).unwrap_err();
    assert!(matches!(err, memcut::plan::LeversError::BadFactor { .. }));
    assert_eq!(
        err.to_string(),
        "bad levers file: lever x: factor for activation must be in [0, 1], got 2"
    );
}

/// `--levers` and `--rules` files are read by the library, with the
/// messages the CLI prints (and the Python binding raises).
#[test]
fn options_files_are_read_with_the_cli_messages() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let err = memcut::read_rules_file(&missing).unwrap_err();
    assert!(matches!(err, memcut::OptionsFileError::Read { .. }));
    assert!(err
        .to_string()
        .starts_with(&format!("{}: cannot read: ", missing.display())));
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"[{"name": "x"}]"#).unwrap();
    let err = memcut::read_rules_file(&bad).unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "{}: bad rules file: missing field `category`",
            bad.display()
        )),
        "{err}"
    );
    let err = memcut::read_levers_file(&bad).unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "{}: bad levers file: missing field `scales`",
            bad.display()
        )),
        "{err}"
    );
    let good = dir.path().join("rules.json");
    std::fs::write(&good, r#"[{"name": "r", "category": "temporary"}]"#).unwrap();
    let rules = memcut::read_rules_file(&good).unwrap();
    assert_eq!(
        rules,
        memcut::parse_rules(r#"[{"name": "r", "category": "temporary"}]"#).unwrap()
    );
}

/// The seed's worked example, through the library: largest source
/// `weights` at 10.0 GB; target 15.0 → cut `activations`, peak 13.0.
#[test]
fn the_seed_worked_example() {
    let components = memcut::components::parse_components(
        r#"[{"name": "weights", "peak_gb": 10.0, "cuttable": false},
            {"name": "activations", "peak_gb": 8.0, "cuttable": true},
            {"name": "temporary_buffers", "peak_gb": 3.0, "cuttable": true}]"#,
    )
    .unwrap();
    let summary = memcut::components::summarize_peak_sources(&components);
    assert_eq!(
        (summary.largest_source.as_str(), summary.largest_peak_gb),
        ("weights", 10.0)
    );
    let cuts = memcut::components::plan_memory_cuts(&components, 15.0);
    assert_eq!(cuts.cut_order, ["activations"]);
    assert_eq!(cuts.estimated_peak_gb, 13.0);
    let rec = memcut::components::recommend(&summary, &cuts);
    assert_eq!(rec.verdict, Verdict::FitsAfterCuts);
    let report = memcut::plan_components(&components, 15.0);
    assert_eq!(report.cut_order, ["activations"]);
    assert!(report.to_json().contains("\"estimated_peak_gb\": 13.0"));
}

/// The names `lib.rs` re-exports at the crate root: the last name of each
/// path in its `pub use` items (or the name after `as`), the hidden
/// `internals` left out.
fn root_names() -> Vec<String> {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let lib = &lib[..lib.find("pub mod internals").unwrap_or(lib.len())];
    let mut names = Vec::new();
    for item in lib.split("pub use ").skip(1) {
        let item = &item[..item.find(';').unwrap()];
        let list = item.find('{').map_or(item, |i| &item[i + 1..]);
        for path in list.trim_end_matches('}').split(',') {
            let path = path.trim();
            let name = match path.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => path.rsplit("::").next().unwrap().trim(),
            };
            if !name.is_empty() {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// The root holds the entry points (analyse, render, diff, options, errors);
/// the report's types live under `memcut::report`, the plan's options and
/// levers under `memcut::plan` (issue 30: the root had 86 names).
#[test]
fn the_root_holds_only_the_entry_points() {
    let names = root_names();
    for entry in [
        "analyze_path",
        "analyze_bytes",
        "AnalyzeOptions",
        "render",
        "Report",
        "Error",
    ] {
        assert!(
            names.iter().any(|n| n == entry),
            "{entry} not at the root: {names:?}"
        );
    }
    for inner in [
        "Peak",
        "DeviceReport",
        "Plan",
        "Finding",
        "Lever",
        "PlanOptions",
        "Order",
    ] {
        assert!(
            !names.iter().any(|n| n == inner),
            "{inner} at the root: {names:?}"
        );
    }
    assert!(
        names.len() <= 36,
        "{} names at the root: {names:?}",
        names.len()
    );
    // The same types, where they live now.
    let _: Option<memcut::report::Peak> = None;
    let _: Option<memcut::plan::PlanOptions> = None;
    let _: Option<memcut::components::Component> = None;
}
