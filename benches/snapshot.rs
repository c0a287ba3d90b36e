//! Snapshot throughput: unpickle + replay of a synthetic ~20 MB PyTorch
//! memory snapshot (written here by a tiny pickle emitter: no Python, no
//! files), the unpickler's cost per opcode on lists of 1M items, and
//! classification at 1 thread vs all threads.
//!
//! `cargo bench --bench snapshot` (CI only compiles it, via clippy --all-targets).
//!
//! The pickle has the shape of a real `_dump_snapshot()` (and of
//! `scripts/make_big_snapshot.py`): protocol 4, memoized key strings, frame
//! dicts shared through the memo, a fresh frames list per traceback, and
//! `free_requested`/`free_completed` pairs sharing one list.

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use memcut::internals::{classify, parse_bytes, read_trace_ahead, replay, Trace};
use memcut::Limits;

/// ~20 MB of pickle (147 bytes per entry, like the 1M-entry benchmark file):
/// large enough to leave the parser's first buffer window far behind, small
/// enough for a 10-sample run in seconds.
const ENTRIES: usize = 140_000;
/// Distinct frames and call sites (a torch 2.x training-step dump has ~665
/// frames and ~2000 sites).
const FRAMES: usize = 400;
const SITES: usize = 2000;
/// Live allocations before the oldest is freed.
const LIVE: usize = 256;

/// The few opcodes a snapshot needs.
mod op {
    pub const PROTO: u8 = 0x80;
    pub const STOP: u8 = b'.';
    pub const MARK: u8 = b'(';
    pub const EMPTY_DICT: u8 = b'}';
    pub const EMPTY_LIST: u8 = b']';
    pub const SETITEMS: u8 = b'u';
    pub const APPEND: u8 = b'a';
    pub const APPENDS: u8 = b'e';
    pub const MEMOIZE: u8 = 0x94;
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const BININT: u8 = b'J';
    pub const LONG1: u8 = 0x8a;
    pub const POP: u8 = b'0';
}

/// A pickle writer that memoizes every container and string, as CPython does.
struct Pickler {
    out: Vec<u8>,
    next_memo: u32,
    strings: HashMap<&'static str, u32>,
}

impl Pickler {
    fn new() -> Pickler {
        Pickler {
            out: vec![op::PROTO, 4],
            next_memo: 0,
            strings: HashMap::new(),
        }
    }

    fn memoize(&mut self) -> u32 {
        self.out.push(op::MEMOIZE);
        self.next_memo += 1;
        self.next_memo - 1
    }

    fn get(&mut self, i: u32) {
        if i < 256 {
            self.out.extend_from_slice(&[op::BINGET, i as u8]);
        } else {
            self.out.push(op::LONG_BINGET);
            self.out.extend_from_slice(&i.to_le_bytes());
        }
    }

    fn str(&mut self, s: &'static str) {
        if let Some(&i) = self.strings.get(s) {
            return self.get(i);
        }
        assert!(s.len() < 256);
        self.out
            .extend_from_slice(&[op::SHORT_BINUNICODE, s.len() as u8]);
        self.out.extend_from_slice(s.as_bytes());
        let i = self.memoize();
        self.strings.insert(s, i);
    }

    fn int(&mut self, v: u64) {
        if v < 1 << 8 {
            self.out.extend_from_slice(&[op::BININT1, v as u8]);
        } else if v < 1 << 16 {
            self.out.push(op::BININT2);
            self.out.extend_from_slice(&(v as u16).to_le_bytes());
        } else if v < 1 << 31 {
            self.out.push(op::BININT);
            self.out.extend_from_slice(&(v as u32).to_le_bytes());
        } else {
            // Two's complement, little-endian, with a zero byte if the top bit is set.
            let n = (64 - v.leading_zeros()).div_ceil(8) as usize;
            let n = if v >> (8 * n - 1) & 1 == 1 { n + 1 } else { n };
            self.out.extend_from_slice(&[op::LONG1, n as u8]);
            self.out.extend_from_slice(&v.to_le_bytes()[..n.min(8)]);
            if n == 9 {
                self.out.push(0);
            }
        }
    }
}

/// Deterministic pseudo-random numbers (an LCG; no dependency needed).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

