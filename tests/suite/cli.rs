//! `memcut analyze` as a user runs it.

use assert_cmd::Command;
use predicates::prelude::*;

const SAMPLE: &str = "sample_traces/train_adamw.snapshot.pickle.gz";

fn memcut() -> Command {
    Command::cargo_bin("memcut").unwrap()
}

#[test]
fn json_report_has_the_contract_fields() {
    let out = memcut()
        .args(["analyze", SAMPLE, "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema_version"], 3);
    assert_eq!(v["tool"]["name"], "memcut");
    assert_eq!(v["source"]["format"], "torch_snapshot");
    assert_eq!(v["source"]["path"], SAMPLE);
    let d = &v["devices"][0];
    assert_eq!(d["device"], "cpu");
    let peak = &d["peak"];
    for key in [
        "allocated_bytes",
        "reserved_bytes",
        "event_index",
        "ts_us",
        "by_category",
        "top_sites",
        "allocations",
    ] {
        assert!(peak.get(key).is_some(), "peak.{key} missing");
    }
    let first = &peak["allocations"][0];
    for key in ["addr", "size", "category", "site", "rule"] {
        assert!(first.get(key).is_some(), "allocation.{key} missing");
    }
    // Largest first.
    let sizes: Vec<u64> = peak["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["size"].as_u64().unwrap())
        .collect();
    assert!(sizes.windows(2).all(|w| w[0] >= w[1]));
    // The JSON round-trips through the library's own type.
    let text = String::from_utf8(out.stdout).unwrap();
    let parsed = memcut::Report::from_json(&text).unwrap();
    assert_eq!(memcut::render(&parsed, memcut::OutputFormat::Json), text);
}

#[test]
fn stdin_and_file_give_the_same_numbers() {
    let bytes = std::fs::read(SAMPLE).unwrap();
    let from_stdin = memcut()
        .args(["analyze", "-", "-f", "json"])
        .write_stdin(bytes)
        .output()
        .unwrap();
    let from_file = memcut()
        .args(["analyze", SAMPLE, "-f", "json"])
        .output()
        .unwrap();
    let a: serde_json::Value = serde_json::from_slice(&from_stdin.stdout).unwrap();
    let b: serde_json::Value = serde_json::from_slice(&from_file.stdout).unwrap();
    assert_eq!(a["devices"], b["devices"]);
    assert_eq!(a["source"]["path"], "-");
}

#[test]
fn markdown_and_text_name_the_peak() {
    memcut()
        .args(["analyze", SAMPLE, "-f", "md"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("## Device `cpu`")
                .and(predicate::str::contains("| Peak allocated | **18.8 MiB**")),
        );
    memcut()
        .args(["analyze", SAMPLE, "-f", "text"])
        .assert()
        .success()
        .stdout(predicate::str::contains("cpu: peak 18.8 MiB allocated"));
}

#[test]
fn output_file_and_device_filter() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    memcut()
        .args(["analyze", SAMPLE, "-f", "json", "--device", "cpu", "-o"])
        .arg(&out)
        .assert()
        .success()
        .stdout("");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 1);
    // An absent device is an error that lists the ones there are.
    memcut()
        .args(["analyze", SAMPLE, "-f", "json", "--device", "cuda:7"])
        .assert()
        .code(1)
        .stdout("")
        .stderr(format!(
            "memcut: error: {SAMPLE}: no device cuda:7 in this trace (devices: cpu)\n"
        ));
}

#[test]
fn user_rules_file_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"[{"name": "adam", "category": "unknown", "site_contains": "adam.py"}]"#,
    )
    .unwrap();
    let out = memcut()
        .args(["analyze", SAMPLE, "-f", "json", "--rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(out.stdout.windows(9).any(|w| w == b"user:adam"));
    std::fs::write(&rules, "[{\"nam\": 1}]").unwrap();
    memcut()
        .args(["analyze", SAMPLE, "--rules"])
        .arg(&rules)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("bad rules file"));
}

fn fails_with(bytes: &[u8], expected: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.bin");
    std::fs::write(&path, bytes).unwrap();
    let out = memcut().arg("analyze").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{expected}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with(&format!("memcut: error: {}: ", path.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in {stderr}"
    );
}

#[test]
fn bad_inputs_get_one_line_errors() {
    fails_with(b"", "empty file");
    fails_with(b"\x13\x37 random bytes \xff\xfe", "unrecognised content");
    fails_with(br#"{"not": "a snapshot"}"#, "neither `traceEvents`");
    // GLOBAL os.system: refused, never imported.
    fails_with(
        b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03.",
        "opcode GLOBAL (0x63) refused",
    );
    let real = std::fs::read("sample_traces/train_sgd_momentum.snapshot.pickle.gz").unwrap();
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&real[..]), &mut raw).unwrap();
    fails_with(&raw[..raw.len() / 2], "truncated pickle");
    fails_with(&real[..real.len() / 2], "truncated gzip");
}

#[test]
fn a_directory_is_not_a_trace() {
    memcut()
        .args(["analyze", "sample_traces"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "memcut: error: sample_traces: is a directory, not a trace file (for every trace in it: memcut batch sample_traces)",
        ));
}

#[test]
fn one_bad_file_does_not_stop_the_others() {
    let out = memcut()
        .args(["analyze", "no/such/file", SAMPLE, "-f", "text"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("cpu: peak"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("memcut: error: no/such/file: cannot read")
    );
}

/// Every example in the README runs on committed files, and each line it
/// shows is a line of what the command prints today, in order (an example
/// may leave lines out; it may not make any up or keep a stale one).
#[test]
fn the_readme_examples_run_on_committed_files_and_are_real_output() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let mut checked = 0;
    for block in readme.split("```text\n").skip(1) {
        let block = &block[..block.find("```").unwrap()];
        let mut lines = block.lines();
        let Some(command) = lines.next().and_then(|l| l.strip_prefix("$ memcut ")) else {
            continue;
        };
        let args: Vec<&str> = command.split_whitespace().collect();
        let file = args.get(1).expect("a file");
        assert!(
            std::path::Path::new(root).join(file).exists(),
            "the README's example `memcut {command}` needs {file}, which is not committed"
        );
        let out = memcut()
            .current_dir(root)
            .args(&args)
            .args(["-f", "text"])
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut printed_lines = printed.lines();
        for shown in lines {
            assert!(
                printed_lines.any(|p| p == shown),
                "README example `memcut {command}`: this line is not (or no longer, or not in this order) what it prints:\n{shown}\n\nit prints:\n{printed}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 2, "{checked} examples found");
}

/// The README's first example is what the first command prints (issue 33,
/// item 3: it had gone stale).
#[test]
fn the_readme_first_example_is_the_real_output() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let start = readme
        .find("```text\nmemcut: sample_traces/train_adamw.snapshot.pickle.gz")
        .expect("the first example")
        + "```text\n".len();
    let end = start + readme[start..].find("```").unwrap();
    let out = memcut()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "analyze",
            "sample_traces/train_adamw.snapshot.pickle.gz",
            "-f",
            "text",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), &readme[start..end]);
}
