//! The snapshot reader's tests: shared frames, the differential tests of
//! the fast paths against the plain path (fixtures, samples, the corpus and
//! generated snapshots), and the fault each fixture is named after.

use super::*;

mod sharing_tests {
    use super::*;

    /// `pickle.dumps(..., protocol=4)` of a snapshot whose live block and
    /// alloc entry share one frames list (as real dumps do through the memo;
    /// `testdata/make_fixtures.py`).
    pub(super) const SHARED_FRAMES: &[u8] = include_bytes!("testdata/shared_frames.pickle");

    #[test]
    fn a_frames_list_shared_by_a_block_and_an_entry_gives_both_the_site() {
        let trace = parse_pickle(SHARED_FRAMES, &Limits::default()).unwrap();
        let device = &trace.devices[0];
        let block = &device.segments.as_ref().unwrap()[0].blocks[0];
        assert_eq!(trace.sites.frames(block.site).len(), 2);
        assert_eq!(device.events[0].site, block.site);
        assert!(
            !trace
                .diagnostics
                .iter()
                .any(|d| d.message.contains("no frames")),
            "{:?}",
            trace.diagnostics
        );
    }
}

pub(crate) mod record_tests {
    use super::*;
    use crate::test_support::{corpus_dir, read_maybe_gz};

    /// The plain path, the fast paths (whole and trickled) and the
    /// read-ahead path agree on `bytes` ([`generate::all_ways`]).
    fn both_ways(bytes: &[u8], what: &str) {
        let agreed = std::panic::catch_unwind(|| generate::all_ways(bytes));
        assert!(agreed.is_ok(), "{what}: the ways disagree");
    }

    #[test]
    fn records_lowered_in_place_match_the_opcode_path() {
        both_ways(sharing_tests::SHARED_FRAMES, "shared frames");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seen = 0;
        let shared = root.join("tests/data/synthetic_shared_frames.pickle.gz");
        let samples = glob::glob(&format!("{}/sample_traces/*.pickle.gz", root.display())).unwrap();
        for path in samples.map(|p| p.unwrap()).chain([shared]) {
            both_ways(&read_maybe_gz(&path), &path.display().to_string());
            seen += 1;
        }
        assert!(seen > 1);
    }

    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn records_lowered_in_place_match_the_opcode_path_on_corpus_pickles() {
        let dir = corpus_dir();
        let pattern = format!("{}/**/*.pickle", dir.display());
        let mut seen = 0;
        for path in glob::glob(&pattern).unwrap() {
            let path = path.unwrap();
            both_ways(&std::fs::read(&path).unwrap(), &path.display().to_string());
            seen += 1;
        }
        assert!(seen > 0, "no pickles in {}", dir.display());
    }

    /// `{"device_traces": [[{"action": "alloc", "addr": 16, "size": 32}]]}`,
    /// then `"size": 64` set on the entry through the memo: while its batch
    /// is open (`OPEN`) and after it was appended (`LATER`). Python's
    /// `pickle.loads` gives size 64 for both.
    const PATCHED_OPEN: &[u8] = &[
        128, 4, 125, 148, 40, 140, 13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115,
        148, 93, 148, 40, 93, 148, 40, 125, 148, 40, 140, 6, 97, 99, 116, 105, 111, 110, 148, 140,
        5, 97, 108, 108, 111, 99, 148, 140, 4, 97, 100, 100, 114, 148, 75, 16, 140, 4, 115, 105,
        122, 101, 148, 75, 32, 117, 104, 4, 104, 8, 75, 64, 115, 48, 101, 101, 117, 46,
    ];
    const PATCHED_LATER: &[u8] = &[
        128, 4, 125, 148, 40, 140, 13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115,
        148, 93, 148, 40, 93, 148, 40, 125, 148, 40, 140, 6, 97, 99, 116, 105, 111, 110, 148, 140,
        5, 97, 108, 108, 111, 99, 148, 140, 4, 97, 100, 100, 114, 148, 75, 16, 140, 4, 115, 105,
        122, 101, 148, 75, 32, 117, 101, 101, 117, 104, 4, 104, 8, 75, 64, 115, 48, 46,
    ];

    #[test]
    fn keys_set_on_a_lowered_entry_overwrite_its_fields() {
        for (bytes, what) in [
            (PATCHED_OPEN, "batch open"),
            (PATCHED_LATER, "after append"),
        ] {
            both_ways(bytes, what);
            let trace = parse_pickle(bytes, &Limits::default()).unwrap();
            assert_eq!(trace.devices[0].events[0].size, 64, "{what}");
        }
    }

