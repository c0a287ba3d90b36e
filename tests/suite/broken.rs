//! The broken-input corpus (`tests/data/broken/`, made by `make_broken.py`
//! there; see its README): every file gets memcut's exact answer checked on
//! the binary — the one-line error and exit 1, or the report and the
//! diagnostics that say what was wrong. Nothing may panic, hang or run code.

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/broken");

fn memcut() -> Command {
    let mut cmd = Command::cargo_bin("memcut").unwrap();
    cmd.current_dir(DIR)
        .timeout(std::time::Duration::from_secs(60));
    cmd
}

/// `memcut analyze FILE` fails with exactly `memcut: error: FILE: MESSAGE`.
fn fails_with(file: &str, message: &str) {
    let out = memcut().args(["analyze", file]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr,
        format!("memcut: error: {file}: {message}\n"),
        "{file}"
    );
    assert_eq!(out.status.code(), Some(1), "{file}");
    assert!(out.stdout.is_empty(), "{file}: no report on error");
}

/// `memcut analyze --format json FILE` succeeds, and stderr holds the
/// report's warnings and nothing else (a report written to a file must not
/// hide them); returns the report.
fn report(file: &str) -> Value {
    let out = memcut()
        .args(["analyze", "--format", "json", file])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let warnings: String = diagnostics(&r)
        .iter()
        .filter(|(level, _)| level == "warning")
        .map(|(_, m)| format!("memcut: warning: {file}: {m}\n"))
        .collect();
    assert_eq!(String::from_utf8_lossy(&out.stderr), warnings, "{file}");
    r
}

fn diagnostics(r: &Value) -> Vec<(String, String)> {
    r["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["level"].as_str().unwrap().to_owned(),
                d["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn has(r: &Value, level: &str, message: &str) {
    let all = diagnostics(r);
    assert!(
        all.iter().any(|(l, m)| l == level && m == message),
        "missing {level} `{message}` in {all:#?}"
    );
}

fn peak(r: &Value, device: usize) -> u64 {
    r["devices"][device]["peak"]["allocated_bytes"]
        .as_u64()
        .unwrap()
}

// ---- containers and formats -------------------------------------------------

#[test]
fn empty_file() {
    fails_with("empty.bin", "empty file");
}

#[test]
fn directory_passed_as_a_file() {
    fails_with(
        ".",
        "is a directory, not a trace file (for every trace in it: memcut batch .)",
    );
}

#[test]
fn random_bytes() {
    fails_with(
        "random_bytes.bin",
        "not a memory trace: unrecognised content (first byte 0x07); expected a snapshot pickle, a Chrome trace JSON or gzip",
    );
}

#[test]
fn json_that_is_not_a_trace() {
    fails_with(
        "json_not_a_trace.json",
        "not a memory trace: a JSON object with neither `traceEvents` (Chrome trace) nor `segments`/`device_traces` (memory snapshot)",
    );
}

#[test]
fn truncated_gzip() {
    fails_with(
        "truncated_gzip.json.gz",
        "not a memory trace: truncated gzip stream",
    );
}

#[test]
fn gzip_of_nothing() {
    fails_with(
        "gzip_of_nothing.gz",
        "not a memory trace: gzip stream inflates to nothing",
    );
}

#[test]
fn gzip_bomb_is_refused_not_inflated() {
    fails_with(
        "gzip_bomb_double.json.gz.gz",
        "input exceeds a limit: gzip stream inflates more than 250:1 (67108864 bytes from 65243) (possible gzip bomb)",
    );
}

#[test]
fn html_with_corrupt_base64_snapshot() {
    fails_with(
        "html_corrupt_base64.html",
        "not a PyTorch memory snapshot: bad base64 snapshot in HTML: Invalid symbol 33, offset 20.",
    );
}

// ---- pickles ------------------------------------------------------------------

#[test]
fn truncated_pickle_at_several_offsets() {
    // A truncated pickle has no usable prefix (the root dict is incomplete).
    fails_with(
        "truncated_pickle_at_2.pkl",
        "bad pickle at byte 0: truncated pickle: unexpected end of input at byte 2",
    );
    fails_with(
        "truncated_pickle_at_40.pkl",
        "bad pickle at byte 27: truncated pickle: unexpected end of input at byte 40",
    );
    fails_with(
        "truncated_pickle_before_stop.pkl",
        "bad pickle at byte 321: truncated pickle: unexpected end of input at byte 322",
    );
}

const GLOBAL_REFUSED: &str =
    "opcode GLOBAL (0x63) refused: memcut never imports or calls code from a pickle";

#[test]
fn global_reduce_pickles_are_refused() {
    fails_with(
        "global_reduce_os_system_proto0.pkl",
        &format!("bad pickle at byte 0: {GLOBAL_REFUSED}"),
    );
    fails_with(
        "global_reduce_os_system_proto2.pkl",
        &format!("bad pickle at byte 2: {GLOBAL_REFUSED}"),
    );
}

#[test]
fn global_reduce_payload_never_runs() {
    // The classic payload, aimed at a file that must not appear.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    let command = format!("touch {}", marker.display());
    for proto2 in [false, true] {
        let mut payload = Vec::new();
        if proto2 {
            payload.extend_from_slice(b"\x80\x02");
        }
        payload.extend_from_slice(format!("cos\nsystem\n(S'{command}'\ntR.").as_bytes());
        let file = dir.path().join("payload.pkl");
        std::fs::write(&file, &payload).unwrap();
        let out = memcut().arg("analyze").arg(&file).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let at = if proto2 { 2 } else { 0 };
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "memcut: error: {}: bad pickle at byte {at}: {GLOBAL_REFUSED}\n",
                file.display()
            )
        );
        assert!(!Path::new(&marker).exists(), "the payload ran");
    }
}

