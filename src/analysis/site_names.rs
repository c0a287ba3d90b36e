//! A site's name for people: the operator that allocated, and the nearest
//! line of the program that called it (issue 11.7).
//!
//! A stack holds much that nobody can act on: the allocator, the unwinder,
//! the dispatcher, and ATen's own allocation plumbing (`TensorIteratorBase::
//! build`, `at::empty`, `aten::empty_like`, `aten::_to_copy`), which every
//! operator goes through. Naming a site by its two innermost frames merged
//! unrelated operators into one `allocate_or_resize_outputs` row. The name is
//! instead the innermost *operator* (`aten::addmm`, `DivBackward0`,
//! `<built-in method cat>`; plumbing only when no other operator is on the
//! stack) and the innermost Python line outside `torch` (code outside
//! installed packages first): `aten::bmm < cs336_systems/attention.py:13
//! scaled_dot_product_attention`. A stack without Python frames (a Chrome
//! trace recorded without stacks) is named by its operator and the next
//! meaningful frame out (`aten::addmm < aten::linear`).

use std::borrow::Cow;

use crate::model::{SiteId, Sites, StrId};
use crate::vocabulary::{is_operator_call, COMPILED_REGION};

/// One frame as read: file, line, name.
#[derive(Clone, Copy)]
struct Frame<'a> {
    file: &'a str,
    line: u32,
    name: &'a str,
}

impl Frame<'_> {
    fn show(&self) -> String {
        format_frame(self.file, self.line, self.name)
    }
}

/// ATen operators that only allocate for an operator around them (names
/// without `aten::`; C++ `at::_ops` spells overloads with `_`).
const PLUMBING: &[&str] = &[
    "empty",
    "empty_memory_format",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "resize_",
    "to",
    "to_dtype",
    "to_dtype_layout",
    "to_device",
    "_to_copy",
];

fn is_plumbing(operator: &str) -> bool {
    operator
        .strip_prefix("aten::")
        .is_some_and(|op| PLUMBING.contains(&op))
}

/// The operator a frame names, if it names one: a profiler `cpu_op`
/// (`aten::addmm`, `AddmmBackward0`), a C++ dispatcher entry
/// (`at::_ops::bmm::call(…)` → `aten::bmm`), a C++ autograd node
/// (`torch::autograd::generated::DivBackward0::apply(…)` → `DivBackward0`),
/// the cuBLAS workspace, or a Python builtin (`<built-in method cat>`).
fn operator(f: &Frame<'_>) -> Option<Cow<'static, str>> {
    let name = f.name;
    if matches!(f.file, "cpu_op" | "operator") {
        return is_operator_call(name).then(|| Cow::Owned(name.to_owned()));
    }
    if let Some(rest) = name.split("at::_ops::").nth(1) {
        let op = rest.split_once("::call(")?.0;
        return (!op.contains("::")).then(|| Cow::Owned(format!("aten::{}", schema_name(op))));
    }
    if let Some(rest) = name.split("torch::autograd::generated::").nth(1) {
        let node = rest.split_once("::apply(")?.0;
        return Some(Cow::Owned(node.to_owned()));
    }
    if name.contains("torch::autograd::AccumulateGrad::") {
        return Some(Cow::Borrowed("AccumulateGrad"));
    }
    if name.contains("getNewWorkspace") {
        return Some(Cow::Borrowed("cuBLAS workspace"));
    }
    name.starts_with("<built-in ")
        .then(|| Cow::Owned(clean_name(name)))
}

/// `at::_ops` joins an overload to its operator with `_` (`div_Tensor`);
/// the schema writes `div.Tensor`. Overload names that start with a capital
/// letter are told apart this way; others (`empty_memory_format`) stay.
fn schema_name(op: &str) -> Cow<'_, str> {
    match op.rsplit_once('_') {
        Some((base, overload))
            if !base.is_empty() && overload.starts_with(|c: char| c.is_ascii_uppercase()) =>
        {
            Cow::Owned(format!("{base}.{overload}"))
        }
        _ => Cow::Borrowed(op),
    }
}

/// A Python source line (not a builtin, not a module's name).
fn is_source_line(f: &Frame<'_>) -> bool {
    crate::vocabulary::is_source_line(f.file, f.name)
}

/// The path a Python frame names: its file (a snapshot's), or its name
/// (the profiler's `file.py(N): function`).
fn path<'a>(f: &Frame<'a>) -> &'a str {
    if f.file.ends_with(".py") {
        f.file
    } else {
        f.name
    }
}