    /// A traceback list whose memo gets repeat an earlier list's bytes after
    /// the memo slot of one of its frames was overwritten (`BINPUT` of another
    /// frame dict): `pickle.loads` gives frames a.py, b.py for addr 32 and
    /// c.py, b.py for addr 64. (Hand-assembled; `pickle.dump` never reuses a
    /// slot, but a crafted file may.)
    pub(crate) const OVERWRITTEN_FRAME: &[u8] = &[
        128, 4, 125, 148, 40, 140, 8, 115, 101, 103, 109, 101, 110, 116, 115, 148, 93, 148, 140,
        13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115, 148, 93, 148, 40, 93, 148,
        40, 125, 148, 40, 140, 6, 97, 99, 116, 105, 111, 110, 148, 140, 5, 97, 108, 108, 111, 99,
        148, 140, 4, 97, 100, 100, 114, 148, 77, 16, 0, 140, 4, 115, 105, 122, 101, 148, 77, 0, 2,
        140, 6, 115, 116, 114, 101, 97, 109, 148, 75, 0, 140, 6, 102, 114, 97, 109, 101, 115, 148,
        93, 148, 40, 125, 148, 40, 140, 8, 102, 105, 108, 101, 110, 97, 109, 101, 148, 140, 4, 97,
        46, 112, 121, 148, 140, 4, 108, 105, 110, 101, 148, 75, 1, 140, 4, 110, 97, 109, 101, 148,
        140, 1, 102, 148, 117, 125, 148, 40, 104, 15, 140, 4, 98, 46, 112, 121, 148, 104, 17, 75,
        2, 104, 18, 140, 1, 103, 148, 117, 101, 117, 125, 148, 40, 104, 7, 104, 8, 104, 9, 77, 32,
        0, 104, 10, 77, 0, 2, 104, 11, 75, 0, 104, 12, 93, 148, 40, 104, 14, 104, 20, 101, 117,
        125, 148, 40, 104, 7, 104, 8, 104, 9, 77, 48, 0, 104, 10, 77, 0, 2, 104, 11, 75, 0, 104,
        12, 93, 148, 40, 125, 113, 14, 40, 104, 15, 140, 4, 99, 46, 112, 121, 148, 104, 17, 75, 3,
        104, 18, 140, 1, 104, 148, 117, 101, 117, 125, 148, 40, 104, 7, 104, 8, 104, 9, 77, 64, 0,
        104, 10, 77, 0, 2, 104, 11, 75, 0, 104, 12, 93, 148, 40, 104, 14, 104, 20, 101, 117, 101,
        101, 117, 46,
    ];

    #[test]
    fn equal_traceback_bytes_after_a_memo_slot_changed_give_the_new_frames() {
        both_ways(OVERWRITTEN_FRAME, "overwritten frame");
        let trace = parse_pickle(OVERWRITTEN_FRAME, &Limits::default()).unwrap();
        let files = |addr: u64| -> Vec<String> {
            let event = trace.devices[0]
                .events
                .iter()
                .find(|e| e.addr == addr)
                .unwrap();
            let sites = &trace.sites;
            sites
                .frames(event.site)
                .iter()
                .map(|f| sites.str(f.filename).to_owned())
                .collect()
        };
        assert_eq!(files(32), ["a.py", "b.py"]);
        assert_eq!(files(48), ["c.py"]);
        assert_eq!(files(64), ["c.py", "b.py"]);
    }