/// 1.2M nested lists: refused by the stack limit, at the same byte however
/// the input arrives (the limit is checked where the stack grows, not per
/// window of input read).
#[test]
fn nested_lists_are_refused_by_the_stack_limit() {
    const MESSAGE: &str = "bad pickle at byte 1048578: more than 1048576 values on the pickle stack (e.g. millions of nested lists); not a memory snapshot";
    // A file is read ahead in 1 MiB chunks (gzip inflated ahead too).
    fails_with("pickle_nested_lists.pkl.gz", MESSAGE);
    // Standard input is read in 64 KiB windows.
    let gz = std::fs::read(format!("{DIR}/pickle_nested_lists.pkl.gz")).unwrap();
    let out = memcut()
        .args(["analyze", "-"])
        .write_stdin(gz)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("memcut: error: -: {MESSAGE}\n")
    );
}

#[test]
fn absurd_length_claim() {
    fails_with(
        "pickle_huge_length_claim.pkl",
        "bad pickle at byte 2: string of 4294967296 bytes exceeds the limit of 1073741824 bytes",
    );
}

#[test]
fn memo_index_out_of_range() {
    fails_with(
        "pickle_memo_out_of_range.pkl",
        "bad pickle at byte 2: LONG_BINGET: memo index 4294967280 not found",
    );
}

#[test]
fn fuzz_cycle_inputs() {
    // Found by `cargo fuzz run unpickle` (they leaked reference cycles).
    fails_with(
        "fuzz_pickle_dict_cycle_leak.pkl",
        "not a memory trace: unrecognised content (first byte 0x5d); expected a snapshot pickle, a Chrome trace JSON or gzip",
    );
    fails_with(
        "fuzz_pickle_memo_cycle_leak.pkl",
        "not a PyTorch memory snapshot: a dict without `segments` or `device_traces`",
    );
    // (The unpickler itself, which the sniffer does not reach for the first
    // one, is tested on both in `formats::pickle::tests`.)
}

// ---- snapshots with damaged histories ---------------------------------------------

#[test]
fn negative_size() {
    let r = report("snapshot_negative_size.pkl");
    assert_eq!(peak(&r, 0), 0);
    has(
        &r,
        "warning",
        "1 trace entry fields (addr/size/device_free) are negative or not integers: read as 0, so sizes may be understated",
    );
}

#[test]
fn free_of_an_unknown_address() {
    let r = report("snapshot_free_unknown_address.pkl");
    assert_eq!(peak(&r, 0), 4096);
    assert_eq!(r["devices"][0]["baseline_bytes"], 4096);
    has(
        &r,
        "info",
        "1 frees of addresses never allocated in the trace (4096 bytes): counted as baseline from the start",
    );
    has(
        &r,
        "warning",
        "the history starts with a free: recording began mid-program or the ring buffer wrapped; memory allocated earlier is counted as baseline",
    );
}

#[test]
fn alloc_of_an_address_already_live() {
    let r = report("snapshot_alloc_address_live.pkl");
    assert_eq!(peak(&r, 0), 2048);
    has(
        &r,
        "warning",
        "1 allocations reuse an address that was still live (a free is missing); the older allocation is closed there",
    );
}