const FILES: [&str; 6] = [
    "/home/user/proj/train/model.py",
    "/home/user/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
    "/home/user/.venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
    "/home/user/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
    "/home/user/.venv/lib/python3.12/site-packages/torch/optim/adamw.py",
    "??",
];
const NAMES: [&str; 8] = [
    "forward",
    "_call_impl",
    "_wrapped_call_impl",
    "backward",
    "_engine_run_backward",
    "step",
    "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
    "at::native::addmm_out_cuda(at::Tensor const&, at::Tensor&)",
];

/// Writes a snapshot pickle with `entries` trace entries.
fn synthetic_snapshot(entries: usize) -> Vec<u8> {
    let mut rng = Lcg(7);
    // Call sites: 20–60 frames each (real training stacks average ~32).
    let sites: Vec<Vec<usize>> = (0..SITES)
        .map(|_| {
            let depth = 20 + rng.below(20) + rng.below(21);
            (0..depth).map(|_| rng.below(FRAMES)).collect()
        })
        .collect();
    let mut frame_memo: Vec<Option<u32>> = vec![None; FRAMES];
    let mut p = Pickler::new();

    p.out.push(op::EMPTY_DICT);
    p.memoize();
    p.out.push(op::MARK);
    p.str("segments");
    p.out.push(op::EMPTY_LIST);
    p.memoize();
    p.str("device_traces");
    p.out.push(op::EMPTY_LIST);
    p.memoize();
    p.out.push(op::EMPTY_LIST);
    p.memoize();

    // A traceback: a fresh list of (memoized) frame dicts.
    let frames_list = |p: &mut Pickler, site: &[usize], frame_memo: &mut Vec<Option<u32>>| {
        p.out.push(op::EMPTY_LIST);
        let list = p.memoize();
        p.out.push(op::MARK);
        for &f in site {
            match frame_memo[f] {
                Some(i) => p.get(i),
                None => {
                    p.out.push(op::EMPTY_DICT);
                    frame_memo[f] = Some(p.memoize());
                    p.out.push(op::MARK);
                    p.str("filename");
                    p.str(FILES[f % FILES.len()]);
                    p.str("line");
                    p.int(10 + f as u64);
                    p.str("name");
                    p.str(NAMES[f % NAMES.len()]);
                    p.out.push(op::SETITEMS);
                }
            }
        }
        p.out.push(op::APPENDS);
        list
    };
    let entry = |p: &mut Pickler, action: &'static str, addr: u64, size: u64, t: u64| {
        p.out.push(op::EMPTY_DICT);
        p.memoize();
        p.out.push(op::MARK);
        p.str("action");
        p.str(action);
        p.str("addr");
        p.int(addr);
        p.str("size");
        p.int(size);
        p.str("stream");
        p.int(0);
        p.str("time_us");
        p.int(t);
        p.str("frames");
    };

    let mut live: std::collections::VecDeque<(u64, u64)> = Default::default();
    let mut t = 1_783_874_600_000_000u64;
    let mut written = 0;
    let mut batch = 0;
    p.out.push(op::MARK);
    while written < entries {
        if batch >= 997 {
            // CPython appends in batches of 1000.
            p.out.push(op::APPENDS);
            p.out.push(op::MARK);
            batch = 0;
        }
        t += 1 + rng.below(25) as u64;
        if live.len() < LIVE || written + 2 > entries || rng.below(2) == 0 {
            let addr = 0x7f00_0000_0000 + 512 * written as u64;
            let size = 512 * (1 + rng.below(1 << 14) as u64);
            entry(&mut p, "alloc", addr, size, t);
            frames_list(&mut p, &sites[rng.below(SITES)], &mut frame_memo);
            p.out.push(op::SETITEMS);
            live.push_back((addr, size));
            written += 1;
            batch += 1;
        } else {
            let (addr, size) = live.pop_front().expect("non-empty");
            entry(&mut p, "free_requested", addr, size, t);
            let list = frames_list(&mut p, &sites[rng.below(SITES)], &mut frame_memo);
            p.out.push(op::SETITEMS);
            entry(&mut p, "free_completed", addr, size, t);
            p.get(list);
            p.out.push(op::SETITEMS);
            written += 2;
            batch += 2;
        }
    }
    p.out.push(op::APPENDS);
    p.out.push(op::APPEND); // the device's trace into `device_traces`
    p.out.push(op::SETITEMS);
    p.out.push(op::STOP);
    p.out
}

fn parse(bytes: &[u8]) -> Trace {
    parse_bytes(bytes, &Limits::default()).expect("the synthetic snapshot parses")
}