    /// The parser takes the answers of hinted runs (a sample trace's
    /// tracebacks repeat), and they are the answers it would have found.
    #[test]
    fn hinted_tracebacks_are_taken_and_lowered_alike() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let bytes = read_maybe_gz(&root.join("tests/data/synthetic_shared_frames.pickle.gz"));
        let hints = std::rc::Rc::new(pickle::GetRunHints::default());
        hints.add(pickle::GetRunFinder::default().find(&bytes));
        let hinted = parse_pickle_hinted(&bytes[..], &Limits::default(), Some(hints.clone()));
        let plain = parse_pickle(&bytes[..], &Limits::default());
        assert_eq!(format!("{hinted:?}"), format!("{plain:?}"));
        assert!(hints.taken() > 100, "{} runs taken", hints.taken());
    }

    /// A trace entry whose frames list holds the entry itself (through the
    /// memo), set by SETITEMS: `pickle.loads` gives `e['frames'][0] is e`.
    /// (Found by the fuzzer: the dict was borrowed while the hook read it.)
    const SELF_FRAMED_ENTRY: &[u8] = &[
        128, 4, 125, 148, 40, 140, 13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115,
        148, 93, 148, 40, 93, 148, 40, 125, 148, 40, 140, 6, 97, 99, 116, 105, 111, 110, 148, 140,
        5, 97, 108, 108, 111, 99, 148, 140, 4, 97, 100, 100, 114, 148, 75, 16, 140, 4, 115, 105,
        122, 101, 148, 75, 32, 140, 6, 102, 114, 97, 109, 101, 115, 148, 93, 148, 104, 4, 97, 117,
        101, 101, 117, 46,
    ];

    /// A live block whose `frames` list holds a trace entry is refused
    /// where the snapshot has it, and is no part of the snapshot where a
    /// repeated `segments` key replaced its list (`pickle.loads` keeps the
    /// last value): every path reads that as if it were never there, also
    /// the one that reads blocks after the parse (the proptest case of
    /// issue 33, shrunk, was this).
    #[test]
    fn an_entry_in_frames_counts_only_where_the_snapshot_keeps_it() {
        use crate::formats::pickle::writer::{dumps, Py};
        let entry = Py::dict([("action", Py::str("free_requested"))]);
        let block = Py::dict([
            ("size", Py::Int(512)),
            ("state", Py::str("active_allocated")),
            ("frames", Py::List(vec![entry])),
        ]);
        let segment = Py::dict([
            ("device", Py::Int(0)),
            ("address", Py::Int(4096)),
            ("total_size", Py::Int(1024)),
            ("blocks", Py::List(vec![block])),
        ]);
        let snapshot = |replaced: bool| {
            let mut pairs = vec![(Py::str("segments"), Py::List(vec![segment.clone()]))];
            if replaced {
                pairs.push((Py::str("segments"), Py::List(vec![])));
            }
            pairs.push((Py::str("device_traces"), Py::List(vec![Py::List(vec![])])));
            dumps(&Py::Dict(pairs), 4)
        };
        let kept = generate::all_ways(&snapshot(false));
        assert!(
            kept.as_ref()
                .is_err_and(|e| e.contains("holds a trace entry")),
            "{kept:?}"
        );
        let replaced = generate::all_ways(&snapshot(true));
        assert!(replaced.is_ok(), "{replaced:?}");
    }

    #[test]
    fn an_entry_in_its_own_frames_is_no_panic() {
        both_ways(SELF_FRAMED_ENTRY, "self-framed entry");
        let trace = parse_pickle(SELF_FRAMED_ENTRY, &Limits::default()).unwrap();
        assert_eq!(trace.devices[0].events[0].size, 32);
    }

    /// A hand-assembled pickle (no `pickle.dump` writes one) whose
    /// memoized empty `frames` list — `frames: []` in the first entry,
    /// which the fast paths never make — is fetched by a second entry, then
    /// fetched twice more with a frame appended through each fetch (a
    /// preformatted line, as `forward_frames` writes them), then
    /// fetched by a third entry and by a live block. `pickle.loads` gives
    /// one list object for all of them: each later fetch sees what was
    /// appended through the earlier ones.
    fn appended_empty_list() -> Vec<u8> {
        const MEMOIZE: u8 = 0x94;
        let mut b = vec![0x80, 4];
        let mut memo = 0u8;
        let mut put = |b: &mut Vec<u8>| {
            b.push(MEMOIZE);
            memo += 1;
            memo - 1
        };
        let s = |b: &mut Vec<u8>, text: &str| {
            b.extend([0x8c, text.len() as u8]);
            b.extend(text.as_bytes());
        };
        let entry = |b: &mut Vec<u8>, addr: u8| {
            // EMPTY_DICT MARK 'action' 'alloc' 'addr' addr 'size' 32 'frames'
            b.extend([b'}', b'(']);
            s(b, "action");
            s(b, "alloc");
            s(b, "addr");
            b.extend([b'K', addr]);
            s(b, "size");
            b.extend([b'K', 32]);
            s(b, "frames");
        };
        b.extend([b'}']);
        put(&mut b);
        b.push(b'(');
        s(&mut b, "device_traces");
        b.extend([b']', b'(', b']']);
        let device = put(&mut b);
        b.push(b'(');
        // The first entry's `frames: []` (memoized), then the second's get.
        entry(&mut b, 16);
        b.push(b']');
        let list = put(&mut b);
        b.push(b'u');
        entry(&mut b, 48);
        b.extend([b'h', list, b'u']);
        b.extend([b'e', b'e']);
        // Two more gets, a frame appended through each.
        for (key, line) in [("x", "a.py:1 f"), ("y", "b.py:2 g")] {
            s(&mut b, key);
            b.extend([b'h', list]);
            s(&mut b, line);
            b.push(b'a');
        }
        s(&mut b, "segments");
        b.extend([b']', b'(', b'}', b'(']);
        s(&mut b, "device");
        b.extend([b'K', 0]);
        s(&mut b, "blocks");
        b.extend([b']', b'(', b'}', b'(']);
        s(&mut b, "size");
        b.extend([b'K', 64]);
        s(&mut b, "state");
        s(&mut b, "active_allocated");
        s(&mut b, "frames");
        b.extend([b'h', list, b'u', b'e', b'u', b'e']);
        b.extend([b'u', b'.']);
        // The third entry, after the appends: put in the trace's list.
        let at = b.len() - 2;
        let mut third = vec![b'h', device];
        entry(&mut third, 80);
        third.extend([b'h', list, b'u', b'a', b'0']);
        b.splice(at..at, third);
        b
    }

    #[test]
    fn a_memoized_empty_list_appended_to_through_two_gets_is_one_list() {
        let bytes = appended_empty_list();
        let plain = pickle::unpickle_slice(&bytes).unwrap();
        let mut lowering = EntryLowering::default();
        let fast = pickle::unpickle(&bytes[..], &Limits::default(), &mut lowering).unwrap();
        // All three entries took the fast paths, the first making no list.
        assert_eq!(lowering.in_place, 3);
        let x = plain.get("x").unwrap();
        assert_eq!(x.identity(), plain.get("y").unwrap().identity());
        assert_eq!(x.list_items().unwrap().len(), 2);
        // (The lowering leaves the site's handle in a frames list it read.)
        let x = fast.get("x").unwrap();
        assert_eq!(x.identity(), fast.get("y").unwrap().identity());
        both_ways(&bytes, "empty list appended to");
        let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
        let device = &trace.devices[0];
        let files = |site| -> Vec<&str> {
            let sites = &trace.sites;
            sites
                .frames(site)
                .iter()
                .map(|f| sites.str(f.name))
                .collect()
        };
        let sites: Vec<_> = device
            .events
            .iter()
            .map(|e| (e.addr, files(e.site)))
            .collect();
        let none: Vec<&str> = Vec::new();
        assert_eq!(
            sites,
            [
                (16, none.clone()),
                (48, none),
                (80, vec!["a.py:1 f", "b.py:2 g"])
            ]
        );
        let block = &device.segments.as_ref().unwrap()[0].blocks[0];
        assert_eq!(files(block.site), ["a.py:1 f", "b.py:2 g"]);
    }

    /// Every broken fixture (the crash inputs of issue 12 among them) is
    /// refused, or read, alike every way.
    #[test]
    fn broken_pickles_fail_alike() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seen = 0;
        for pattern in ["*.pkl", "*.pkl.gz"] {
            let pattern = format!("{}/tests/data/broken/{pattern}", root.display());
            for path in glob::glob(&pattern).unwrap() {
                let path = path.unwrap();
                both_ways(&read_maybe_gz(&path), &path.display().to_string());
                seen += 1;
            }
        }
        assert!(seen >= 10, "{seen} broken pickles");
    }

    #[test]
    fn truncated_records_fail_alike() {
        let bytes = sharing_tests::SHARED_FRAMES;
        for cut in 0..bytes.len() {
            both_ways(&bytes[..cut], &format!("cut at {cut}"));
        }
    }
}