#[test]
fn events_out_of_order() {
    let r = report("snapshot_events_out_of_order.pkl");
    assert_eq!(peak(&r, 0), 1536);
    has(
        &r,
        "info",
        "2 events are timestamped earlier than an event listed before them: the list order is used, as the allocator recorded it",
    );
}

#[test]
fn device_with_no_events_is_left_out() {
    let r = report("snapshot_device_without_events.pkl");
    let devices: Vec<&str> = r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device"].as_str().unwrap())
        .collect();
    assert_eq!(devices, ["cuda:1"]);
    assert_eq!(peak(&r, 0), 512);
}

#[test]
fn oom_without_device_free() {
    let r = report("snapshot_oom_without_device_free.pkl");
    let oom = &r["devices"][0]["ooms"][0];
    assert_eq!(oom["requested_bytes"], 1u64 << 30);
    assert_eq!(oom["device_free_bytes"], Value::Null);
    // The dump has no segment for the device: reserved memory, and so the
    // cache, is unknown, never `0 B` below the allocated bytes.
    assert_eq!(oom["reserved_bytes"], Value::Null);
    assert_eq!(
        oom["verdict"],
        "1.00 GiB requested with an unknown amount cached; the trace does not say how much memory was free on the device"
    );
}

#[test]
fn ten_devices() {
    let r = report("snapshot_ten_devices.pkl");
    let devices = r["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 10);
    for (d, dev) in devices.iter().enumerate() {
        assert_eq!(dev["device"], format!("cuda:{d}"));
        assert_eq!(dev["peak"]["allocated_bytes"], 1024 * (d as u64 + 1));
    }
}

#[test]
fn huge_device_ordinal_does_not_hang() {
    let r = report("snapshot_huge_device_ordinal.pkl");
    assert_eq!(r["devices"][0]["device"], "cuda:1152921504606846976");
}

// ---- Chrome traces ----------------------------------------------------------------------

const CUT_WARNING: &str = "input is truncated: loaded 4 complete events from the first 928 of 1087 bytes; the last event is incomplete";

#[test]
fn chrome_cut_mid_event_reports_the_prefix_with_a_warning() {
    let out = memcut()
        .args(["analyze", "--format", "json", "chrome_cut_mid_event.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("memcut: warning: chrome_cut_mid_event.json: {CUT_WARNING}\n")
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    // 3 memory events before the cut: 512 + 1024 live, then 512 freed.
    assert_eq!(r["devices"][0]["events"], 3);
    assert_eq!(peak(&r, 0), 1536);
    let d = r["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["message"] == CUT_WARNING)
        .unwrap();
    assert_eq!(d["partial_read"], true);
}

#[test]
fn chrome_cut_mid_event_fails_under_strict() {
    let out = memcut()
        .args([
            "analyze",
            "--strict",
            "--format",
            "json",
            "chrome_cut_mid_event.json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("memcut: warning: chrome_cut_mid_event.json: {CUT_WARNING}\n")
    );
}

#[test]
fn chrome_unterminated_string() {
    fails_with(
        "chrome_unterminated_string.json",
        "bad JSON: no memory event could be read: input is truncated: loaded 0 complete events from the first 17 of 45 bytes; the last event is incomplete",
    );
}

#[test]
fn chrome_nan_total() {
    let r = report("chrome_nan_total.json");
    assert_eq!(peak(&r, 0), 1536);
    has(
        &r,
        "info",
        "replaced 1 non-JSON number token(s) (NaN/Infinity/N/A) with null",
    );
}

#[test]
fn chrome_deeply_nested_event() {
    // 100 000 nested arrays inside one event: skipped without recursion.
    fails_with(
        "chrome_deeply_nested.json.gz",
        "no memory events; record with torch.profiler.profile(profile_memory=True)",
    );
}

#[test]
fn fuzz_chrome_two_cpu_devices_are_one() {
    // Found by `cargo fuzz run chrome`: `Device Id: -1` and no `Device Id`
    // both name the CPU; they used to make two devices called `cpu`.
    let r = report("fuzz_chrome_two_cpu_devices.json");
    let devices = r["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["device"], "cpu");
}

#[test]
fn fuzz_chrome_size_over_i64_is_clamped_not_overflowed() {
    // Found by `cargo fuzz run chrome`: a free of `Bytes: -2**63` made a
    // 2**63-byte baseline interval, and negating it overflowed (a panic in
    // debug builds, a wrong curve in release).
    let out = memcut()
        .args([
            "analyze",
            "--format",
            "json",
            "fuzz_chrome_size_over_i64.json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // The damage is said on stderr too (issue 14: a file claiming 256 TiB
    // used to exit 0 silently when the report went to a file).
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in [
        "memcut: warning: fuzz_chrome_size_over_i64.json: skipped 9 malformed event(s) (first: expected `:` at byte 41)\n",
        "memcut: warning: fuzz_chrome_size_over_i64.json: unknown:0: 1 allocations claim more than 281474976710656 bytes (256 TiB): the file is damaged; counted as 281474976710656 bytes each\n",
    ] {
        assert!(stderr.contains(line), "{stderr}");
    }
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    has(
        &r,
        "warning",
        "unknown:0: 1 allocations claim more than 281474976710656 bytes (256 TiB): the file is damaged; counted as 281474976710656 bytes each",
    );
}

#[test]
fn chrome_totals_over_256tib_are_clamped_with_a_warning() {
    // The shape `cargo fuzz run chrome` found: totals no allocator reports
    // were taken as they were (a 16 EiB peak), and summing the devices'
    // peaks overflowed (a panic in debug builds).
    let file = "chrome_totals_over_256tib.json";
    let r = report(file);
    for (d, device) in ["cuda:0", "cuda:1"].iter().enumerate() {
        assert_eq!(r["devices"][d]["device"], *device);
        assert_eq!(peak(&r, d), 1 << 48);
        for what in ["Total Allocated", "Total Reserved"] {
            has(
                &r,
                "warning",
                &format!("{device}: 1 memory events report a `{what}` above 281474976710656 bytes (256 TiB): the file is damaged; counted as 281474976710656 bytes"),
            );
        }
    }
}

#[test]
fn fuzz_chrome_html_ticks_end() {
    // Found by `cargo fuzz run chrome`: three memory events whose active
    // stretches of the time axis have no length gave the HTML chart the
    // smallest step there is, and its tick loop never ended (a hang in
    // release builds, an overflow panic in debug ones). Every format ends
    // now, within `memcut()`'s timeout.
    let file = "fuzz_chrome_html_ticks_hang.json";
    for format in ["html", "md", "text", "json"] {
        let out = memcut()
            .args(["analyze", "--format", format, file])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{format}");
    }
    let out = memcut()
        .args(["analyze", "--format", "html", file])
        .output()
        .unwrap();
    let html = String::from_utf8_lossy(&out.stdout);
    assert!(
        html.contains("<svg") && html.trim_end().ends_with("</html>"),
        "{html}"
    );
}

#[test]
fn chrome_events_that_never_balance_do_not_cost_quadratic_time() {
    // 600 000 events like `{"a":[}`: each scan for an event's end used to run
    // to the end of the file (minutes for 5 MB). Recovery now bounds its
    // re-scanning and says where it stopped.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("unbalanced.json");
    let mut text = String::from("[");
    for _ in 0..600_000 {
        text.push_str("{\"a\":[}, ");
    }
    std::fs::write(&file, text).unwrap();
    let start = std::time::Instant::now();
    let out = memcut().arg("analyze").arg(&file).output().unwrap();
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!(
            "memcut: error: {}: bad JSON: no memory event could be read: input is damaged: stopped reading at byte ",
            file.display()
        )),
        "{stderr}"
    );
}

#[test]
fn fuzz_snapshot_self_keyed_entry() {
    // Found by `cargo fuzz run analyze`: a trace entry dict that is its own
    // key leaked when the lowering hook replaced it. The entry's action is
    // unknown, so it is skipped and counted.
    let r = report("fuzz_snapshot_self_keyed_entry_leak.pkl");
    assert_eq!(r["devices"][0]["device"], "cuda:0");
    has(&r, "info", "1 trace entries with action `oK\u{0}` skipped");
}

#[test]
fn trace_entry_in_a_frames_list_is_refused_not_a_panic() {
    // Issue 12: the skipped entry's handle was once read as site 2^30 - 1.
    for file in [
        "snapshot_entry_in_frames.pkl",
        "snapshot_entry_in_frames_after_a_frame.pkl",
    ] {
        fails_with(
            file,
            "not a PyTorch memory snapshot: a `frames` list holds a trace entry (a dict with an `action`), not a frame",
        );
    }
}
