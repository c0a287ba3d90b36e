//! The Chrome-trace reader end to end: small traces written inline, read
//! with [`parse_chrome_trace`], checked on the [`Trace`] they give.

mod attribution;
mod corpus;
mod recovery;
mod streaming;

use super::build::build_trace;
use super::parse_chrome_trace;
use super::recover::recover;
use crate::formats::json_repair::JsonErrorAt;
use crate::model::{Action, Format, Level, ReportedTotals, Trace};

pub(super) fn mem(tid: i64, ts: f64, bytes: i64, addr: u64, dtype: i64, did: i64) -> String {
    format!(
        r#"{{"ph":"i","cat":"cpu_instant_event","s":"t","name":"[memory]","pid":1,"tid":{tid},"ts":{ts},"args":{{"Total Reserved":4096,"Total Allocated":{},"Bytes":{bytes},"Device Id":{did},"Device Type":{dtype},"Addr":{addr}}}}}"#,
        bytes.max(0)
    )
}

pub(super) fn op(tid: i64, cat: &str, name: &str, ts: f64, dur: f64) -> String {
    format!(
        r#"{{"ph":"X","cat":"{cat}","name":"{name}","pid":1,"tid":{tid},"ts":{ts},"dur":{dur},"args":{{"External id":7}}}}"#
    )
}

pub(super) fn obj(events: &[String]) -> String {
    format!(
        r#"{{"schemaVersion":1,"deviceProperties":[{{"id":0,"name":"NVIDIA H100","totalGlobalMem":85899345920}}],"traceEvents":[{}],"traceName":"x"}}"#,
        events.join(",\n")
    )
}

pub(super) fn parse(s: &str) -> Trace {
    match parse_chrome_trace(s.as_bytes()) {
        Ok(t) => t,
        Err(e) => panic!("parse failed: {e}\n{s}"),
    }
}

pub(super) fn site_names(t: &Trace, site: u32) -> Vec<String> {
    t.sites
        .frames(site)
        .iter()
        .map(|f| format!("{}:{}", t.sites.str(f.filename), t.sites.str(f.name)))
        .collect()
}

pub(super) fn has_warning(t: &Trace, needle: &str) -> bool {
    t.diagnostics
        .iter()
        .any(|d| d.level == Level::Warning && d.message.contains(needle))
}

pub(super) fn basic_events() -> Vec<String> {
    vec![
        op(10, "user_annotation", "ProfilerStep#1", 0.0, 100.0),
        op(10, "cpu_op", "aten::linear", 10.0, 20.0),
        op(10, "cpu_op", "aten::addmm", 12.0, 5.0),
        mem(10, 13.0, 512, 0x1000, 1, 0),
        mem(10, 25.0, -512, 0x1000, 1, 0),
        mem(10, 50.0, 64, 0x2000, 0, -1),
    ]
}

/// The trace the recovery pass reads from `bytes` (as if the fast path had
/// failed).
pub(super) fn recovered(bytes: &[u8]) -> Trace {
    let unused = JsonErrorAt {
        message: "unused".into(),
        offset: 0,
    };
    let mut diagnostics = Vec::new();
    let col = recover(bytes, &unused, &mut diagnostics).unwrap();
    build_trace(col, diagnostics).unwrap()
}

#[test]
fn object_form() {
    let t = parse(&obj(&basic_events()));
    assert_eq!(t.format, Format::ChromeTrace);
    let names: Vec<_> = t.devices.iter().map(|d| d.device.as_str()).collect();
    assert_eq!(names, ["cuda:0", "cpu"]);
    let gpu = &t.devices[0];
    assert_eq!(gpu.capacity_bytes, Some(85899345920));
    assert_eq!(gpu.events.len(), 2);
    assert_eq!(gpu.events[0].action, Action::Alloc);
    assert_eq!(gpu.events[0].size, 512);
    assert_eq!(gpu.events[0].addr, 0x1000);
    assert_eq!(gpu.events[0].ts_us, 13.0);
    assert_eq!(gpu.events[1].action, Action::FreeCompleted);
    assert_eq!(gpu.events[1].size, 512);
    assert_eq!(
        site_names(&t, gpu.events[0].site),
        [
            "cpu_op:aten::addmm",
            "cpu_op:aten::linear",
            "user_annotation:ProfilerStep#1"
        ]
    );
    assert_eq!(
        site_names(&t, gpu.events[1].site),
        ["cpu_op:aten::linear", "user_annotation:ProfilerStep#1"]
    );
    assert_eq!(gpu.reported.len(), 2);
    assert_eq!(
        gpu.reported[0],
        ReportedTotals {
            allocated: Some(512),
            reserved: Some(4096)
        }
    );
    assert_eq!(t.devices[1].capacity_bytes, None);
    assert_eq!(t.annotations.len(), 1);
    assert_eq!(t.annotations[0].name, "ProfilerStep#1");
    assert_eq!(
        (t.annotations[0].start_us, t.annotations[0].end_us),
        (0.0, 100.0)
    );
    assert!(!t.diagnostics.iter().any(|d| d.level == Level::Warning));
}