/// Regressions found by the generated snapshots below, and handles no
/// pickle can forge.
mod found {
    use super::*;
    use crate::formats::pickle::writer::{dumps, Py};

    fn diagnostics(trace: &Trace) -> Vec<&str> {
        trace
            .diagnostics
            .iter()
            .map(|d| d.message.as_str())
            .collect()
    }

    /// The same entry dict twice in a trace (a memo get): the plain path
    /// counted it without frames twice, the fast path (which lowers the
    /// whole record once) once. Now both count each appearance.
    #[test]
    fn an_entry_listed_twice_is_two_entries_without_frames_either_way() {
        let entry = Py::dict([
            ("action", Py::str("alloc")),
            ("addr", Py::Int(16)),
            ("size", Py::Int(32)),
        ])
        .shared();
        let trace = Py::List(vec![entry.clone(), Py::Int(7), entry]);
        let root = Py::dict([("device_traces", Py::List(vec![trace]))]);
        for protocol in 2..=5 {
            let bytes = dumps(&root, protocol);
            generate::all_ways(&bytes).unwrap();
            let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
            assert_eq!(trace.devices[0].events.len(), 2);
            let message = "2 trace entries carry no frames (recorded without context): their sites are unknown";
            assert!(
                diagnostics(&trace).contains(&message),
                "{:?}",
                diagnostics(&trace)
            );
        }
    }

    /// A dict whose first key is a lowered entry (fetched from the memo)
    /// and whose value is a bool once passed for the marker a lowered entry
    /// keeps, and was read as that entry again; a marker is a kind of its
    /// own now, which no memo get can fetch.
    #[test]
    fn a_dict_keyed_by_an_entry_is_no_marker() {
        let entry = Py::dict([("action", Py::str("alloc")), ("addr", Py::Int(16))]).shared();
        let keyed = Py::Dict(vec![(entry.clone(), Py::Bool(true))]);
        let root = Py::dict([(
            "device_traces",
            Py::List(vec![Py::List(vec![entry, keyed])]),
        )]);
        for protocol in 2..=5 {
            let bytes = dumps(&root, protocol);
            generate::all_ways(&bytes).unwrap();
            let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
            assert_eq!(trace.devices[0].events.len(), 1, "protocol {protocol}");
        }
    }

    /// Two annotations with the same name and start, on a device and on
    /// none, never ended: they came out in a `HashMap`'s order, which
    /// changes from run to run (found by the `snapshot` fuzz target as the
    /// plain and trickled parses disagreeing).
    #[test]
    fn annotations_open_at_the_end_come_out_in_one_order() {
        let start = |device: Py| {
            Py::dict([
                ("name", Py::str("forward")),
                ("stage", Py::str("START")),
                ("time_us", Py::Int(144)),
                ("device", device),
            ])
        };
        let root = Py::dict([
            ("device_traces", Py::List(vec![])),
            (
                "external_annotations",
                Py::List(vec![start(Py::Int(0)), start(Py::None)]),
            ),
        ]);
        let bytes = dumps(&root, 4);
        for _ in 0..20 {
            let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
            let devices: Vec<Option<i64>> = trace.annotations.iter().map(|a| a.device).collect();
            assert_eq!(devices, [None, Some(0)]);
        }
    }
}

