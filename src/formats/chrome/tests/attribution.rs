//! Operator attribution seen from the reader: which frames a memory
//! event gets.

use super::{mem, obj, op, parse, site_names};
use crate::formats::chrome::attribute::MAX_FRAMES;

#[test]
fn begin_end_pairs() {
    let s = r###"[
      {"ph":"B","cat":"user_annotation","name":"## forward ##","pid":1,"tid":1,"ts":0},
      {"ph":"B","cat":"cpu_op","name":"aten::relu","pid":1,"tid":1,"ts":10},
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":15,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":1}},
      {"ph":"E","pid":1,"tid":1,"ts":20},
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":20,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":2}},
      {"ph":"B","cat":"gpu_user_annotation","name":"gpu","pid":1,"tid":1,"ts":21},
      {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":22,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":3}},
      {"ph":"E","pid":1,"tid":1,"ts":23},
      {"ph":"E","pid":1,"tid":1,"ts":30}
    ]"###;
    let t = parse(s);
    let ev = &t.devices[0].events;
    assert_eq!(
        site_names(&t, ev[0].site),
        ["cpu_op:aten::relu", "user_annotation:## forward ##"]
    );
    assert_eq!(
        site_names(&t, ev[1].site),
        ["user_annotation:## forward ##"]
    );
    // The gpu_user_annotation B/E pair is matched but opens no frame.
    assert_eq!(
        site_names(&t, ev[2].site),
        ["user_annotation:## forward ##"]
    );
    assert_eq!(t.annotations.len(), 1);
    assert_eq!(t.annotations[0].end_us, 30.0);
}

#[test]
fn attribution_is_per_thread_and_deepest() {
    // thread 1: |---- nn.Module: Linear_0 (python) [0,100) ----|
    //             |-- aten::linear [10,50) --|
    //                |- aten::mm [20,30) -|
    // thread 2:   |-------- aten::other [0,1000) --------|
    let events = vec![
        op(2, "cpu_op", "aten::other", 0.0, 1000.0),
        op(1, "cpu_op", "aten::mm", 20.0, 10.0),
        op(1, "python_function", "nn.Module: Linear_0", 0.0, 100.0),
        op(1, "cpu_op", "aten::linear", 10.0, 40.0),
        op(1, "kernel", "volta_sgemm", 0.0, 1000.0),
        mem(1, 25.0, 512, 1, 1, 0),
        mem(1, 30.0, 512, 2, 1, 0), // end of aten::mm is exclusive
        mem(1, 50.0, 512, 3, 1, 0), // end of aten::linear is exclusive
        mem(1, 100.0, 512, 4, 1, 0),
        mem(2, 25.0, 512, 5, 1, 0),
        mem(3, 25.0, 512, 6, 1, 0),
    ];
    let t = parse(&obj(&events));
    let ev = &t.devices[0].events;
    let by_addr = |a: u64| ev.iter().find(|e| e.addr == a).unwrap().site;
    assert_eq!(
        site_names(&t, by_addr(1)),
        [
            "cpu_op:aten::mm",
            "cpu_op:aten::linear",
            "python_function:nn.Module: Linear_0"
        ]
    );
    assert_eq!(
        site_names(&t, by_addr(2)),
        ["cpu_op:aten::linear", "python_function:nn.Module: Linear_0"]
    );
    assert_eq!(
        site_names(&t, by_addr(3)),
        ["python_function:nn.Module: Linear_0"]
    );
    assert_eq!(by_addr(4), 0);
    assert_eq!(site_names(&t, by_addr(5)), ["cpu_op:aten::other"]);
    assert_eq!(by_addr(6), 0);
    let d = t
        .diagnostics
        .iter()
        .find(|d| d.message.contains("outside any operator"))
        .unwrap();
    assert!(d.message.starts_with("2 of 6"), "{}", d.message);
    assert!(d.message.contains("1 of them on threads without operators"));
}

#[test]
fn consecutive_duplicate_frames_are_dropped() {
    let events = vec![
        op(1, "cpu_op", "aten::to", 0.0, 100.0),
        op(1, "cpu_op", "aten::to", 0.0, 50.0),
        op(1, "cpu_op", "aten::copy_", 5.0, 10.0),
        mem(1, 6.0, 512, 1, 1, 0),
    ];
    let t = parse(&obj(&events));
    assert_eq!(
        site_names(&t, t.devices[0].events[0].site),
        ["cpu_op:aten::copy_", "cpu_op:aten::to"]
    );
}

#[test]
fn deep_stacks_are_capped() {
    let mut events: Vec<String> = (0..100)
        .map(|i| {
            op(
                1,
                "python_function",
                &format!("f{i}"),
                i as f64,
                1000.0 - 2.0 * i as f64,
            )
        })
        .collect();
    events.push(mem(1, 500.0, 512, 1, 1, 0));
    let t = parse(&obj(&events));
    let frames = site_names(&t, t.devices[0].events[0].site);
    assert_eq!(frames.len(), MAX_FRAMES);
    assert_eq!(frames[0], "python_function:f99");
}