/// Frames whose path is PyTorch's own code, or code generated for a
/// compiled graph: Inductor's (`/tmp/torchinductor_<user>/…py`) or FX's
/// ([`is_generated`]).
fn in_torch(f: &Frame<'_>) -> bool {
    let path = path(f).replace('\\', "/");
    path.starts_with("torch/")
        || path.contains("/torch/")
        || path.contains("/torchinductor_")
        || is_generated(f)
}

/// A frame of code FX generated for a graph (`fx_generated__<hash>.py`),
/// named by a hash.
fn is_generated(f: &Frame<'_>) -> bool {
    crate::vocabulary::is_fx_generated(path(f))
}

fn in_installed_package(f: &Frame<'_>) -> bool {
    let path = path(f);
    path.contains("site-packages") || path.contains("dist-packages")
}

/// The site's name (see the module's doc).
pub(super) fn describe(sites: &Sites, site: SiteId) -> String {
    describe_with(sites, site, &mut FrameTraits::default())
}

/// What [`describe`] asks of a frame (all of it a matter of its file and
/// name), answered once per distinct frame: the sites of a trace share most
/// of their frames (a stack and its callers'), and asking each site's
/// frames anew was 3% of the instructions of `memcut batch` over the
/// corpus (callgrind). Keyed by string ids: one `Sites`'s (a device's
/// report reads one trace).
#[derive(Default)]
pub(crate) struct FrameTraits(rustc_hash::FxHashMap<(StrId, StrId), Traits>);

struct Traits {
    operator: Option<Cow<'static, str>>,
    noise: bool,
    source_line: bool,
    in_torch: bool,
    generated: bool,
    installed: bool,
    /// Python or profiler frames ([`is_python`], [`is_category`]).
    python_or_category: bool,
}

impl Traits {
    fn of(f: &Frame<'_>) -> Traits {
        Traits {
            operator: operator(f),
            noise: is_noise(f.file, f.name),
            source_line: is_source_line(f),
            in_torch: in_torch(f),
            generated: is_generated(f),
            installed: in_installed_package(f),
            python_or_category: is_python(f.file, f.name) || is_category(f.file),
        }
    }
}