/// The benchmark shapes (issue 16: `scripts/bench_inputs.sh` replicates
/// them, `benches/shapes.rs` has a group for each) stay on the fast paths:
/// trace entries lowered in place from the pickle's bytes
/// (`pickle/fast/mod.rs`; the opcode path costs 2.7× the CPU time) and
/// repeated tracebacks answered from the read-ahead thread's hints. A
/// change that sends a shape back to the opcode path fails here, not only
/// in a benchmark nobody reran.
///
/// The floors are today's shares less a margin. Tracebacks are lowered in
/// place whether their frames are fetched from the memo (PyTorch's
/// symbolizer shares frame dicts), spelled out inline (`_profile_to_snapshot`
/// output, a frame's first use) or empty (cs336-magma27's torch-on-Windows
/// dump). Shares of the files that `bench_inputs.sh` replicates into its
/// 1M-entry inputs (measured with this module's `share`: synthetic 99.7%,
/// C++ frames 99.0%, Python frames 99.4%, unshared frames 98.8%,
/// `_profile_to_snapshot` 99.6%; before inline and empty tracebacks were
/// lowered in place: 99.7%, 96.7%, 98.1%, 27.3%, 64.8%).
mod fast_path_shapes {
    use super::*;
    use crate::formats::pickle::writer::{dumps, dumps_spelled, Py};
    use crate::test_support::{corpus_dir, read_maybe_gz};

    /// How a file took the fast paths.
    struct Share {
        /// Share of the trace entries lowered in place.
        in_place: f64,
        /// Traceback runs answered from hints.
        hinted: u64,
        /// Share of the segments read as they streamed (`allocator_state.rs`).
        segments_lowered: f64,
        /// Items the trace lists hold per entry (runs of events: ~1/1000).
        items_per_entry: f64,
        /// The memo's strings whose sites' id a frame took by their index.
        memo_strs: usize,
    }

    fn share(bytes: &[u8]) -> Share {
        let hints = std::rc::Rc::new(pickle::GetRunHints::default());
        hints.add(pickle::GetRunFinder::default().find(bytes));
        let mut lowering = EntryLowering::default();
        let root = pickle::unpickle_hinted(
            bytes,
            &Limits::default(),
            &mut lowering,
            Some(hints.clone()),
        )
        .unwrap();
        let events = lowering.events.len().max(1) as f64;
        let segments = root.get("segments").map_or(Vec::new(), |s| {
            s.list_items().map_or(Vec::new(), |items| items.to_vec())
        });
        let lowered = segments
            .iter()
            .filter(|s| matches!(s, Value::Handle(h) if matches!(h.lowered(), pickle::Lowered::Segment(_))))
            .count();
        let items: usize = root.get("device_traces").map_or(0, |t| {
            t.list_items().map_or(0, |lists| {
                lists
                    .iter()
                    .map(|l| l.list_items().map_or(0, |i| i.len()))
                    .sum()
            })
        });
        Share {
            in_place: lowering.in_place as f64 / events,
            hinted: hints.taken(),
            segments_lowered: lowered as f64 / segments.len().max(1) as f64,
            items_per_entry: items as f64 / events,
            memo_strs: lowering.memo_strs.known(),
        }
    }

    fn check(path: &std::path::Path, min_in_place: f64, min_hinted: u64) {
        let share = share(&read_maybe_gz(path));
        eprintln!(
            "SHARE {} in_place {} hinted {}",
            path.display(),
            share.in_place,
            share.hinted
        );
        let what = path.display();
        assert!(
            share.in_place >= min_in_place,
            "{what}: {:.1}% of the entries lowered in place, below {:.1}%",
            100.0 * share.in_place,
            100.0 * min_in_place
        );
        assert!(
            share.hinted >= min_hinted,
            "{what}: {} traceback runs answered from hints, below {min_hinted}",
            share.hinted
        );
        assert_eq!(
            share.segments_lowered, 1.0,
            "{what}: segments left as dicts through the parse"
        );
        assert!(
            share.items_per_entry < 0.01,
            "{what}: trace lists hold {:.3} items per entry, not runs of entries",
            share.items_per_entry
        );
    }