/// The sweep's contract, which later attribution work builds on: every
/// instant gets the calls open on its thread, innermost first, each named
/// by its own `OpId` (two calls of one operator are two ids).
#[test]
fn sweep_hands_out_open_calls_innermost_first() {
    use crate::formats::chrome::attribute::{sweep, Instant, OpKind, OpRec, Operators};
    // thread 0: |------------- ProfilerStep#1 [0,100) -------------|
    //             |------- aten::linear [10,50) -------|
    //                |- aten::mm [20,30) -|  |- aten::mm [40,45) -|
    // thread 1: no operators
    let op = |start, end, kind, name: &'static str| OpRec {
        thread: 0,
        start,
        end,
        kind,
        name: name.into(),
    };
    let ops = Operators::new(vec![
        op(40, 45, OpKind::CpuOp, "aten::mm"),
        op(20, 30, OpKind::CpuOp, "aten::mm"),
        op(10, 50, OpKind::CpuOp, "aten::linear"),
        op(0, 100, OpKind::UserAnnotation, "ProfilerStep#1"),
    ]);
    let at = |thread, ts, order| Instant { thread, ts, order };
    let instants = [at(0, 42, 0), at(1, 25, 1), at(0, 25, 2), at(0, 60, 3)];
    let mut seen = vec![None; instants.len()];
    sweep(
        &ops,
        &instants,
        |i| *i,
        |i, open| {
            let calls: Vec<_> = open.innermost_first().collect();
            seen[i] = Some((calls, open.thread_has_ops));
        },
    );
    let names = |i: usize| -> Vec<(usize, &str)> {
        seen[i]
            .as_ref()
            .unwrap()
            .0
            .iter()
            .map(|&k| (k, ops.get(k).name.as_ref()))
            .collect()
    };
    let (mm_first, mm_second) = (names(2)[0].0, names(0)[0].0);
    assert_ne!(mm_first, mm_second, "two calls of aten::mm are two OpIds");
    assert_eq!(
        names(2).iter().map(|c| c.1).collect::<Vec<_>>(),
        ["aten::mm", "aten::linear", "ProfilerStep#1"]
    );
    assert_eq!(names(0)[1..], names(2)[1..], "same enclosing calls");
    assert_eq!(names(3), [(names(2)[2].0, "ProfilerStep#1")]);
    assert_eq!(seen[1], Some((vec![], false)));
    assert!(seen[3].as_ref().unwrap().1);
}

/// [`attribute`]'s per-position entries against the reading they replaced,
/// kept here as the oracle: every event's open operators read frame by
/// frame (consecutive equal frames once, at most `MAX_FRAMES`), its
/// outermost call found by a scan, strings and sites interned event by
/// event. Random intervals on a few threads, nested and not (buried
/// intervals that end before the ones above them, as Kineto's float times
/// give), deep enough to pass the cap, with names that repeat; the two
/// must agree on every site id, call and count, and on the interned
/// strings and sites in their order.
mod prefixes_against_frames {
    use std::sync::Arc;

    use proptest::prelude::*;

    use crate::formats::chrome::attribute::{
        attribute, sweep, Attributed, Instant, OpKind, OpRec, Operators, MAX_FRAMES,
    };
    use crate::model::{Frame, OpCall, Sites};
    use crate::vocabulary::is_operator_call;

    fn by_frames(ops: &Operators, instants: &[Instant], sites: &mut Sites) -> Attributed {
        let kinds = [
            OpKind::CpuOp,
            OpKind::PythonFunction,
            OpKind::UserAnnotation,
        ]
        .map(|k| sites.intern_str(k.name()));
        let mut out = Attributed {
            sites: vec![0; instants.len()],
            calls: vec![None; instants.len()],
            unattributed: Default::default(),
        };
        sweep(
            ops,
            instants,
            |i| *i,
            |i, open| {
                let open_ids: Vec<usize> = open.innermost_first().collect();
                out.calls[i] = open
                    .outermost_first()
                    .find(|&k| {
                        let op = ops.get(k);
                        op.kind == OpKind::CpuOp && is_operator_call(&op.name)
                    })
                    .and_then(OpCall::new);
                if open_ids.is_empty() {
                    out.unattributed.outside += 1;
                    if !open.thread_has_ops {
                        out.unattributed.on_threads_without_ops += 1;
                    }
                    return;
                }
                let mut frames: Vec<Frame> = Vec::new();
                for &k in &open_ids {
                    if frames.len() == MAX_FRAMES {
                        break;
                    }
                    let op = ops.get(k);
                    let f = Frame {
                        filename: kinds[op.kind as usize],
                        line: 0,
                        name: sites.intern_str(&op.name),
                    };
                    if frames.last() != Some(&f) {
                        frames.push(f);
                    }
                }
                out.sites[i] = sites.intern_site(&frames);
            },
        );
        out
    }