#[test]
fn array_form() {
    let s = format!("[{}]", basic_events().join(","));
    let t = parse(&s);
    assert_eq!(t.devices.len(), 2);
    assert_eq!(t.devices[0].capacity_bytes, None);
    assert_eq!(t.devices[0].events.len(), 2);
}

#[test]
fn string_pid_tid_and_ts() {
    let s = r#"[
      {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":"7","tid":"stream 7","ts":"100.500","dur":"10"},
      {"ph":"i","name":"[memory]","pid":7,"tid":"stream 7","ts":"105.250","args":{"Device Type":"1","Device Id":"2","Bytes":"1024","Addr":"8192"}},
      {"ph":"i","name":"[memory]","pid":"7","tid":"other","ts":106,"args":{"Device Type":1,"Device Id":2,"Bytes":1024,"Addr":9000}}
    ]"#;
    let t = parse(s);
    let d = &t.devices[0];
    assert_eq!(d.device, "cuda:2");
    assert_eq!(d.events[0].ts_us, 105.25);
    assert_eq!(d.events[0].size, 1024);
    assert_eq!(d.events[0].addr, 8192);
    assert_eq!(site_names(&t, d.events[0].site), ["cpu_op:aten::mm"]);
    assert_eq!(d.events[1].site, 0);
    assert!(d.reported.is_empty());
}

#[test]
fn integers_above_i64_and_u64() {
    let s = r#"{"traceEvents":[
      {"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":1,"ts":100,"dur":50,"args":{"Comms Id":18446744073709551615, "Huge": 123456789012345678901234567890}},
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":120,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":18446744073709551615,"Ev Idx":99999999999999999999999}}
    ]}"#;
    let t = parse(s);
    let d = &t.devices[0];
    assert_eq!(d.events[0].addr, u64::MAX);
    assert_eq!(
        site_names(&t, d.events[0].site),
        ["cpu_op:record_param_comms"]
    );
}

#[test]
fn devices_are_named_and_ordered() {
    let events = vec![
        mem(1, 1.0, 512, 1, 0, -1),
        mem(1, 2.0, 512, 2, 19, 2),
        mem(1, 3.0, 512, 3, 1, 1),
        mem(1, 4.0, 512, 4, 6, 0),
        mem(1, 5.0, 512, 5, 42, 0),
        mem(1, 6.0, 512, 6, 1, 0),
        mem(1, 7.0, 512, 7, 12, 0),
    ];
    let t = parse(&obj(&events));
    let names: Vec<_> = t.devices.iter().map(|d| d.device.as_str()).collect();
    assert_eq!(
        names,
        ["cuda:0", "hip:0", "cuda:1", "xpu:0", "mtia:2", "type42:0", "cpu"]
    );
    assert_eq!(t.devices[0].capacity_bytes, Some(85899345920));
    assert_eq!(t.devices[1].capacity_bytes, Some(85899345920));
    assert_eq!(t.devices[2].capacity_bytes, None);
}

#[test]
fn rocm_hint_for_cuda_devices() {
    let s = r#"{"deviceProperties":[{"id":0,"name":"AMD Instinct MI300X","totalGlobalMem":1000}],
      "traceEvents":[{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":1}}]}"#;
    let t = parse(s);
    assert_eq!(t.devices[0].device, "cuda:0");
    assert_eq!(t.devices[0].capacity_bytes, Some(1000));
    assert!(t.diagnostics.iter().any(|d| d.message.contains("ROCm")));
    let s = r#"{"traceEvents":[{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":1}}],"roctracer_version":4}"#;
    assert!(parse(s)
        .diagnostics
        .iter()
        .any(|d| d.message.contains("ROCm")));
}

#[test]
fn totals_are_carried_and_cpu_reserved_zero_is_kept() {
    let s = r#"[
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Device Type":0,"Device Id":-1,"Bytes":16,"Addr":1,"Total Allocated":16,"Total Reserved":0}},
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":2,"args":{"Device Type":0,"Device Id":-1,"Bytes":-16,"Addr":1,"Total Allocated":0,"Total Reserved":0}}
    ]"#;
    let t = parse(s);
    let d = &t.devices[0];
    assert_eq!(d.device, "cpu");
    assert_eq!(
        d.reported,
        [
            ReportedTotals {
                allocated: Some(16),
                reserved: Some(0)
            },
            ReportedTotals {
                allocated: Some(0),
                reserved: Some(0)
            }
        ]
    );
}

#[test]
fn legacy_schema_without_addr_or_totals() {
    let s = r#"{"schemaVersion":1,"traceEvents":[
      {"ph":"X","cat":"Operator","name":"aten::conv2d","pid":9,"tid":9,"ts":1623142623460100,"dur":200},
      {"ph":"X","cat":"Operator","name":"ProfilerStep#3","pid":9,"tid":9,"ts":1623142623460000,"dur":1000},
      {"ph":"i","s":"t","name":"[memory]","pid":9,"tid":9,"ts":1623142623460121,"args":{"Device Type":0,"Device Id":-1,"Bytes":4}},
      {"ph":"i","s":"t","name":"[memory]","pid":9,"tid":9,"ts":1623142623460121,"args":{"Device Type":0,"Device Id":-1,"Bytes":4}},
      {"ph":"i","s":"t","name":"[memory]","pid":9,"tid":9,"ts":1623142623460199,"args":{"Device Type":0,"Device Id":-1,"Bytes":-4}}
    ]}"#;
    let t = parse(s);
    let d = &t.devices[0];
    // Identical events without `Ev Idx` are not deduplicated.
    assert_eq!(d.events.len(), 3);
    assert_eq!(d.events[0].addr, 0);
    assert_eq!(d.events[0].ts_us, 1623142623460121.0);
    assert!(d.reported.is_empty());
    assert_eq!(
        site_names(&t, d.events[0].site),
        ["cpu_op:aten::conv2d", "cpu_op:ProfilerStep#3"]
    );
    assert_eq!(t.annotations[0].name, "ProfilerStep#3");
    assert!(has_warning(&t, "no `Addr`"));
    assert!(t
        .diagnostics
        .iter()
        .any(|x| x.message.contains("no `Total Allocated`")));
}