    #[test]
    fn committed_shapes_stay_on_the_fast_paths() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        // make_big_snapshot.py's shape, 2000 entries: 99.7% (tracebacks
        // that spell out a frame's first use, inline, among memo gets);
        // 1514 runs answered from hints (the entries'; the blocks' records
        // are left to the opcodes at once, `Records::may_take`: before that
        // the answers taken for their declined scans counted too, 2376).
        check(
            &root.join("tests/data/synthetic_shared_frames.pickle.gz"),
            0.99,
            1500,
        );
        // `_profile_to_snapshot`, every frame spelled out inline: 99.6%.
        check(
            &root.join("sample_traces/train_adamw.snapshot.pickle.gz"),
            0.99,
            0,
        );
    }

    /// Shapes built here, pickled as protocol 4 and 5 write them: a
    /// traceback spelled out inline (a new dict per frame) whose list a
    /// free entry fetches again, frames lists that are empty, new or
    /// fetched from the memo, and a traceback of inline frames mixed with
    /// frames fetched from the memo; with equal strings one object, and
    /// spelled out again wherever they appear (`_profile_to_snapshot`: the
    /// fast path then takes them from the memo's strings, `Item::MemoStr`).
    /// All lowered in place, and alike every way.
    #[test]
    fn inline_and_empty_tracebacks_are_lowered_in_place() {
        let frame = |name: &str, line: i128| {
            Py::dict([
                ("filename", Py::str("train.py")),
                ("line", Py::Int(line)),
                ("name", Py::str(name)),
            ])
        };
        let shared_frame = frame("step", 7).shared();
        let entry = |action: &str, addr: i128, frames: Py| {
            Py::dict([
                ("action", Py::str(action)),
                ("addr", Py::Int(addr)),
                ("size", Py::Int(512)),
                ("stream", Py::Int(0)),
                ("frames", frames),
            ])
        };
        let mut entries = Vec::new();
        for k in 0..50 {
            let inline = Py::List(vec![frame("forward", k % 3), frame("main", 1)]).shared();
            let empty = Py::List(vec![]).shared();
            let mixed = Py::List(vec![frame("backward", k), shared_frame.clone()]);
            entries.push(entry("alloc", 16 * k, inline.clone()));
            entries.push(entry("alloc", 16 * k + 8, empty.clone()));
            entries.push(entry("alloc", 16 * k + 4, mixed));
            entries.push(entry("free_completed", 16 * k, inline));
            entries.push(entry("free_completed", 16 * k + 8, empty));
            entries.push(entry("free_completed", 16 * k + 4, Py::List(vec![])));
        }
        let root = Py::dict([
            ("segments", Py::List(vec![])),
            ("device_traces", Py::List(vec![Py::List(entries)])),
        ]);
        for (protocol, spelled) in [(4, false), (5, false), (4, true), (5, true)] {
            let bytes = match spelled {
                false => dumps(&root, protocol),
                true => dumps_spelled(&root, protocol),
            };
            generate::all_ways(&bytes).unwrap();
            let Share {
                in_place,
                memo_strs,
                ..
            } = share(&bytes);
            // All but the first, which fetches the shared frame from a
            // slot its own traceback fills.
            assert!(in_place > 0.99, "protocol {protocol} {spelled}: {in_place}");
            // Spelled again, the frames' files and functions (train.py,
            // forward, main, backward) are taken from the memo's strings.
            // (One object each, they are fetched from the slots the first
            // entry's opcodes filled: plain strings.)
            assert!(
                !spelled || memo_strs >= 4,
                "protocol {protocol}: {memo_strs}"
            );
            let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
            let sites = &trace.sites;
            let names = |i: usize| -> Vec<&str> {
                let site = trace.devices[0].events[i].site;
                sites
                    .frames(site)
                    .iter()
                    .map(|f| sites.str(f.name))
                    .collect()
            };
            assert_eq!(names(6 * 4), ["forward", "main"]);
            assert_eq!(names(6 * 4 + 3), ["forward", "main"]);
            assert_eq!(names(6 * 4 + 2), ["backward", "step"]);
            assert!(names(6 * 4 + 1).is_empty());
        }
    }

    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn corpus_shapes_stay_on_the_fast_paths() {
        let dir = corpus_dir();
        // Python + C++ frames, time_us, compile_context, user_metadata: 99.0%;
        // 14772 runs answered from hints.
        check(
            &dir.join("cs336-wedsonlin/results/medium_512_training_memory_snapshot.pickle"),
            0.985,
            14000,
        );
        // Python frames only: 99.4%.
        check(&dir.join("decomfl/memory.pickle"), 0.99, 15000);
        // Frames never shared, many of them empty lists: 98.8%.
        check(&dir.join("cs336-magma27/memory_snapshot.pickle"), 0.98, 900);
    }
}

/// The allocator's state read as it streams (`allocator_state.rs`) and the
/// runs of events in trace lists, on shapes real dumps have and some they
/// do not: each checked against the reading after the parse
/// (`generate::all_ways`), and for what it must say.
mod allocator_state_shapes {
    use super::*;
    use crate::formats::pickle::writer::{dumps, Py};
    use crate::model::BlockState;

    fn block(address: i128, size: i128, state: &str, frames: Py) -> Py {
        Py::dict([
            ("address", Py::Int(address)),
            ("size", Py::Int(size)),
            ("requested_size", Py::Int(size)),
            ("state", Py::str(state)),
            ("frames", frames),
        ])
    }