fn unpickle_replay(c: &mut Criterion) {
    let bytes = synthetic_snapshot(ENTRIES);
    let trace = parse(&bytes);
    assert_eq!(trace.devices.len(), 1);
    assert_eq!(trace.devices[0].events.len(), ENTRIES);
    let mut g = c.benchmark_group("snapshot");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("unpickle", |b| b.iter(|| parse(black_box(&bytes))));
    g.bench_function("unpickle+replay", |b| {
        b.iter(|| {
            let trace = parse(black_box(&bytes));
            replay(&trace.devices[0])
        })
    });
    // As `memcut analyze FILE` reads: chunks read (and tracebacks' runs of
    // memo gets found) on a second thread ahead of the parser.
    g.bench_function("read ahead+replay", |b| {
        b.iter(|| {
            let trace = read_trace_ahead(black_box(&bytes[..]), &Limits::default())
                .expect("the synthetic snapshot parses");
            replay(&trace.devices[0])
        })
    });
    g.finish();
}

/// `{"device_traces": [], "x": [item × n]}` after `prefix`: the snapshot
/// reader reads only `device_traces`, so this times the unpickler (and the
/// lowering hook's look at each dict appended) on `n` copies of one opcode.
fn list_of(n: usize, item: &[u8], prefix: &[u8]) -> Vec<u8> {
    let mut p = Pickler::new();
    p.out.extend_from_slice(prefix);
    p.out.extend_from_slice(&[op::EMPTY_DICT, op::MARK]);
    p.str("device_traces");
    p.out.push(op::EMPTY_LIST);
    p.str("x");
    p.out.push(op::EMPTY_LIST);
    for _ in 0..n / 1000 {
        p.out.push(op::MARK);
        for _ in 0..1000 {
            p.out.extend_from_slice(item);
        }
        p.out.push(op::APPENDS);
    }
    p.out.extend_from_slice(&[op::SETITEMS, op::STOP]);
    p.out
}

/// What one opcode costs, per item (the former `pickle::micro` timer).
fn opcodes(c: &mut Criterion) {
    const N: usize = 1_000_000;
    // A string at memo slot 0, for memo gets.
    let memo_str = [op::SHORT_BINUNICODE, 1, b'a', op::MEMOIZE, op::POP];
    let record = [
        op::EMPTY_DICT,
        op::MEMOIZE,
        op::MARK,
        op::BINGET,
        0,
        op::BINGET,
        0,
        op::BINGET,
        0,
        op::BININT1,
        3,
        op::SETITEMS,
    ];
    let cases: [(&str, Vec<u8>); 7] = [
        ("BININT1", list_of(N, &[op::BININT1, 7], &[])),
        (
            "LONG1 of 6 bytes",
            list_of(N, &[op::LONG1, 6, 1, 2, 3, 4, 5, 6], &[]),
        ),
        (
            "BINGET of a string",
            list_of(N, &[op::BINGET, 0], &memo_str),
        ),
        (
            "LONG_BINGET of a string",
            list_of(N, &[op::LONG_BINGET, 0, 0, 0, 0], &memo_str),
        ),
        ("EMPTY_DICT", list_of(N, &[op::EMPTY_DICT], &[])),
        (
            "EMPTY_DICT MEMOIZE",
            list_of(N, &[op::EMPTY_DICT, op::MEMOIZE], &[]),
        ),
        ("dict of 2 MEMOIZE", list_of(N, &record, &memo_str)),
    ];
    let mut g = c.benchmark_group("opcodes");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N as u64));
    for (name, bytes) in &cases {
        parse(bytes);
        g.bench_function(*name, |b| b.iter(|| parse(black_box(bytes))));
    }
    g.finish();
}

fn classify_threads(c: &mut Criterion) {
    let trace = parse(&synthetic_snapshot(ENTRIES));
    let device = &trace.devices[0];
    let replay = replay(device);
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut g = c.benchmark_group("classify");
    g.sample_size(20);
    g.throughput(Throughput::Elements(replay.intervals.len() as u64));
    for threads in [1, all] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool");
        g.bench_function(format!("{threads} threads"), |b| {
            b.iter(|| pool.install(|| classify(&trace, device, &replay, &[])))
        });
        if all == 1 {
            break;
        }
    }
    g.finish();
}

criterion_group!(benches, unpickle_replay, opcodes, classify_threads);
criterion_main!(benches);