/// [`describe`], with the frames' traits kept in `known` for the next site.
pub(super) fn describe_with(sites: &Sites, site: SiteId, known: &mut FrameTraits) -> String {
    let frame = |f: &crate::model::Frame| Frame {
        file: sites.str(f.filename),
        line: f.line,
        name: sites.str(f.name),
    };
    let key = |f: &crate::model::Frame| (f.filename, f.name);
    for f in sites.frames(site) {
        known
            .0
            .entry(key(f))
            .or_insert_with(|| Traits::of(&frame(f)));
    }
    let frames: Vec<(Frame<'_>, &Traits)> = sites
        .frames(site)
        .iter()
        .map(|f| (frame(f), &known.0[&key(f)]))
        .collect();
    let Some(&(innermost, _)) = frames.first() else {
        return "(no frames)".into();
    };
    let operators: Vec<(usize, &str)> = frames
        .iter()
        .enumerate()
        .filter_map(|(i, (_, t))| t.operator.as_deref().map(|op| (i, op)))
        .collect();
    let op = operators
        .iter()
        .find(|(_, op)| !is_plumbing(op))
        .or(operators.last());
    // The nearest line of the program (another than the one named first).
    let user_line = |skip: usize| {
        let lines: Vec<&(Frame<'_>, &Traits)> = frames
            .iter()
            .enumerate()
            .filter(|&(i, (_, t))| i != skip && t.source_line && !t.in_torch && !t.noise)
            .map(|(_, f)| f)
            .collect();
        lines
            .iter()
            .find(|(_, t)| !t.installed)
            .or(lines.first())
            .map(|(f, _)| f.show())
    };
    // Without a user line: the next operator out (`aten::mm < AddmmBackward0`),
    // else the next meaningful frame.
    let outer = |from: usize, first: &str| {
        operators
            .iter()
            .filter(|(i, op)| *i >= from && !is_plumbing(op) && *op != first)
            .map(|(_, op)| op.to_string())
            .next()
            .or_else(|| {
                // Python or profiler frames; a bare C++ frame this far out is
                // the autograd engine's or the thread's.
                frames[from.min(frames.len())..]
                    .iter()
                    .filter(|(_, t)| !t.noise && t.operator.is_none())
                    // Named apart, after the rest.
                    .filter(|(f, _)| !f.name.starts_with(COMPILED_REGION))
                    .filter(|(_, t)| t.python_or_category)
                    .map(|(f, _)| f.show())
                    .find(|f| f != first)
            })
    };
    let (first, index) = match op {
        Some((i, op)) => (op.to_string(), *i),
        None => match frames
            .iter()
            .position(|(_, t)| t.source_line && !t.noise && !t.generated)
            .or_else(|| frames.iter().position(|(_, t)| !t.noise))
        {
            Some(i) => (frames[i].0.show(), i),
            None => return innermost.show(),
        },
    };
    let second = user_line(index)
        .filter(|line| *line != first)
        .or_else(|| outer(index + 1, &first));
    let name = match second {
        Some(second) => format!("{first} < {second}"),
        None => first,
    };
    // Made inside a compiled graph: which region (the innermost).
    match frames
        .iter()
        .find_map(|(f, _)| f.name.strip_prefix(COMPILED_REGION))
    {
        Some(region) => format!("{name} [compiled region {region}]"),
        None => name,
    }
}

/// A Python frame: a `.py` file, or the profiler's `file.py(N): name` form.
pub(super) fn is_python(file: &str, name: &str) -> bool {
    file.ends_with(".py")
        || name.contains(".py(")
        || name.starts_with("<built-in")
        || name.starts_with("nn.Module:")
}

pub(super) fn format_frame(file: &str, line: u32, name: &str) -> String {
    let name = clean_name(name);
    if file.is_empty() || file == "none" || file == "??" || is_category(file) {
        return name;
    }
    let file = file.replace('\\', "/");
    let short = short_path(&file);
    if line > 0 {
        format!("{short}:{line} {name}")
    } else {
        format!("{short} {name}")
    }
}

/// Library files from `site-packages/…`; user files as their last three components.
pub(super) fn short_path(file: &str) -> &str {
    for marker in ["site-packages/", "dist-packages/"] {
        if let Some((_, rest)) = file.rsplit_once(marker) {
            return rest;
        }
    }
    let mut cut = file.len();
    for _ in 0..3 {
        match file[..cut].rfind('/') {
            Some(i) => cut = i,
            None => return file,
        }
    }
    &file[cut + 1..]
}

pub(super) fn is_category(file: &str) -> bool {
    matches!(
        file,
        "cpu_op" | "python_function" | "user_annotation" | "operator" | "user"
    )
}

/// Drops object addresses from Python builtin names (`<built-in method empty
/// of type object at 0x7f…>` → `<built-in method empty>`): they differ run to run.
pub(super) fn clean_name(name: &str) -> String {
    if let Some(at) = name
        .find(" of type object at 0x")
        .or_else(|| name.find(" object at 0x"))
    {
        let head = &name[..at];
        let head = head.rsplit_once(" of ").map_or(head, |(h, _)| h);
        return format!("{head}>");
    }
    let mut s = name.to_owned();
    if s.len() > 160 {
        let mut cut = 157;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// Names of frames that say nothing (see [`is_noise`]).
const NOISE_NAMES: &[&str] = &[
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
    "_PyEval",
    "_PyObject",
    "_PyFunction",
    "CUDACachingAllocator",
    "c10::",
    "torch::autograd::Node::",
    "torch::autograd::Engine::",
    "torch::autograd::call_function",
    "std::",
    "start_thread",
    "at::detail::empty",
    "_call_impl",
    "_wrapped_call_impl",
    "run_backward",
    "_engine_run_backward",
    "torch/autograd/__init__.py",
    "torch/_tensor.py",
    "_PyErr",
    "PyType_",
    "THPVariable",
    "Py_RunMain",
    "pymain_",
];
/// Files of frames that say nothing (see [`is_noise`]).
const NOISE_FILES: &[&str] = &[
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
    "memory_snapshot.cpp",
    "CUDACachingAllocator.cpp",
    "torch/nn/modules/module.py",
];

/// Frames that say nothing about the program: unwinder, allocator and
/// interpreter internals (the list MemoryViz hides, plus module plumbing).
pub(super) fn is_noise(file: &str, name: &str) -> bool {
    if file == "??"
        && (name.is_empty() || name == "??" || name.starts_with("Py") || name.starts_with("_Py"))
    {
        return true;
    }
    if name.starts_with("Py") && !name.contains("::") || name.starts_with("__libc") {
        return true;
    }
    if file.is_empty() && name.is_empty() {
        return true;
    }
    // One pass over each string for all its needles: a `contains` per
    // needle was 3% of the instructions of `memcut batch` over the corpus
    // (callgrind; naming the sites of traces with stacks).
    static SEARCH: std::sync::LazyLock<[aho_corasick::AhoCorasick; 2]> =
        std::sync::LazyLock::new(|| {
            [NOISE_NAMES, NOISE_FILES].map(crate::vocabulary::needle_search)
        });
    let [names, files] = &*SEARCH;
    names.is_match(name) || files.is_match(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(frames: &[(&str, u32, &str)]) -> String {
        let mut sites = Sites::default();
        let site = sites.intern_frames(frames);
        describe(&sites, site)
    }

    /// A compiled graph's allocation names the user's line, not Inductor's
    /// generated file, and its region (a snapshot's `compile_context`, a
    /// profiler range).
    #[test]
    fn compiled_regions_are_named_and_generated_code_skipped() {
        let with_stack = name(&[
            (
                "python_function",
                0,
                "<built-in function _empty_strided_cpu>",
            ),
            (
                "python_function",
                0,
                "/tmp/torchinductor_root/x3/cx3ak.py(928): call",
            ),
            ("python_function", 0, "model.py(168): forward"),
            ("user_annotation", 0, "Torch-Compiled Region: 0/0"),
        ]);
        assert_eq!(
            with_stack,
            "<built-in function _empty_strided_cpu> < model.py(168): forward [compiled region 0/0]"
        );
        let snapshot = name(&[
            ("train.py", 7, "step"),
            ("user_annotation", 0, "Torch-Compiled Region: 1/0"),
        ]);
        assert_eq!(snapshot, "train.py:7 step [compiled region 1/0]");
        // A graph FX generated (`aot_eager`) is named by a hash: skipped too.
        let fx = name(&[
            ("cpu_op", 0, "aten::mm"),
            (
                "python_function",
                0,
                "fx_generated__xqfgrv3smzk2rq3i4i7h2byasrt4u.py(4): forward",
            ),
            (
                "python_function",
                0,
                "torch/_dynamo/backends/debugging.py(340): run",
            ),
            ("python_function", 0, "train.py(25): <module>"),
        ]);
        assert_eq!(fx, "aten::mm < train.py(25): <module>");
        let no_operator = name(&[
            (
                "fx_generated__xqfgrv3smzk2rq3i4i7h2byasrt4u.py",
                5,
                "forward",
            ),
            ("train.py", 25, "<module>"),
        ]);
        assert_eq!(no_operator, "train.py:25 <module>");
        assert_eq!(name(&[("train.py", 7, "step")]), "train.py:7 step");
    }

    /// The operator each kind of frame names.
    #[test]
    fn operators_of_every_kind_of_frame() {
        let op = |file: &str, name: &str| {
            operator(&Frame {
                file,
                line: 0,
                name,
            })
            .map(|op| op.into_owned())
        };
        assert_eq!(
            op("??", "at::_ops::div_Tensor::call(at::Tensor const&)").as_deref(),
            Some("aten::div.Tensor")
        );
        assert_eq!(
            op("??", "at::_ops::bmm::call(at::Tensor const&)").as_deref(),
            Some("aten::bmm")
        );
        assert_eq!(op("??", "at::_ops::a::b::call(x)"), None);
        assert_eq!(op("??", "at::_ops::bmm::redispatch(x)"), None);
        assert_eq!(
            op(
                "??",
                "torch::autograd::generated::DivBackward0::apply(std::vector)"
            )
            .as_deref(),
            Some("DivBackward0")
        );
        assert_eq!(
            op("??", "torch::autograd::AccumulateGrad::apply(x)").as_deref(),
            Some("AccumulateGrad")
        );
        assert_eq!(
            op("??", "at::cuda::getNewWorkspace()").as_deref(),
            Some("cuBLAS workspace")
        );
        assert_eq!(op("cpu_op", "aten::addmm").as_deref(), Some("aten::addmm"));
        assert_eq!(op("train.py", "step"), None);
    }

    /// One pass for all the needles answers as a `contains` per needle.
    #[test]
    fn noise_is_any_needle_in_the_name_or_the_file() {
        let naive = |file: &str, name: &str| {
            NOISE_NAMES.iter().any(|n| name.contains(n))
                || NOISE_FILES.iter().any(|f| file.contains(f))
        };
        let mut texts: Vec<String> = ["", "train.py", "forward", "é"].map(String::from).to_vec();
        for n in NOISE_NAMES.iter().chain(NOISE_FILES) {
            texts.push(n.to_string());
            texts.push(format!("x/{n}é"));
            texts.push(n[1..].to_string());
            texts.push(n[..n.len() - 1].to_string());
        }
        for file in &texts {
            for name in &texts {
                // The rules before the needles (`??`, `Py…`) answer alike.
                let by_rule = file == "??"
                    || name.starts_with("Py")
                    || name.starts_with("__libc")
                    || file.is_empty() && name.is_empty();
                if !by_rule {
                    assert_eq!(is_noise(file, name), naive(file, name), "{file:?} {name:?}");
                }
            }
        }
    }
}