    const NAMES: [&str; 6] = ["aten::mm", "aten::add", "f", "g", "MulBackward0", "h"];
    const KINDS: [OpKind; 3] = [
        OpKind::CpuOp,
        OpKind::PythonFunction,
        OpKind::UserAnnotation,
    ];

    /// (thread, start, length, kind, name).
    type Op = (u32, i64, i64, usize, usize);
    /// (thread, ts).
    type Event = (u32, i64);

    fn inputs() -> impl Strategy<Value = (Vec<Op>, Vec<Event>)> {
        let op = (0u32..3, 0i64..400, 0i64..300, 0usize..3, 0usize..6);
        let nested = (0usize..90).prop_map(|depth| {
            // A deep stack on thread 0, past the frame cap, some names
            // repeated in a row.
            (0..depth)
                .map(|d| (0, d as i64, 1000 - 2 * d as i64, d % 2, (d / 3) % 6))
                .collect::<Vec<_>>()
        });
        (
            prop::collection::vec(op, 0..120),
            nested,
            prop::collection::vec((0u32..4, 0i64..1100), 0..150),
        )
            .prop_map(|(mut ops, deep, events)| {
                ops.extend(deep);
                (ops, events)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn same_sites_calls_and_interning((ops, events) in inputs()) {
            // As the collector gives them: mostly one allocation per name,
            // sometimes two (the two halves of a split read).
            let shared: Vec<Arc<str>> = NAMES.iter().map(|&n| n.into()).collect();
            let recs: Vec<OpRec> = ops
                .iter()
                .enumerate()
                .map(|(k, &(thread, start, len, kind, name))| OpRec {
                    thread,
                    start,
                    end: start + len,
                    kind: KINDS[kind],
                    name: if k % 5 == 4 { NAMES[name].into() } else { Arc::clone(&shared[name]) },
                })
                .collect();
            let ops = Operators::new(recs);
            let instants: Vec<Instant> = events
                .iter()
                .enumerate()
                .map(|(k, &(thread, ts))| Instant { thread, ts, order: k as u32 })
                .collect();
            let (mut a, mut b) = (Sites::default(), Sites::default());
            let got = attribute(&ops, &instants, |i| *i, &mut a);
            let want = by_frames(&ops, &instants, &mut b);
            prop_assert_eq!(&got.sites, &want.sites);
            prop_assert_eq!(&got.calls, &want.calls);
            prop_assert_eq!(got.unattributed, want.unattributed);
            prop_assert_eq!(a, b);
        }
    }
}

/// `OpKind::of_category` against the plain reading it shortcuts (each
/// comma-separated part trimmed, compared without case), on categories
/// built from the names it knows, others, case changes, ASCII and Unicode
/// whitespace, commas and non-ASCII bytes.
mod categories {
    use proptest::prelude::*;

    use crate::formats::chrome::attribute::OpKind;

    fn plain(cat: &str) -> Option<OpKind> {
        cat.split(',').find_map(|part| OpKind::of_name(part.trim()))
    }

    const PIECES: &[&str] = &[
        "cpu_op",
        "CPU_OP",
        "Operator",
        "operator",
        "python_function",
        "Python_Function",
        "user_annotation",
        "User",
        "user",
        "kernel",
        "cuda_runtime",
        "gpu_user_annotation",
        "ac2g",
        "cpu_o",
        "userx",
        ",",
        " ",
        "\t",
        "\n",
        "\u{a0}",
        "\u{2003}",
        "é",
        "",
    ];

    #[test]
    fn the_usual_categories() {
        let cases = [
            ("cpu_op", Some(OpKind::CpuOp)),
            ("Operator", Some(OpKind::CpuOp)),
            (" cpu_op\u{a0}", Some(OpKind::CpuOp)),
            ("kernel,User", Some(OpKind::UserAnnotation)),
            ("python_function", Some(OpKind::PythonFunction)),
            ("gpu_user_annotation", None),
            ("kernel", None),
            ("", None),
        ];
        for (cat, want) in cases {
            assert_eq!(OpKind::of_category(Some(cat)), want, "{cat:?}");
            assert_eq!(plain(cat), want, "{cat:?}");
        }
        assert_eq!(OpKind::of_category(None), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn read_as_the_plain_reading_reads_them(
            picks in proptest::collection::vec(0..PIECES.len(), 0..5)
        ) {
            let cat: String = picks.iter().map(|&k| PIECES[k]).collect();
            prop_assert_eq!(OpKind::of_category(Some(&cat)), plain(&cat), "{:?}", cat);
        }
    }
}
