//! Damaged input: token repair, truncation, broken events, and inputs
//! that must fail cleanly.

use super::{basic_events, has_warning, obj, parse, recovered, site_names};
use crate::error::Error;
use crate::formats::chrome::parse_chrome_trace;
use crate::model::Level;

#[test]
fn truncated_array_without_bracket() {
    let s = format!("[{},\n", basic_events().join(",\n"));
    let t = parse(&s);
    assert_eq!(t.devices[0].events.len(), 2);
    assert_eq!(t.devices[1].events.len(), 1);
    assert!(has_warning(&t, "no closing `]`"), "{:?}", t.diagnostics);
    assert!(has_warning(&t, "6 complete events"), "{:?}", t.diagnostics);
}

#[test]
fn truncated_array_half_written_event() {
    let full = format!("[{}", basic_events().join(","));
    let cut = &full[..full.len() - 30];
    let t = parse(cut);
    // The CPU alloc (last event) is cut off.
    assert_eq!(t.devices.len(), 1);
    assert_eq!(t.devices[0].events.len(), 2);
    assert!(
        has_warning(&t, "last event is incomplete"),
        "{:?}",
        t.diagnostics
    );
    assert!(has_warning(&t, "5 complete events"), "{:?}", t.diagnostics);
}

#[test]
fn truncated_object_form() {
    let full = obj(&basic_events());
    let cut = &full[..full.find("],\"traceName\"").unwrap() - 10];
    let t = parse(cut);
    assert_eq!(t.devices[0].device, "cuda:0");
    assert_eq!(t.devices[0].capacity_bytes, Some(85899345920));
    assert_eq!(t.devices[0].events.len(), 2);
    assert!(has_warning(&t, "truncated"));
    // Cut inside deviceProperties: nothing usable.
    let early = &full[..40];
    assert!(matches!(
        parse_chrome_trace(early.as_bytes()),
        Err(Error::Json(_))
    ));
}

#[test]
fn trailing_comma() {
    let s = format!("[{},]", basic_events().join(","));
    let t = parse(&s);
    assert_eq!(t.devices[0].events.len(), 2);
    assert!(t
        .diagnostics
        .iter()
        .any(|d| d.message.contains("trailing comma")));
    assert!(!t.diagnostics.iter().any(|d| d.level == Level::Warning));
}

#[test]
fn invalid_number_tokens() {
    let s = r#"{"traceEvents":[
      {"ph":"X","cat":"gpu_memcpy","name":"Memcpy","pid":0,"tid":7,"ts":1,"dur":0,"args":{"memory bandwidth (GB/s)": inf, "a": -Infinity, "b": NaN, "c": nan, "d": N/A, "e": Infinity}},
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":5,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":4096,"Total Allocated":512,"Total Reserved":NaN}},
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":6,"args":{"Device Type":1,"Device Id":0,"Bytes":-512,"Addr":4096,"Total Allocated":0,"Total Reserved":-inf, "note":"NaN inside a string stays"}}
    ]}"#;
    let t = parse(s);
    let d = &t.devices[0];
    assert_eq!(d.events.len(), 2);
    assert_eq!(d.reported[0].allocated, Some(512));
    assert_eq!(d.reported[0].reserved, None);
    assert_eq!(d.reported[1].reserved, None);
    assert!(
        t.diagnostics
            .iter()
            .any(|x| x.message.contains("8 non-JSON")),
        "{:?}",
        t.diagnostics
    );
}

