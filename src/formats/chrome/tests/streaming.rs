//! The streaming reader (`stream.rs`) against the whole-buffer path: on
//! every sample, broken and corpus trace, read through buffers of several
//! sizes (tiny ones stitch almost every item), it gives the same trace or
//! the same error, or declines (and the caller reads the file whole). The
//! benchmark shapes must not decline.

use std::io::BufReader;
use std::path::{Path, PathBuf};

use super::super::parse_chrome_trace;
use super::super::split::{element_start_near, read_parts, read_tail_at, read_tail_near, told};
use super::super::stream::{read_counted, Counts, Head, NUMBERS};
use crate::test_support::corpus_dir;

/// The whole-buffer result, as the plain path gives it for a Chrome trace
/// (`input.rs` skips a byte order mark and whitespace, and hands an
/// object with a `traceEvents` key, the only kind streamed, to
/// [`parse_chrome_trace`]).
fn whole(bytes: &[u8]) -> String {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    match parse_chrome_trace(&bytes[start..]) {
        Ok(trace) => format!("{trace:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Streams `bytes` through buffers of each size; every read that does not
/// decline must give what the whole read gives. The counts of the
/// largest buffer, `None` if it declined.
fn same_streamed(bytes: &[u8], sizes: &[usize], what: &str) -> Option<Counts> {
    let want = whole(bytes);
    let mut counts = None;
    for &size in sizes {
        let mut reader = BufReader::with_capacity(size, bytes);
        let got = read_counted(&mut reader).map(|(r, c)| {
            let shown = match r {
                Ok(trace) => format!("{trace:?}"),
                Err(e) => format!("error: {}", crate::error::Error::from(e)),
            };
            (shown, c)
        });
        if let Some((got, c)) = got {
            assert!(
                got == want,
                "{what}, buffers of {size}: streamed differs:\n{got:.400}\nwhole:\n{want:.400}"
            );
            counts = Some(c);
        } else {
            counts = None;
        }
    }
    counts
}

/// Reads `bytes` on two threads (`split.rs`) with the second one starting
/// at the element start guessed near the middle, and at offsets a third
/// and two thirds in (mostly not element starts): each read gives the
/// streaming reader's result, or declines with it. Whether the middle
/// guess was an element start (`None`: nothing to guess, or declined).
fn same_split(bytes: &[u8], what: &str) -> Option<Head> {
    let shown = |r: Option<(Result<crate::model::Trace, super::super::ReadError>, Counts)>| {
        r.map(|(r, c)| match r {
            Ok(trace) => format!("{trace:?} {c:?}"),
            Err(e) => format!("error: {} {c:?}", crate::error::Error::from(e)),
        })
    };
    let want = shown(read_counted(&mut BufReader::with_capacity(1 << 20, bytes)));
    let mid = bytes.len() / 2;
    let check = |split: Option<(
        Result<crate::model::Trace, super::super::ReadError>,
        Counts,
        Head,
    )>,
                 at: &str| {
        let head = split.as_ref().map(|s| s.2);
        let got = shown(split.map(|(t, c, _)| (t, c)));
        assert!(
            got == want,
            "{what}, split at {at}: differs:\n{got:.400?}\nstreamed:\n{want:.400?}"
        );
        head
    };
    // The middle guess is told before the threads start: else the first
    // one may read a small input to its end before the second has told it.
    let guess = element_start_near(&bytes[mid..bytes.len().min(mid + (1 << 20))]).map(|k| mid + k);
    let head = guess.and_then(|at| {
        check(
            read_parts(&mut &bytes[..], told(Some(at as u64)), |m| {
                read_tail_near(&mut &bytes[mid..], mid as u64, m)
            }),
            "the middle",
        )
    });
    for at in [bytes.len() / 3, bytes.len() * 2 / 3] {
        check(
            read_parts(&mut &bytes[..], told(Some(at as u64)), |m| {
                read_tail_at(&mut &bytes[at..], at as u64, m)
            }),
            &at.to_string(),
        );
    }
    head
}

/// The inflated bytes of a gzip file that inflates, else the file's bytes.
fn inflated(path: &Path) -> Vec<u8> {
    use std::io::Read;
    let raw = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    match flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out) {
        Ok(_) if raw.starts_with(&[0x1f, 0x8b]) => out,
        _ => raw,
    }
}

fn files(pattern: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = glob::glob(pattern).unwrap().map(|p| p.unwrap()).collect();
    out.sort();
    out
}

fn repo(rel: &str) -> String {
    format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn streaming_gives_the_whole_read_on_samples_and_broken_inputs() {
    let mut read = 0;
    let mut split = 0;
    let paths = [
        files(&repo("sample_traces/*.json.gz")),
        files(&repo("sample_traces/matrix/*.trace.json.gz")),
        files(&repo("tests/data/broken/*")),
    ];
    for path in paths.iter().flatten() {
        let bytes = inflated(path);
        let what = path.display().to_string();
        if same_streamed(&bytes, &[7, 4099, 1 << 20], &what).is_some() {
            read += 1;
        }
        if same_split(&bytes, &what) == Some(Head::Reached) {
            split += 1;
        }
    }
    assert!(read > 20, "only {read} inputs streamed");
    assert!(split > 20, "only {split} inputs split at their middle");
}

/// Damage the whole read repairs or recovers from is declined, never read
/// differently: each of these edits makes the stream decline.
#[test]
fn damaged_json_is_declined() {
    let good = super::obj(&super::basic_events());
    assert!(same_streamed(good.as_bytes(), &[5, 1 << 16], "good").is_some());
    let edits: &[(&str, &str)] = &[
        (r#""Total Reserved":4096"#, r#""Total Reserved":NaN"#),
        (r#""Total Reserved":4096"#, r#""Total Reserved":Infinity"#),
        (r#""name":"aten::linear""#, "\"name\":\"aten::\tlinear\""),
        (r#""External id":7}"#, r#""External id":7,}"#),
        (r#""traceName":"x"}"#, r#""traceName":"x"}garbage"#),
        (r#""traceName":"x"}"#, r#""traceName":"x""#),
        (r#""External id":7"#, r#""External id":07"#),
        (r#""External id":7"#, r#""External id":"\x""#),
        (r#""ts":13"#, r#""ts":1e999"#),
    ];
    for (from, to) in edits {
        assert!(good.contains(from), "{from}");
        let bad = good.replacen(from, to, 1);
        for size in [5, 1 << 16] {
            let mut reader = BufReader::with_capacity(size, bad.as_bytes());
            assert!(
                read_counted(&mut reader).is_none(),
                "{to}: streamed, buffers of {size}"
            );
        }
        same_streamed(bad.as_bytes(), &[5, 1 << 16], to);
    }
}

/// Values the hand-written event reader leaves to `serde_json` (numbers
/// where names belong, escaped keys and names, float ids, nested args)
/// read as the whole read reads them.
#[test]
fn unusual_events_read_as_the_whole_read_reads_them() {
    let mut events = super::basic_events();
    events.extend([
        r#"{"ph":"X","cat":"cpu_op","name":5,"pid":1.0,"tid":"10","ts":"14.5","dur":1,"args":[]}"#.to_string(),
        r#"{"ph":"X","cat":"cpu_op","n\u0061me":"aten::mm","pid":1,"tid":10,"ts":15,"dur":1}"#.to_string(),
        r#"{"ph":"X","cat":"cpu_op","name":"aten::\"q\"\u00e9","pid":1,"tid":10,"ts":16,"dur":1}"#.to_string(),
        r#"{"ph":"X","cat":"cpu_op","name":"aten::linear","pid":1,"tid":10,"ts":17,"dur":1,"args":{"Input Dims":[[2,3],[4,3],[]],"Input type":["float","c10::BFloat16",""]}}"#.to_string(),
        r#"{"ph":"i","name":"[memory]","pid":1,"tid":10,"ts":18,"args":{"Bytes":"64","Addr":18446744073709551615,"Device Type":1,"Device Id":0,"Ev Idx":null,"x":{"a":[1,{"b":[true,false,null,-1.5e3]}]}}}"#.to_string(),
        r#"[1,2]"#.to_string(),
        r#""not an event""#.to_string(),
        r#"{}"#.to_string(),
        r###"{"ph":"B","cat":"user_annotation","name":"## f ##","pid":"p","tid":"t","ts":19}"###.to_string(),
        r#"{"ph":"E","pid":"p","tid":"t","ts":21}"#.to_string(),
        r#"{"ph":"i","name":"[memory]","pid":1,"tid":10,"ts":-0,"args":{"Bytes":8,"Device Type":1,"Device Id":0}}"#.to_string(),
    ]);
    let text = super::obj(&events);
    let counts = same_streamed(text.as_bytes(), &[3, 64, 1 << 16], "unusual").expect("streamed");
    assert!(counts.by_serde >= 4, "{counts:?}");
}

/// The token paths of `stream/token.rs` end to end: numbers at the
/// limits of 64 bits and of the fast float path, `-0`, exponents, texts
/// with and without non-ASCII bytes, short and long, keys of unusual
/// lengths, indented and tab-separated whitespace.
#[test]
fn numbers_texts_and_keys_of_every_shape_read_as_the_whole_read_reads_them() {
    let mut events = super::basic_events();
    // The token tests' numbers that are JSON.
    let numbers = NUMBERS
        .iter()
        .filter(|n| serde_json::from_str::<serde_json::Value>(n).is_ok());
    for (k, n) in numbers.enumerate() {
        events.push(format!(
            r#"{{"ph":"i","name":"[memory]","pid":{n},"tid":10,"ts":{n},"args":{{"Bytes":{n},"Addr":{n},"Device Type":1,"Device Id":0,"Total Allocated":{n},"Ev Idx":{k}}}}}"#
        ));
        events.push(format!(
            r#"{{"ph":"X","cat":"cpu_op","name":"aten::op{k}","pid":1,"tid":{n},"ts":{n},"dur":{n}}}"#
        ));
    }
    events.extend([
        r#"{"ph":"X","cat":"cpu_op","name":"aten::größe_名前","pid":1,"tid":10,"ts":30,"dur":1,"args":{"Call stack":"/home/üser/a long path past sixteen bytes.py(1): f;/b.py(2): g","":1,"a":[],"A key longer than sixteen bytes, with ü":{"x":[1,2.5,-3e2,"y",null,true]}}}"#.to_string(),
        "{\n\t\"ph\" :\t\"i\" ,\r\n        \"name\":            \"[memory]\",\n                \"pid\": 1, \"tid\": 10, \"ts\": 31,\n  \"args\": {\"Bytes\": 64, \"Device Type\": 1, \"Device Id\": 0, \"Addr\": 12345678901234}\n}".to_string(),
        r#"{"ph":"X","cat":"cpu_op","name":"é","pid":"ü","tid":"10","ts":"32.5","dur":"1"}"#.to_string(),
    ]);
    let text = super::obj(&events);
    same_streamed(text.as_bytes(), &[3, 64, 4099, 1 << 16], "numbers").expect("streamed");
}

/// `record_shapes` inputs of the operator calls memcut reads them for,
/// in every shape the skeleton's `ArgsSeed` reads: dims of tensors,
/// nested lists, sizes as strings or floats or negative, `null`s, maps,
/// types that are not strings, args that are not an object, a key twice.
#[test]
fn operator_inputs_read_as_the_whole_read_reads_them() {
    let mut events = super::basic_events();
    let args = [
        r#"{"Input Dims":[[2,3],[4,3],[]],"Input type":["float","c10::BFloat16",""]}"#,
        r#"{"Input Dims":[[[1,2],[3]],[5,"6",7.0],[-1,2],[1.5],[null],null,{"a":1},"x",[]],"Input type":[null,1.5,true,[],"é"]}"#,
        r#"{"Input Dims":{"a":[1]},"Input type":"float"}"#,
        r#"{"Input Dims":7,"Input type":{"a":"b"},"Call stack":"f.py(1): g"}"#,
        r#"{"Input Dims":[[1]],"Input Dims":[[2,2]],"Input type":["a"],"Input type":["b","c"]}"#,
        r#"{"Input type":[1,2]}"#,
        r#"{"Input Dims":[[18446744073709551615, 9223372036854775808, 1e3]]}"#,
        "{\n  \"Input Dims\": [\n    [\n      64,\n      3\n    ],\n    []\n  ],\n  \"Input type\": [\n    \"float\",\n    \"Scalar\"\n  ]\n}",
        r#"{}"#,
        r#"[]"#,
        r#"null"#,
        r#""args""#,
        r#"{"Bytes":64,"Device Type":1}"#,
    ];
    for (k, a) in args.iter().enumerate() {
        let ts = 30 + k;
        events.push(format!(
            r#"{{"ph":"X","cat":"cpu_op","name":"aten::linear","pid":1,"tid":10,"ts":{ts},"dur":1,"args":{a}}}"#
        ));
    }
    // `args` before `name`: read as memory fields, as the skeleton does.
    events.push(r#"{"ph":"X","args":{"Input Dims":[[2]]},"cat":"cpu_op","name":"aten::addmm","pid":1,"tid":10,"ts":50,"dur":1}"#.to_string());
    let text = super::obj(&events);
    same_streamed(text.as_bytes(), &[3, 64, 4099, 1 << 16], "inputs").expect("streamed");
}

/// The benchmark shapes of issue 16 (`benches/shapes.rs`,
/// `scripts/bench_inputs.sh`): the CPU profiler's (the adamw sample) is
/// streamed, with nearly every event read by the hand-written reader.
#[test]
fn the_cpu_profiler_shape_takes_the_streaming_path() {
    let path = repo("sample_traces/train_adamw.trace.json.gz");
    let counts = streamed_shape(Path::new(&path));
    assert!(counts.events > 1000, "{counts:?}");
}

/// Streams a benchmark shape and checks it stays on the fast path: not
/// declined, read on two threads from the element start guessed near its
/// middle, at most 1 event in 10 left to `serde_json`.
fn streamed_shape(path: &Path) -> Counts {
    let bytes = inflated(path);
    let what = path.display().to_string();
    let counts = same_streamed(&bytes, &[1 << 20], &what)
        .unwrap_or_else(|| panic!("{what}: declined (read whole, twice)"));
    assert_eq!(
        same_split(&bytes, &what),
        Some(Head::Reached),
        "{what}: not split at its middle"
    );
    assert!(
        counts.by_serde * 10 <= counts.events,
        "{what}: {counts:?}: too many events left to serde_json"
    );
    counts
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn the_corpus_benchmark_shapes_take_the_streaming_path() {
    let dir = corpus_dir();
    for rel in [
        "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        "tracelens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    ] {
        streamed_shape(&dir.join(rel));
    }
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn streaming_gives_the_whole_read_on_corpus_traces() {
    let dir = corpus_dir();
    let mut streamed = 0;
    let mut all = 0;
    for pattern in ["**/*.json", "**/*.json.gz", "**/*.trace"] {
        for path in files(&format!("{}/{pattern}", dir.display())) {
            let bytes = inflated(&path);
            let what = path.display().to_string();
            all += 1;
            if same_streamed(&bytes, &[61, 1 << 20], &what).is_some() {
                streamed += 1;
            }
            same_split(&bytes, &what);
        }
    }
    println!("{streamed} of {all} corpus JSON files streamed");
    assert!(streamed >= 12, "{streamed} of {all} streamed");
}

/// Events written as a writer writes them (a few layouts of keys and
/// whitespace, each repeated) with deviations (a gap's whitespace changed,
/// more whitespace before a value, a key spelled with an escape, a key
/// twice, an object past the places `stream/gaps.rs` remembers, `args`
/// that are not an object), built from `choices`: the runs between
/// values that `Gaps` remembers are met again, alike and not.
fn written_alike(choices: &[u8]) -> String {
    struct Pick<'a>(&'a [u8], usize);
    impl Pick<'_> {
        fn of<T: Copy>(&mut self, xs: &[T]) -> T {
            let b = self.0.get(self.1).copied().unwrap_or(0);
            self.1 += 1;
            xs[usize::from(b) % xs.len()]
        }
        fn below(&mut self, n: u8) -> u8 {
            let b = self.0.get(self.1).copied().unwrap_or(n - 1);
            self.1 += 1;
            b % n
        }
        fn one_in(&mut self, n: u8) -> bool {
            self.below(n) == 0
        }
    }
    const WS: &[&str] = &[
        "",
        " ",
        "\n  ",
        "\n        ",
        "\t",
        "\r\n    ",
        "\n            ",
    ];
    const COLON: &[&str] = &[":", ": ", " : ", ":\n  "];
    const EVENT_KEYS: &[&str] = &["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"];
    const ARGS_KEYS: &[&str] = &[
        "External id",
        "Device Type",
        "Device Id",
        "Bytes",
        "Addr",
        "Total Allocated",
        "Total Reserved",
        "Ev Idx",
        "Input Dims",
        "Concrete Inputs",
    ];
    // One layout: the keys in order, the whitespace before each key and
    // after each colon, and before the `}`.
    type Layout = Vec<(String, &'static str, &'static str)>;
    fn layout(p: &mut Pick<'_>, keys: &[&str], extra: &[&str]) -> (Layout, &'static str) {
        let mut out: Layout = Vec::new();
        for &k in keys {
            if !p.one_in(6) {
                out.push((k.to_string(), p.of(WS), p.of(COLON)));
            }
            if p.one_in(12) {
                out.push((p.of(extra).to_string(), p.of(WS), p.of(COLON)));
            }
        }
        if p.one_in(8) {
            // Past the places remembered.
            for n in 0..20 {
                out.push((format!("x{n}"), p.of(WS), p.of(COLON)));
            }
        }
        if p.one_in(6) && out.len() > 1 {
            let (a, b) = (
                p.of(&[0, 1, 2, 3]) % out.len(),
                p.of(&[4, 5, 6, 7]) % out.len(),
            );
            out.swap(a, b);
        }
        (out, p.of(WS))
    }
    fn object(
        p: &mut Pick<'_>,
        broken: bool,
        (keys, close): &(Layout, &'static str),
        value: &mut dyn FnMut(&mut Pick<'_>, &str) -> String,
    ) -> String {
        let mut s = String::from("{");
        for (n, (k, ws, colon)) in keys.iter().enumerate() {
            let ws = if p.one_in(10) { p.of(WS) } else { ws };
            let colon = if p.one_in(10) { p.of(COLON) } else { colon };
            let k = match p.below(16) {
                0 => k.replacen('a', "\\u0061", 1),
                // Keys that differ from a field's at their first or last
                // byte only.
                1 => {
                    let first = k[..1].to_ascii_uppercase();
                    let first = if first == k[..1] {
                        first.to_ascii_lowercase()
                    } else {
                        first
                    };
                    format!("{first}{}", &k[1..])
                }
                2 => format!("{}X", &k[..k.len() - 1]),
                _ => k.clone(),
            };
            // A comma left out now and then (not JSON: declined).
            let sep = if n == 0 || (broken && p.one_in(40)) {
                ""
            } else {
                ","
            };
            let v = value(p, &k);
            s.push_str(&format!("{sep}{ws}\"{k}\"{colon}{v}"));
            if p.one_in(25) {
                // The key twice.
                let v = value(p, &k);
                s.push_str(&format!(",{ws}\"{k}\"{colon}{v}"));
            }
        }
        s.push_str(if p.one_in(10) { p.of(WS) } else { close });
        s.push('}');
        s
    }
    let mut p = Pick(choices, 0);
    let layouts: Vec<_> = (0..p.of(&[1, 2, 3, 4]))
        .map(|_| {
            // Keys that end as a field's key ends, but are not it; keys
            // of the other kind of object.
            let event = layout(
                &mut p,
                EVENT_KEYS,
                &["x", "n\\u0061me", "id", "my name", "Bytes"],
            );
            let args = layout(
                &mut p,
                ARGS_KEYS,
                &["Call stack", "y", "Max Bytes", "name", "ts"],
            );
            (event, args)
        })
        .collect();
    let broken = p.one_in(5);
    let mut events = super::basic_events();
    for _ in 0..p.of(&[1, 5, 10, 20, 30]) {
        let (event, args) = &layouts[p.of(&[0, 1, 2, 3]) % layouts.len()];
        let mut arg_value = |p: &mut Pick<'_>, k: &str| -> String {
            match k {
                "Input Dims" => p
                    .of(&["[[2, 3], []]", "[\n  [\n    64\n  ]\n]", "[]"])
                    .to_string(),
                "Concrete Inputs" => p.of(&[r#"["", "[1, 2]"]"#, "[]", r#""""#]).to_string(),
                "Device Type" => p.of(&["1", "0", "\"1\""]).to_string(),
                _ => p
                    .of(&[
                        "0", "64", "-512", "4096.0", "\"128\"", "null", "1e3", "[1]", "{}",
                    ])
                    .to_string(),
            }
        };
        let mut event_value = |p: &mut Pick<'_>, k: &str| -> String {
            match k {
                "ph" => p.of(&[r#""X""#, r#""i""#, r#""B""#, r#""E""#]).to_string(),
                "cat" => p
                    .of(&[r#""cpu_op""#, r#""cuda_runtime""#, r#""user_annotation""#])
                    .to_string(),
                "name" | "n\\u0061me" => p
                    .of(&[
                        r#""aten::linear""#,
                        r#""[memory]""#,
                        r#""aten::empty""#,
                        r#""aten::mm""#,
                    ])
                    .to_string(),
                "pid" | "tid" => p.of(&["1", "\"10\"", "2.5", "true", "10"]).to_string(),
                "ts" | "dur" => p.of(&["1", "2.5", "\"3.5\"", "1e3", "14.125"]).to_string(),
                "args" => {
                    if p.one_in(10) {
                        p.of(&["[]", "5", "null"]).to_string()
                    } else {
                        // Leading whitespace of its own sometimes: the run
                        // before it then ends before that whitespace.
                        let lead = if p.one_in(15) { " " } else { "" };
                        format!("{lead}{}", object(p, broken, args, &mut arg_value))
                    }
                }
                _ => p
                    .of(&["1", r#""s""#, "[1, 2]", r#"{"a": null}"#])
                    .to_string(),
            }
        };
        events.push(object(&mut p, broken, event, &mut event_value));
    }
    super::obj(&events)
}

mod gaps {
    use proptest::prelude::*;

    /// `args` whose keys are spelled, and spaced, as the event's own: the
    /// runs between their values are the event's runs, which name other
    /// fields there.
    #[test]
    fn args_spelled_like_their_event_read_as_the_whole_read_reads_them() {
        let mut events = crate::formats::chrome::tests::basic_events();
        for ts in 0..4 {
            events.push(format!(
                r#"{{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":{ts},"args":{{"ph":0,"name":64,"pid":4096,"tid":1,"ts":0}}}}"#
            ));
        }
        let text = crate::formats::chrome::tests::obj(&events);
        let counts = super::same_streamed(text.as_bytes(), &[5, 1 << 16], "args as events");
        assert_eq!(counts.map(|c| c.by_serde), Some(0));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(600))]
        /// Events whose keys and whitespace repeat, and deviate, read as
        /// the whole read reads them through buffers of every size.
        #[test]
        fn events_written_alike_read_as_the_whole_read_reads_them(
            choices in proptest::collection::vec(any::<u8>(), 0..600)
        ) {
            let text = super::written_alike(&choices);
            super::same_streamed(text.as_bytes(), &[3, 61, 4099, 1 << 16], "written alike");
        }
    }
}