#[test]
fn duplicates_are_removed() {
    let e = r#"{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":5,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":4096,"Ev Idx":3}}"#;
    let f = r#"{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":5,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":4096,"Ev Idx":4}}"#;
    let t = parse(&format!("[{e},{e},{f},{e}]"));
    assert_eq!(t.devices[0].events.len(), 2);
    assert!(has_warning(&t, "removed 2 duplicate"));
}

#[test]
fn out_of_memory_event() {
    let s = r#"[
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":1}},
      {"ph":"i","cat":"cpu_instant_event","name":"[OutOfMemory]","pid":1,"tid":1,"ts":2,"args":{"Device Type":1,"Device Id":0,"Bytes":1073741824,"Total Allocated":512,"Total Reserved":2097152}}
    ]"#;
    let t = parse(s);
    let ev = &t.devices[0].events;
    assert_eq!(ev[1].action, Action::Oom);
    assert_eq!(ev[1].size, 1 << 30);
    assert_eq!(t.devices[0].reported[1].reserved, Some(2097152));
    // An OOM has no Addr: no legacy-schema warning for it.
    assert!(!has_warning(&t, "no `Addr`"));
}

#[test]
fn events_sorted_by_time_stably() {
    let events = vec![
        mem(1, 30.0, 512, 3, 1, 0),
        mem(2, 10.0, 512, 1, 1, 0),
        mem(1, 20.0, 512, 2, 1, 0),
        mem(2, 20.0, -512, 2, 1, 0),
    ];
    let t = parse(&obj(&events));
    let order: Vec<_> = t.devices[0]
        .events
        .iter()
        .map(|e| (e.ts_us, e.addr))
        .collect();
    assert_eq!(order, [(10.0, 1), (20.0, 2), (20.0, 2), (30.0, 3)]);
    assert_eq!(t.devices[0].events[1].action, Action::Alloc);
    assert_eq!(t.devices[0].events[2].action, Action::FreeCompleted);
}

/// Kineto's `distributedInfo` gives the trace's rank (fast path and
/// recovery alike); anything else there is ignored, never an error.
#[test]
fn distributed_info_gives_the_rank() {
    let with = |info: &str| {
        obj(&basic_events()).replacen(
            r#""traceName":"x""#,
            &format!(r#""distributedInfo":{info},"traceName":"x""#),
            1,
        )
    };
    let info = r#"{"backend":"nccl","rank":3,"world_size":8,"pg_count":1,"pg_config":[{"pg_name":"0","ranks":[0,1,2,3,4,5,6,7]}]}"#;
    let t = parse(&with(info));
    assert_eq!(t.distributed, crate::model::Distributed::new(3, 8));
    assert!(t.distributed.is_some());
    // Recovery (a truncated file whose distributedInfo comes first).
    let front = obj(&basic_events()).replacen(
        r#"{"schemaVersion":1,"#,
        &format!(r#"{{"schemaVersion":1,"distributedInfo":{info},"#),
        1,
    );
    let cut = &front[..front.len() - 40];
    assert_eq!(recovered(cut.as_bytes()).distributed, t.distributed);
    for odd in [
        r#""rank 3""#,
        "null",
        "[3, 8]",
        r#"{"rank":8,"world_size":8}"#,
        r#"{"rank":-1,"world_size":8}"#,
        r#"{"world_size":8}"#,
        r#"{"rank":"3","world_size":1e99}"#,
    ] {
        let t = parse(&with(odd));
        assert_eq!(t.distributed, None, "{odd}");
        assert_eq!(t.devices[0].events.len(), 2, "{odd}");
    }
    assert_eq!(parse(&obj(&basic_events())).distributed, None);
}