#[test]
fn empty_and_trivial_inputs_do_not_panic() {
    for s in [
        "",
        "   ",
        "{}",
        "[]",
        "{\"traceEvents\":[]}",
        "{\"traceEvents\":null}",
        "[1,2,\"x\"]",
        "null",
        "42",
        "\"str\"",
        "{\"a\":[1,2",
        "[",
        "{",
        "[{",
        "}{",
        "garbage",
        "{\"traceEvents\":{}}",
        "\u{feff}[]",
    ] {
        match parse_chrome_trace(s.as_bytes()) {
            Err(Error::NoMemoryEvents) | Err(Error::Json(_)) => {}
            other => panic!("{s:?}: {other:?}"),
        }
    }
    assert!(matches!(
        parse_chrome_trace(b"{}"),
        Err(Error::NoMemoryEvents)
    ));
    assert!(matches!(
        parse_chrome_trace(b"[]"),
        Err(Error::NoMemoryEvents)
    ));
    match parse_chrome_trace(b"garbage") {
        Err(Error::Json(m)) => assert!(m.contains("at byte 0"), "{m}"),
        other => panic!("{other:?}"),
    }
    match parse_chrome_trace(b"{\"a\": 1, \"b\" 2}") {
        Err(Error::Json(m)) => assert!(m.contains("at byte 13"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_prefix_is_handled_without_panic() {
    let full = obj(&basic_events());
    for cut in 0..=full.len() {
        let r = parse_chrome_trace(&full.as_bytes()[..cut]);
        match r {
            Ok(t) => assert!(t.devices.iter().map(|d| d.events.len()).sum::<usize>() >= 1),
            Err(Error::NoMemoryEvents) | Err(Error::Json(_)) => {}
            Err(e) => panic!("prefix {cut}: {e}"),
        }
    }
    let full = format!("[{}]", basic_events().join(","));
    for cut in 0..=full.len() {
        let _ = parse_chrome_trace(&full.as_bytes()[..cut]);
    }
}

#[test]
fn control_characters_in_strings() {
    let s = "[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"a\tb\nc\u{1}\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":10},\
             {\"ph\":\"i\",\"name\":\"[memory]\",\"pid\":1,\"tid\":1,\"ts\":5,\"args\":{\"Device Type\":1,\"Device Id\":0,\"Bytes\":8,\"Addr\":1}}]";
    let t = parse(s);
    assert_eq!(
        site_names(&t, t.devices[0].events[0].site),
        ["cpu_op:a\tb\nc\u{1}"]
    );
    assert!(t
        .diagnostics
        .iter()
        .any(|d| d.message.contains("control character")));
}

#[test]
fn broken_event_is_skipped() {
    // An unescaped quote inside a name (pytorch/pytorch#146900).
    let s = r#"[
      {"ph":"X","cat":"cpu_op","name":"bad "quoted" name","pid":1,"tid":1,"ts":0,"dur":10},
      {"ph":"X","cat":"cpu_op","name":"odd " quote","pid":1,"tid":1,"ts":0,"dur":10},
      {"ph":"X","cat":"cpu_op","name":"good","pid":1,"tid":1,"ts":0,"dur":10},
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":5,"args":{"Device Type":1,"Device Id":0,"Bytes":8,"Addr":1}}
    ]"#;
    let t = parse(s);
    assert_eq!(t.devices[0].events.len(), 1);
    assert_eq!(site_names(&t, t.devices[0].events[0].site), ["cpu_op:good"]);
    assert!(
        has_warning(&t, "skipped 2 malformed"),
        "{:?}",
        t.diagnostics
    );
}

#[test]
fn truncated_and_repaired_events_combined() {
    // A cut-off file whose events also need token repair: the recovery
    // pass repairs events one at a time.
    let s = "[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"op\ttab\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":10,\"args\":{\"bw\":inf}},\n\
             {\"ph\":\"i\",\"name\":\"[memory]\",\"pid\":1,\"tid\":1,\"ts\":5,\"args\":{\"Device Type\":1,\"Device Id\":0,\"Bytes\":8,\"Addr\":1,\"Total Reserved\":NaN}},\n\
             {\"ph\":\"i\",\"name\":\"[mem";
    let t = parse(s);
    assert_eq!(t.devices[0].events.len(), 1);
    assert_eq!(
        site_names(&t, t.devices[0].events[0].site),
        ["cpu_op:op\ttab"]
    );
    assert!(has_warning(&t, "2 complete events"), "{:?}", t.diagnostics);
    assert!(t
        .diagnostics
        .iter()
        .any(|d| d.message.contains("2 non-JSON")));
    // NUL padding after a complete file.
    let mut padded = obj(&basic_events()).into_bytes();
    padded.extend_from_slice(&[0; 64]);
    let t = parse_chrome_trace(&padded).unwrap();
    assert_eq!(t.devices[0].events.len(), 2);
    assert!(t.diagnostics.iter().any(|d| d.message.contains("NUL")));
}

/// The fast path and the recovery pass feed the same collector: on a valid
/// trace they must give the same `Trace` (the oracle for any further
/// reader, such as a streaming scanner).
#[test]
fn recovery_reads_a_valid_trace_like_the_fast_path() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces/train_adamw.trace.json.gz");
    let bytes = crate::test_support::read_maybe_gz(&path);
    let fast = parse_chrome_trace(&bytes).unwrap();
    assert!(fast.devices[0].events.len() > 1000);
    assert_eq!(recovered(&bytes), fast);
}