    fn segment(address: i128, blocks: Vec<Py>) -> Py {
        let total: i128 = 4096 * blocks.len() as i128;
        Py::dict([
            ("device", Py::Int(0)),
            ("address", Py::Int(address)),
            ("total_size", Py::Int(total)),
            ("segment_type", Py::str("large")),
            ("is_expandable", Py::Bool(false)),
            ("frames", Py::List(vec![])),
            ("blocks", Py::List(blocks)),
        ])
    }

    fn frame(line: i128) -> Py {
        Py::dict([
            ("filename", Py::str("train.py")),
            ("line", Py::Int(line)),
            ("name", Py::str("step")),
        ])
    }

    fn alloc(addr: i128) -> Py {
        alloc_with(addr, [])
    }

    /// An alloc entry with more keys after its own.
    fn alloc_with<'a>(addr: i128, more: impl IntoIterator<Item = (&'a str, Py)>) -> Py {
        let keys = [
            ("action", Py::str("alloc")),
            ("addr", Py::Int(addr)),
            ("size", Py::Int(4096)),
            ("stream", Py::Int(0)),
            ("frames", Py::List(vec![frame(7)])),
        ];
        Py::dict(keys.into_iter().chain(more))
    }

    fn snapshot(segments: Vec<Py>, entries: Vec<Py>) -> Py {
        Py::dict([
            ("segments", Py::List(segments)),
            ("device_traces", Py::List(vec![Py::List(entries)])),
        ])
    }

    /// A segment of 2500 blocks and a trace of 2500 entries arrive in
    /// batches of 1000: each batch is a run, and all of them are read back.
    #[test]
    fn lists_longer_than_a_batch_are_read_whole() {
        let blocks: Vec<Py> = (0..2500)
            .map(|k| {
                let state = if k % 2 == 0 {
                    "active_allocated"
                } else {
                    "inactive"
                };
                block((1 << 20) + k * 4096, 4096, state, Py::List(vec![frame(k)]))
            })
            .collect();
        let entries: Vec<Py> = (0..2500).map(|k| alloc((1 << 20) + k * 4096)).collect();
        for protocol in [2, 4, 5] {
            let bytes = dumps(
                &snapshot(vec![segment(1 << 20, blocks.clone())], entries.clone()),
                protocol,
            );
            generate::all_ways(&bytes).unwrap();
            let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
            let device = &trace.devices[0];
            assert_eq!(device.events.len(), 2500);
            let segments = device.segments.as_ref().unwrap();
            assert_eq!(segments.len(), 1);
            let blocks = &segments[0].blocks;
            assert_eq!(blocks.len(), 2500);
            assert_eq!(blocks[2499].addr, (1 << 20) + 2499 * 4096);
            assert_eq!(blocks[2498].state, BlockState::ActiveAllocated);
            let line = trace.sites.frames(blocks[1234].site)[0].line;
            assert_eq!(line, 1234);
        }
    }

    /// An entry made inside a `torch.compile`d region (`compile_context`,
    /// PR #152707) has the region as its outermost frame, whichever way
    /// the value spells it; `N/A` (outside compiled code) changes nothing.
    #[test]
    fn compile_context_names_the_region() {
        let entry =
            |addr: i128, context: &str| alloc_with(addr, [("compile_context", Py::str(context))]);
        let entries = vec![
            entry(1 << 20, "Torch-Compiled Region: 0/0"),
            entry(2 << 20, "N/A"),
            entry(3 << 20, "1/0"),
            entry(4 << 20, "Torch-Compiled Region: 0/0"),
        ];
        for protocol in [2, 4] {
            let bytes = dumps(&snapshot(vec![], entries.clone()), protocol);
            generate::all_ways(&bytes).unwrap();
            let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
            let events = &trace.devices[0].events;
            let names = |k: usize| -> Vec<&str> {
                let frames = trace.sites.frames(events[k].site);
                frames.iter().map(|f| trace.sites.str(f.name)).collect()
            };
            assert_eq!(names(0), ["step", "Torch-Compiled Region: 0/0"]);
            assert_eq!(names(1), ["step"]);
            assert_eq!(names(2), ["step", "Torch-Compiled Region: 1/0"]);
            assert_eq!(events[3].site, events[0].site);
        }
    }

    /// A snapshot taken with `augment_with_fx_traces=True` (the frame
    /// fields `torch._utils._augment_frames` adds to frames of FX-generated
    /// code): a frame whose node has a traceback is the model's source line
    /// it maps to; one without (a placeholder's) stays as it is. Frames
    /// shared by entries, as PyTorch's symbolizer shares them, and inline.
    #[test]
    fn fx_frames_name_the_model_source_line() {
        let fx_frame = |line: i128, node: &str, trace: Option<&str>| {
            let mut pairs = vec![
                ("filename", Py::str("fx_generated__l2vzycas3nocobx4dlld.py")),
                ("line", Py::Int(line)),
                ("name", Py::str("forward")),
                ("fx_node_op", Py::str("call_function")),
                ("fx_node_name", Py::str(node)),
                ("fx_node_target", Py::str("aten.addmm.default")),
            ];
            if let Some(trace) = trace {
                pairs.push(("fx_original_trace", Py::str(trace)));
            }
            Py::dict(pairs)
        };
        let traced = fx_frame(
            9,
            "addmm",
            Some("  File \"/work/model.py\", line 52, in forward\n    x = self.block(x)\n  File \"/work/block.py\", line 14, in forward\n    h = self.a(x)\n        ^^^^^^^^^\n"),
        )
        .shared();
        let untraced = fx_frame(5, "primals_1", None).shared();
        let entry = |addr: i128, fx: Py| {
            Py::dict([
                ("action", Py::str("alloc")),
                ("addr", Py::Int(addr)),
                ("size", Py::Int(4096)),
                ("stream", Py::Int(0)),
                ("frames", Py::List(vec![fx, frame(7)])),
            ])
        };
        let mut entries = Vec::new();
        for k in 0..40 {
            entries.push(entry(4096 * (2 * k + 1), traced.clone()));
            entries.push(entry(4096 * (2 * k + 2), untraced.clone()));
        }
        entries.push(entry(
            1 << 30,
            fx_frame(
                9,
                "addmm",
                Some("  File \"/work/block.py\", line 14, in forward\n"),
            ),
        ));
        for protocol in [2, 4] {
            let bytes = dumps(&snapshot(vec![], entries.clone()), protocol);
            generate::all_ways(&bytes).unwrap();
            let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
            let events = &trace.devices[0].events;
            let innermost = |k: usize| {
                let f = trace.sites.frames(events[k].site)[0];
                (trace.sites.str(f.filename), f.line, trace.sites.str(f.name))
            };
            assert_eq!(innermost(0), ("/work/block.py", 14, "forward"));
            assert_eq!(
                innermost(1),
                ("fx_generated__l2vzycas3nocobx4dlld.py", 5, "forward")
            );
            assert_eq!(innermost(80), ("/work/block.py", 14, "forward"));
            assert_eq!(events[80].site, events[0].site);
        }
    }

    /// A segment fetched from the memo twice is two segments, as it was
    /// read from its dict; blocks without an address are laid out one
    /// after the other from the segment's start.
    #[test]
    fn a_segment_listed_twice_and_blocks_without_addresses() {
        let no_address = |size| {
            Py::dict([
                ("size", Py::Int(size)),
                ("state", Py::str("active_allocated")),
            ])
        };
        let shared = Py::Shared(std::rc::Rc::new(segment(
            1 << 30,
            vec![no_address(4096), no_address(8192)],
        )));
        // Three times: the lowered segment is copied twice, then moved out.
        let bytes = dumps(
            &snapshot(
                vec![shared.clone(), shared.clone(), shared],
                vec![alloc(1 << 30)],
            ),
            4,
        );
        generate::all_ways(&bytes).unwrap();
        let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
        let segments = trace.devices[0].segments.as_ref().unwrap();
        assert_eq!(segments.len(), 3);
        let addrs: Vec<u64> = segments[2].blocks.iter().map(|b| b.addr).collect();
        assert_eq!(addrs, [1 << 30, (1 << 30) + 4096]);
        assert_eq!(segments[0], segments[2]);
        assert_eq!(segments[1], segments[2]);
        assert!(trace.diagnostics.iter().any(|d| d
            .message
            .contains("6 live blocks at dump time have no frames")));
    }

    /// `blocks` that is no list is refused as before, naming it; block
    /// dicts inside a traceback read as the empty frames they were.
    #[test]
    fn odd_segments_and_blocks_read_as_their_dicts_did() {
        let mut bad = segment(4096, vec![]);
        if let Py::Dict(pairs) = &mut bad {
            pairs.retain(|(k, _)| !matches!(k, Py::Str(s) if s == "blocks"));
            pairs.push((Py::str("blocks"), Py::Int(3)));
        }
        let bytes = dumps(&snapshot(vec![bad], vec![alloc(4096)]), 4);
        assert_eq!(
            generate::all_ways(&bytes).unwrap_err(),
            "not a PyTorch memory snapshot: segment `blocks` is not a list"
        );
        let odd_frames = Py::List(vec![
            frame(1),
            block(0, 16, "inactive", Py::List(vec![])),
            block(16, 16, "inactive", Py::List(vec![])),
        ]);
        let mut entry = alloc(4096);
        if let Py::Dict(pairs) = &mut entry {
            pairs.retain(|(k, _)| !matches!(k, Py::Str(s) if s == "frames"));
            pairs.push((Py::str("frames"), odd_frames));
        }
        for protocol in [2, 4] {
            let bytes = dumps(
                &snapshot(vec![], vec![entry.clone(), alloc(8192)]),
                protocol,
            );
            generate::all_ways(&bytes).unwrap();
            let trace = parse_pickle(&bytes[..], &Limits::default()).unwrap();
            let frames = trace.sites.frames(trace.devices[0].events[0].site);
            assert_eq!(frames.len(), 3);
            assert_eq!(
                (frames[1].filename, frames[1].line, frames[1].name),
                (0, 0, 0)
            );
        }
    }
}
