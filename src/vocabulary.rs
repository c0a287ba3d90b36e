//! The frame vocabulary: every test memcut makes on the names PyTorch
//! writes — Python frames (`torch/optim/adamw.py`, `nn.Module: Block_1`),
//! C++ frames (`SavedVariable::reset_data()`), profiler operators and
//! annotations (`aten::addmm`, `MulBackward0`, `Optimizer.step#AdamW.step`)
//! — and what they say: the phase, the optimizer, autograd at work or
//! freeing a graph, a module call, the way a tensor was made. Classify, the
//! planner's facts and the findings read these, so each name is known in
//! one place.
//!
//! Per site, [`site_facts`] is the union of what each frame says
//! ([`frame_facts`]), computed once per site by the classifier
//! ([`all_site_facts`]).

mod operators;

use std::cell::RefCell;

use rustc_hash::FxHashMap;

use crate::model::{Frame, SiteId, Sites, StrId};
pub use operators::saves_its_result;
use operators::Outermost;

/// What the program was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Unknown,
    Init,
    DataLoading,
    Forward,
    Backward,
    Optimizer,
    ZeroGrad,
}

/// Evidence read off one site's frames, computed once per site.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SiteFacts {
    pub optimizer: bool,
    pub zero_grad: bool,
    pub backward: bool,
    pub accumulate_grad: bool,
    pub forward: bool,
    pub module_init: bool,
    pub data_loading: bool,
    pub kv_cache: bool,
    pub recompute: bool,
    /// No Python frame, and the outermost operator call computes (Chrome
    /// traces recorded without stacks).
    pub computes: bool,
    /// No Python frame, and the outermost operator call creates a tensor
    /// from nothing (`aten::empty`, `aten::randn`, `aten::to`, …).
    pub creates: bool,
    /// Some frame concatenates (`aten::cat`).
    pub concatenates: bool,
    /// Made in a Python constructor (`__init__` of any class), outside any
    /// forward pass or cache.
    pub constructor: bool,
    /// Some frame is attention code (`attn`, `Attention`).
    pub attention: bool,
    /// Some frame is a Python frame (snapshot stacks, `with_stack=True`
    /// traces): the site names a line of the program.
    pub python: bool,
    /// Some frame is autograd dropping a tensor it saved for backward
    /// (`SavedVariable::reset_data`, `…Backward0::release_variables`): the
    /// site is where a saved tensor was freed, so the tensor was saved for
    /// a backward, an activation.
    pub frees_saved_tensor: bool,
    /// The frames are a free's stack, not an allocation's (the caching
    /// allocator's `free`, a tensor's destructor, autograd releasing what
    /// it saved): a snapshot recorded with `context="all"` gives frees
    /// their own stacks.
    pub free_stack: bool,
}

impl SiteFacts {
    pub fn phase(&self) -> Phase {
        if self.zero_grad {
            Phase::ZeroGrad
        } else if self.optimizer {
            Phase::Optimizer
        } else if self.backward || self.accumulate_grad {
            Phase::Backward
        } else if self.module_init {
            Phase::Init
        } else if self.data_loading {
            Phase::DataLoading
        } else if self.forward || self.computes {
            Phase::Forward
        } else {
            Phase::Unknown
        }
    }
}

/// Evidence read off one frame; a site's facts are the union over its frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct FrameFacts {
    facts: SiteFacts,
    attention: bool,
    concat_or_copy: bool,
    /// A Python `__init__` frame, of any class.
    init: bool,
    /// A Python frame (snapshot stacks, `with_stack=True` traces).
    python: bool,
    /// What the frame's operator call does (operator frames only). Frames
    /// are merged innermost first, so a site keeps its outermost call's.
    outermost: Option<Outermost>,
}

impl FrameFacts {
    fn merge(&mut self, o: &FrameFacts) {
        let (f, g) = (&mut self.facts, &o.facts);
        f.optimizer |= g.optimizer;
        f.zero_grad |= g.zero_grad;
        f.backward |= g.backward;
        f.accumulate_grad |= g.accumulate_grad;
        f.forward |= g.forward;
        f.module_init |= g.module_init;
        f.data_loading |= g.data_loading;
        f.kv_cache |= g.kv_cache;
        f.recompute |= g.recompute;
        f.frees_saved_tensor |= g.frees_saved_tensor;
        f.free_stack |= g.free_stack;
        f.concatenates |= g.concatenates;
        self.attention |= o.attention;
        self.concat_or_copy |= o.concat_or_copy;
        self.init |= o.init;
        self.python |= o.python;
        if o.outermost.is_some() {
            self.outermost = o.outermost;
        }
    }

    fn finish(self) -> SiteFacts {
        let mut f = self.facts;
        // A cache grows by concatenating or copying new keys/values under attention.
        f.kv_cache |= self.attention && self.concat_or_copy;
        f.attention = self.attention;
        f.python = self.python;
        // Caches are built by constructors too, and say so in their frames;
        // objects built inside a forward pass are part of it.
        f.constructor = self.init && !f.forward && !f.kv_cache;
        // Operators are the evidence only where Python frames, which say
        // more (which module, which user line), are missing. What a
        // constructor computes (`torch.randn(…) * 0.02`) is no forward pass.
        f.computes = self.outermost == Some(Outermost::Computes) && !self.python;
        f.creates = self.outermost == Some(Outermost::Creates) && !self.python;
        f
    }
}

/// Reads a site's frames for evidence. Patterns cover Python frames
/// (`filename`, `name`), C++ frames and profiler operator names.
pub fn site_facts(sites: &Sites, site: SiteId) -> SiteFacts {
    let mut acc = FrameFacts::default();
    for frame in sites.frames(site) {
        acc.merge(&frame_facts(sites, frame));
    }
    acc.finish()
}

/// [`site_facts`] of every site. Sites share most of their frames, so each
/// distinct (file, name) pair is read once (1M-entry snapshot: ~2k sites,
/// ~75k frames, ~400 distinct).
pub(crate) fn all_site_facts(sites: &Sites) -> Vec<SiteFacts> {
    let mut by_frame: FxHashMap<(StrId, StrId), FrameFacts> = FxHashMap::default();
    (0..sites.len() as SiteId)
        .map(|site| {
            let mut acc = FrameFacts::default();
            for frame in sites.frames(site) {
                let ff = by_frame
                    .entry((frame.filename, frame.name))
                    .or_insert_with(|| frame_facts(sites, frame));
                acc.merge(ff);
            }
            acc.finish()
        })
        .collect()
}

/// A list of substrings searched in one pass ([`needle_search`],
/// [`needle_bits`]), and an enum naming each by its place (its bit).
macro_rules! needles {
    ($needle:ident, $needles:ident { $($id:ident = $text:literal,)* }) => {
        /// A substring of the list beside it, by its place there.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy)]
        enum $needle { $($id,)* }
        const $needles: &[&str] = &[$($text,)*];
        const _: () = assert!($needles.len() <= 64);
    };
}

/// One pass over `text` for all of a search's needles (every occurrence,
/// overlapping ones too): bit `k` set when needle `k` occurs.
fn needle_bits(search: &aho_corasick::AhoCorasick, text: &str) -> u64 {
    search
        .find_overlapping_iter(text)
        .fold(0u64, |bits, m| bits | 1 << m.pattern().as_usize())
}

/// The Aho–Corasick search for `needles`: the contiguous NFA, since a few
/// hundred to a few thousand texts are searched and it builds in a
/// fraction of a DFA's time.
pub(crate) fn needle_search(needles: &[&str]) -> aho_corasick::AhoCorasick {
    aho_corasick::AhoCorasick::builder()
        .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
        .build(needles)
        .expect("the needles are valid patterns")
}

// Every substring [`frame_facts`] looks for in a frame's file or name,
// each a bit of what [`Found`] finds.
needles! { Needle, NEEDLES {
    OPTIM = "torch/optim/",
    OPTIMIZER_STEP = "Optimizer.step",
    ZERO_GRAD = "zero_grad",
    ACCUMULATE_GRAD = "AccumulateGrad",
    RUN_BACKWARD = "run_backward",
    EVALUATE_FUNCTION = "autograd::engine::evaluate_function",
    ENGINE = "torch::autograd::Engine",
    COMPILED_BACKWARD = "CompiledFunction(Backward)",
    FUNCTIONAL = "torch/nn/functional.py",
    RESET_PARAMETERS = "reset_parameters",
    NN_INIT = "torch/nn/init.py",
    LOAD_STATE_DICT = "load_state_dict",
    FROM_PRETRAINED = "from_pretrained",
    DATA_LOADER = "DataLoader",
    DATALOADER_PY = "dataloader.py",
    COLLATE = "collate",
    CACHE_UTILS = "cache_utils",
    PAST_KEY = "past_key",
    KV_CACHE = "kv_cache",
    KEY_CACHE = "key_cache",
    VALUE_CACHE = "value_cache",
    KVCACHE = "KVCache",
    DYNAMIC_CACHE = "DynamicCache",
    STATIC_CACHE = "StaticCache",
    CHECKPOINT_PY = "torch/utils/checkpoint.py",
    CHECKPOINT_FUNCTION = "CheckpointFunction",
    ATTN = "attn",
    ATTENTION = "attention",
    ATTENTION_CLASS = "Attention",
    OPTIMIZER_DIR = "/optimizer/",
    OPTIM_DIR = "/optim/",
    OPTIMIZER = "optimizer",
    AUTOGRAD_DIR = "torch/autograd/",
    TENSOR_PY = "torch/_tensor.py",
    NN_MODULES = "torch/nn/modules/",
    MODULE_PY = "torch/nn/modules/module.py",
    BACKWARD0 = "Backward0",
    BACKWARD1 = "Backward1",
    BACKWARD = "backward",
    CALL_IMPL = "_call_impl",
    FORWARD_LINE = "): forward",
    FORWARD_ANNOTATION = "## forward ##",
    INIT = "__init__",
    PY_LINE = ".py(",
    RESET_DATA = "SavedVariable::reset_data",
    RELEASE_VARIABLES = "release_variables",
    METHOD_CAT = "method cat>",
    ATEN_CAT = "aten::cat",
    INDEX_COPY = "index_copy",
    ATEN_COPY = "aten::copy_",
    SCATTER = "scatter",
} }

/// Which of [`NEEDLES`] a frame's file and name contain: one pass over
/// each (Aho–Corasick, every occurrence) instead of ~50 substring searches,
/// each of which set up a searcher. Measured with callgrind, whole process
/// (docs/performance.md): the corpus's TraceLens bert-small trace −5.1%
/// instructions, the cs336-wedsonlin medium_512 snapshot −1.6%.
struct Found {
    file: u64,
    name: u64,
}

impl Found {
    fn of(file: &str, name: &str) -> Found {
        static SEARCH: std::sync::LazyLock<aho_corasick::AhoCorasick> =
            std::sync::LazyLock::new(|| needle_search(NEEDLES));
        Found {
            file: needle_bits(&SEARCH, file),
            name: needle_bits(&SEARCH, name),
        }
    }

    fn in_file(&self, n: Needle) -> bool {
        self.file >> n as u32 & 1 == 1
    }

    fn in_name(&self, n: Needle) -> bool {
        self.name >> n as u32 & 1 == 1
    }

    /// In the file or the name.
    fn has(&self, n: Needle) -> bool {
        self.in_file(n) || self.in_name(n)
    }
}

fn frame_facts(sites: &Sites, frame: &Frame) -> FrameFacts {
    use Needle::*;
    let mut ff = FrameFacts::default();
    let f = &mut ff.facts;
    let mut attention = false;
    let mut concat_or_copy = false;
    // Windows stacks use backslashes; patterns are written with `/`.
    let file = sites.str(frame.filename).replace('\\', "/");
    let name = sites.str(frame.name).replace('\\', "/");
    let (file, name) = (file.as_str(), name.as_str());
    let found = Found::of(file, name);
    let has = |n: Needle| found.has(n);
    let in_file = |n: Needle| found.in_file(n);
    let in_name = |n: Needle| found.in_name(n);
    f.optimizer |= has(OPTIM)
        || in_file(OPTIMIZER_DIR)
        || in_file(OPTIM_DIR)
        || has(OPTIMIZER_STEP)
        || name.starts_with("Optimizer.")
        || (in_file(OPTIMIZER) && name == "step");
    f.zero_grad |= has(ZERO_GRAD);
    f.accumulate_grad |= has(ACCUMULATE_GRAD);
    f.backward |= has(RUN_BACKWARD)
        || has(EVALUATE_FUNCTION)
        || has(ENGINE)
        || (!frees_a_graph(name) && (in_name(BACKWARD0) || in_name(BACKWARD1)))
        || has(COMPILED_BACKWARD)
        || (in_file(AUTOGRAD_DIR) && name == "backward")
        || (in_file(TENSOR_PY) && in_name(BACKWARD));
    f.forward |= is_module_frame(name)
        || is_compiled_region_frame(name)
        || has(FUNCTIONAL)
        || in_name(CALL_IMPL)
        || name == "forward"
        || in_name(FORWARD_LINE)
        || in_name(FORWARD_ANNOTATION);
    f.module_init |= (in_file(NN_MODULES) && in_name(INIT))
        || in_name(NN_MODULES) && in_name(INIT)
        || has(RESET_PARAMETERS)
        || has(NN_INIT)
        || has(LOAD_STATE_DICT)
        || name.ends_with("): _apply")
        || (in_file(MODULE_PY) && matches!(name, "_apply" | "to" | "cuda" | "convert"))
        || has(FROM_PRETRAINED);
    // A Python constructor: `__init__` in a snapshot frame, `…py(12): __init__`
    // in a profiler's Python frame.
    ff.init = name == "__init__" || (name.ends_with("): __init__") && in_name(PY_LINE));
    ff.python = file.ends_with(".py")
        || file == "python_function"
        || in_name(PY_LINE)
        || name.starts_with("<built-in")
        || is_module_frame(name);
    f.data_loading |= has(DATA_LOADER) || has(DATALOADER_PY) || has(COLLATE);
    f.kv_cache |= has(CACHE_UTILS)
        || has(PAST_KEY)
        || has(KV_CACHE)
        || has(KEY_CACHE)
        || has(VALUE_CACHE)
        || has(KVCACHE)
        || has(DYNAMIC_CACHE)
        || has(STATIC_CACHE);
    f.recompute |= has(CHECKPOINT_PY) || has(CHECKPOINT_FUNCTION);
    f.frees_saved_tensor |= in_name(RESET_DATA) || in_name(RELEASE_VARIABLES);
    f.free_stack |= is_free_frame(name);
    attention |= has(ATTN) || has(ATTENTION) || has(ATTENTION_CLASS);
    concat_or_copy |= in_name(METHOD_CAT)
        || in_name(ATEN_CAT)
        || in_name(INDEX_COPY)
        || in_name(ATEN_COPY)
        || in_name(SCATTER);
    f.concatenates = operators::concatenates(name);
    if file == "cpu_op" || file == "operator" {
        ff.outermost = operators::outermost(name);
        f.backward |= is_backward_function(name);
    }
    ff.attention = attention;
    ff.concat_or_copy = concat_or_copy;
    ff
}

pub const MATMUL: &str = "a matmul-like call";

/// What one frame says of a cast: bit 0 `cached_cast`, bit 1 a copy
/// (`aten::_to_copy`, `aten::to`), bit 2 a matmul-like operator.
fn cast_bits(name: &str) -> u8 {
    let cached = name.contains("cached_cast");
    let copy = name.contains("aten::_to_copy") || name == "aten::to";
    let matmul = ["linear", "matmul", "einsum", "addmm", "bmm", "conv"]
        .iter()
        .any(|m| name.contains(m));
    u8::from(cached) | u8::from(copy) << 1 | u8::from(matmul) << 2
}

/// How frames whose [`cast_bits`] are `bits` (or-ed) show a cast.
fn cast_of(bits: u8) -> Option<&'static str> {
    // Autocast casts inside the operator it runs (`aten::linear` >
    // `aten::_to_copy`); a cast on its own is a `.to(dtype)` of the
    // program's (a model converted before it is moved).
    match (bits & 1 != 0, bits & 2 != 0, bits & 4 != 0) {
        (true, _, _) => Some("at::autocast::cached_cast"),
        (_, true, true) => Some("aten::_to_copy inside a matmul"),
        (_, false, true) => Some(MATMUL),
        _ => None,
    }
}

/// How sites show casts (autocast's, or the program's `.to(dtype)`): an
/// explicit cast frame or operator, or (Python frames only) a matmul-like
/// call, inside which autocast casts. Each distinct frame name and each
/// site is read once.
pub struct CastSites<'a> {
    sites: &'a Sites,
    by_name: RefCell<FxHashMap<StrId, u8>>,
    by_site: RefCell<FxHashMap<SiteId, Option<&'static str>>>,
}

impl<'a> CastSites<'a> {
    pub fn new(sites: &'a Sites) -> CastSites<'a> {
        CastSites {
            sites,
            by_name: RefCell::default(),
            by_site: RefCell::default(),
        }
    }

    /// How `site` shows a cast, if it does.
    pub fn how(&self, site: SiteId) -> Option<&'static str> {
        if let Some(&how) = self.by_site.borrow().get(&site) {
            return how;
        }
        let mut by_name = self.by_name.borrow_mut();
        let bits = self.sites.frames(site).iter().fold(0, |bits, f| {
            bits | *by_name
                .entry(f.name)
                .or_insert_with(|| cast_bits(self.sites.str(f.name)))
        });
        let how = cast_of(bits);
        self.by_site.borrow_mut().insert(site, how);
        how
    }

    /// Whether `site` is an explicit cast: `cached_cast`, or
    /// `aten::_to_copy` inside a matmul-like operator (autocast casting its
    /// inputs).
    pub fn explicit(&self, site: SiteId) -> bool {
        matches!(self.how(site), Some(how) if how != MATMUL)
    }
}

/// Whether a frame is autograd freeing a graph's saved tensors rather than
/// computing a backward: `BmmBackward0::release_variables()`,
/// `SavedVariable::reset_data()`, `deleteNode`, a node's destructor. A
/// forward-only run whose outputs are dropped frees its graph this way, so
/// such a frame is no evidence of a backward pass (a real backward shows the
/// engine's frames, `evaluate_function`, as well).
pub fn frees_a_graph(name: &str) -> bool {
    name.contains("release_variables")
        || name.contains("SavedVariable::reset_data")
        || name.contains("deleteNode")
        || (name.contains("Backward") && name.contains("::~"))
}

/// Whether a frame is memory being given back: the caching allocator's
/// `free` (`DeviceCachingAllocator::free`, `raw_delete`), a tensor's storage
/// released (`release_resources`, `~TensorImpl`, `StorageImpl`'s
/// destructor), autograd freeing a graph ([`frees_a_graph`]).
pub fn is_free_frame(name: &str) -> bool {
    (name.contains("CachingAllocator") && (name.contains("::free") || name.contains("raw_delete")))
        || name.contains("release_resources")
        || name.contains("~TensorImpl")
        || name.contains("~StorageImpl")
        || frees_a_graph(name)
}

/// Whether a frame is attention's math path (`aten::_scaled_dot_product_attention_math`,
/// or its C++ frame `at::native::_scaled_dot_product_attention_math`). It
/// computes in fp32 whatever its inputs' dtype: PyTorch keeps query, key and
/// value in high precision there for bf16 and fp16 inputs, so what it saves
/// for backward is fp32 in a bf16 run too.
pub fn is_attention_math_frame(name: &str) -> bool {
    name.contains("_scaled_dot_product_attention_math")
}

/// Whether a Python frame is a call of `scaled_dot_product_attention`
/// (`<built-in function scaled_dot_product_attention>`): with Python frames
/// only, which kernel it ran shows only in how many tensors one call made
/// (see [`crate::plan::fp32`]).
pub fn is_attention_call_frame(name: &str) -> bool {
    name.contains("scaled_dot_product_attention") && !name.contains("::")
}

/// Whether a frame names a module instance, as the profiler's stacks do
/// (`nn.Module: Block_1`): one call of that module allocated below it.
pub fn is_module_frame(name: &str) -> bool {
    name.starts_with("nn.Module:")
}

/// A module frame's class: `nn.Module: Linear_3` → `Linear`.
pub fn module_class(frame: &str) -> &str {
    let name = frame.strip_prefix("nn.Module: ").unwrap_or(frame);
    match name.rsplit_once('_') {
        Some((class, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => class,
        _ => name,
    }
}

/// A Python source line (`file.py` with a line, or the profiler's
/// `file.py(N): name`): not a builtin, not a module's name.
pub fn is_source_line(file: &str, name: &str) -> bool {
    (file.ends_with(".py") || name.contains(".py("))
        && !name.starts_with("<built-in")
        && !is_module_frame(name)
}

/// Whether a module frame names an `nn.Sequential` (`nn.Module:
/// Sequential_0`), which calls its children in turn, each on what the one
/// before returned.
pub fn is_sequential_frame(name: &str) -> bool {
    name.strip_prefix("nn.Module:")
        .is_some_and(|n| n.trim_start().starts_with("Sequential_"))
}

/// The innermost module instance a site's frames name, if any.
pub fn innermost_module(sites: &Sites, site: SiteId) -> Option<StrId> {
    sites
        .frames(site)
        .iter()
        .find(|f| is_module_frame(sites.str(f.name)))
        .map(|f| f.name)
}

/// Whether a profiler operator (`cpu_op`) named `name` is one *call* in
/// the sense of PyTorch's memory profiler (`torch/profiler/_memory_profiler.py`,
/// `_extract_leaf_events`): an operator with a schema (a namespaced name:
/// `aten::addmm`, `torchvision::nms`, `torch::autograd::AccumulateGrad`) or
/// an autograd backward function (`AddmmBackward0`, a custom `FooBackward`).
/// What such a call allocates and frees before it returns is its scratch
/// space, whatever it calls inside.
///
/// Not calls: the autograd engine's wrapper
/// `autograd::engine::evaluate_function: …`, which runs a backward function
/// *and* accumulates its outputs into other gradients, and un-namespaced
/// ranges (`ProfilerStep#N`, `Optimizer.step#…` in traces that file them as
/// operators), which group many calls.
pub fn is_operator_call(name: &str) -> bool {
    if name.starts_with("autograd::engine::evaluate_function") {
        return false;
    }
    name.contains("::") || is_backward_function(name)
}

/// The number of a profiler step's range (`ProfilerStep#2` → 2): the
/// profiler's schedule counts the steps of the loop it records from 0, so
/// a number above 0 says the loop ran before the recorded step.
pub fn profiler_step_number(name: &str) -> Option<u64> {
    name.strip_prefix("ProfilerStep#")?.parse().ok()
}

/// Whether a frame is a `torch.compile`d graph running: its region
/// (`Torch-Compiled Region: 0/0`, a profiler range or a snapshot entry's
/// `compile_context`), the autograd function that runs it
/// (`CompiledFunction`; its backward is `CompiledFunctionBackward`, a
/// backward function), the compiled graph's call (`## Call CompiledFxGraph
/// <hash> ##`), or Inductor's generated code (`torchinductor_<user>/…py`).
pub fn is_compiled_region_frame(name: &str) -> bool {
    name.starts_with(COMPILED_REGION)
        || name == "CompiledFunction"
        || name.starts_with("## Call CompiledFxGraph")
        || name.contains("/torchinductor_")
}

/// The innermost frame of a Python traceback as text (`File "model.py",
/// line 14, in forward` lines, outermost first, each followed by its code:
/// an FX graph node's `stack_trace`, which a snapshot's
/// `fx_original_trace` carries): its file, line and function.
pub fn innermost_traceback_frame(text: &str) -> Option<(&str, u32, &str)> {
    text.lines().rev().find_map(|line| {
        let rest = line.trim_start().strip_prefix("File \"")?;
        let (file, rest) = rest.split_once("\", line ")?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let number = rest[..digits].parse().ok()?;
        let function = rest[digits..].strip_prefix(", in ")?.trim_end();
        (!file.is_empty() && !function.is_empty()).then_some((file, number, function))
    })
}

/// Whether a path (a frame's file, or a profiler frame's name) is code FX
/// generated for a graph module (`fx_generated__<hash>.py`: `torch.compile`
/// with a backend that runs FX graphs, such as `aot_eager`, when
/// `torch.fx.experimental._config.enrich_profiler_metadata` is on).
pub fn is_fx_generated(path: &str) -> bool {
    path.contains("fx_generated_")
}

/// PyTorch's DistributedDataParallel module file.
pub const DDP_FILE: &str = "torch/nn/parallel/distributed.py";

/// Whether a name (a frame's file or function, a profiler range) shows
/// DistributedDataParallel: its module's file, or the profiler's
/// `DistributedDataParallel.forward` range.
pub fn is_ddp_name(name: &str) -> bool {
    name.contains(DDP_FILE) || name.contains("DistributedDataParallel")
}

/// How a compiled region's name starts (`Torch-Compiled Region: 0/0`).
pub const COMPILED_REGION: &str = "Torch-Compiled Region: ";

/// Whether a profiler operator named `name` is an autograd backward function:
/// `MulBackward0`, `CopyBackwards`, a custom `MyFunctionBackward`, and the
/// digitless names of PyTorch before 1.10 (`AddmmBackward`).
pub fn is_backward_function(name: &str) -> bool {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    !name.contains("::") && (stem.ends_with("Backward") || stem.ends_with("Backwards"))
}

/// What a name anywhere in a trace (an annotation, an operator, a frame's
/// file or function) says about the run as a whole: the planner's facts
/// count these over every name. (A site's phase is [`frame_facts`]'s, which
/// reads each frame's file and function apart.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NameSays {
    /// A backward pass runs (the engine, backward functions, gradient accumulation); a graph being freed is none.
    pub backward: bool,
    /// An optimizer's step.
    pub optimizer_step: bool,
    /// A multi-tensor (`foreach`) optimizer step.
    pub foreach: bool,
    /// A fused optimizer step.
    pub fused: bool,
    /// A single-tensor (for-loop) optimizer step.
    pub single_tensor: bool,
    /// An 8-bit optimizer (bitsandbytes).
    pub eight_bit_optimizer: bool,
    /// Inference: `inference_mode`, `generate`, a serving engine.
    pub inference: bool,
    /// A serving engine (vLLM, SGLang).
    pub serving_engine: bool,
    /// Activation checkpointing.
    pub checkpoint: bool,
    /// Collective communication (NCCL, c10d).
    pub collectives: bool,
    /// Data parallelism (DDP, Megatron, DeepSpeed).
    pub data_parallel: bool,
    /// Sharded data parallelism (FSDP, ZeRO).
    pub sharded: bool,
}

/// [`NameSays`] of one name, `\` already read as `/`.
pub fn name_says(n: &str) -> NameSays {
    use SaysNeedle::*;
    static SEARCH: std::sync::LazyLock<aho_corasick::AhoCorasick> =
        std::sync::LazyLock::new(|| needle_search(SAYS_NEEDLES));
    let found = needle_bits(&SEARCH, n);
    let has = |k: SaysNeedle| found >> k as u32 & 1 == 1;
    NameSays {
        backward: has(EVALUATE_FUNCTION)
            || (!frees_a_graph(n) && (has(BACKWARD0) || has(BACKWARD1)))
            || has(ACCUMULATE_GRAD)
            || has(RUN_BACKWARD)
            || has(ENGINE),
        optimizer_step: n.starts_with("Optimizer.step#") || has(OPTIM),
        foreach: has(MULTI_TENSOR)
            || n.starts_with("aten::_foreach_")
            || has(METHOD_FOREACH)
            || has(TORCH_FOREACH),
        fused: has(FUSED_ADAM_)
            || has(FUSED_SGD)
            || n.starts_with("aten::_fused_")
            || has(FUSED_ADAM)
            || has(FUSED_ADAM_CLASS),
        single_tensor: has(SINGLE_TENSOR),
        eight_bit_optimizer: has(BITSANDBYTES) || (has(EIGHT_BIT) && has(OPTIM_WORD)),
        inference: has(INFERENCE_MODE)
            || has(GENERATION)
            || has(VLLM)
            || has(SGLANG)
            || has(MODEL_EXECUTOR)
            || n.ends_with(": generate"),
        serving_engine: has(VLLM)
            || has(SGLANG)
            || n.starts_with("_C_cache_ops::")
            || n.starts_with("sglang::")
            || n.starts_with("vllm::"),
        checkpoint: has(CHECKPOINT_PY) || has(CHECKPOINT_FUNCTION) || has(CHECKPOINT_WRAPPER),
        collectives: n.starts_with("nccl:")
            || n.starts_with("c10d::")
            || n.starts_with("record_param_comms")
            || has(PROCESS_GROUP_NCCL)
            || has(RCCL),
        data_parallel: is_ddp_name(n) || has(MEGATRON) || has(DEEPSPEED_ENGINE),
        sharded: has(FSDP)
            || has(FULLY_SHARDED)
            || has(FULLY_SHARD)
            || has(DEEPSPEED_ZERO)
            || has(DISTRIB_OPTIMIZER),
    }
}

// What [`name_says`] looks for in a name, found in one pass: ~45
// `contains` per name, each setting up a searcher, were 1% of the
// instructions of `memcut batch` over the corpus (callgrind).
needles! { SaysNeedle, SAYS_NEEDLES {
    EVALUATE_FUNCTION = "autograd::engine::evaluate_function",
    BACKWARD0 = "Backward0",
    BACKWARD1 = "Backward1",
    ACCUMULATE_GRAD = "AccumulateGrad",
    RUN_BACKWARD = "run_backward",
    ENGINE = "torch::autograd::Engine",
    OPTIM = "torch/optim/",
    MULTI_TENSOR = "_multi_tensor_",
    METHOD_FOREACH = "method _foreach_",
    TORCH_FOREACH = "torch._foreach_",
    FUSED_ADAM_ = "_fused_adam",
    FUSED_SGD = "_fused_sgd",
    FUSED_ADAM = "fused_adam",
    FUSED_ADAM_CLASS = "FusedAdam",
    SINGLE_TENSOR = "_single_tensor_",
    BITSANDBYTES = "bitsandbytes/optim",
    EIGHT_BIT = "8bit",
    OPTIM_WORD = "optim",
    INFERENCE_MODE = "inference_mode",
    GENERATION = "transformers/generation/",
    VLLM = "vllm/",
    SGLANG = "sglang/",
    MODEL_EXECUTOR = "model_executor",
    CHECKPOINT_PY = "torch/utils/checkpoint.py",
    CHECKPOINT_FUNCTION = "CheckpointFunction",
    CHECKPOINT_WRAPPER = "checkpoint_wrapper",
    PROCESS_GROUP_NCCL = "ProcessGroupNCCL",
    RCCL = "rccl",
    MEGATRON = "megatron/core/distributed",
    DEEPSPEED_ENGINE = "deepspeed/runtime/engine.py",
    FSDP = "torch/distributed/fsdp",
    FULLY_SHARDED = "FullyShardedDataParallel",
    FULLY_SHARD = "fully_shard",
    DEEPSPEED_ZERO = "deepspeed/runtime/zero/",
    DISTRIB_OPTIMIZER = "distrib_optimizer",
} }

/// The optimizer class a name shows: a step annotation
/// (`Optimizer.step#AdamW.step`) or a frame in `torch/optim/<file>.py`
/// (a file name, or a profiler frame name that starts with one:
/// `torch/optim/adamw.py(211): step`). One table for every reader.
pub fn optimizer_class(name: &str) -> Option<String> {
    if let Some(rest) = name.strip_prefix("Optimizer.step#") {
        // Any class the annotation names: a user's own optimizer too.
        let class = rest.split('.').next().unwrap_or(rest);
        return (!class.is_empty()).then(|| class.to_owned());
    }
    // Most names are not the optimizer's: refused before any allocation.
    if !name.contains("optim") {
        return None;
    }
    let name = name.replace('\\', "/");
    let file = name.split("torch/optim/").nth(1)?;
    let stem = file.split(['.', '(', ':']).next()?;
    OPTIMIZERS
        .iter()
        .find(|(s, _)| *s == stem)
        .map(|(_, c)| (*c).to_owned())
}

/// `torch/optim/` file stems and the optimizer classes they define.
const OPTIMIZERS: &[(&str, &str)] = &[
    ("adam", "Adam"),
    ("adamw", "AdamW"),
    ("sgd", "SGD"),
    ("adagrad", "Adagrad"),
    ("adadelta", "Adadelta"),
    ("adamax", "Adamax"),
    ("nadam", "NAdam"),
    ("radam", "RAdam"),
    ("rmsprop", "RMSprop"),
    ("rprop", "Rprop"),
    ("asgd", "ASGD"),
    ("lbfgs", "LBFGS"),
    ("adafactor", "Adafactor"),
    ("sparse_adam", "SparseAdam"),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Frame;

    /// `name_says` as it was, a `contains` per needle: the oracle.
    fn name_says_by_contains(n: &str) -> NameSays {
        let has = |p: &str| n.contains(p);
        NameSays {
            backward: has("autograd::engine::evaluate_function")
                || (!frees_a_graph(n) && (has("Backward0") || has("Backward1")))
                || has("AccumulateGrad")
                || has("run_backward")
                || has("torch::autograd::Engine"),
            optimizer_step: n.starts_with("Optimizer.step#") || has("torch/optim/"),
            foreach: has("_multi_tensor_")
                || n.starts_with("aten::_foreach_")
                || has("method _foreach_")
                || has("torch._foreach_"),
            fused: has("_fused_adam")
                || has("_fused_sgd")
                || n.starts_with("aten::_fused_")
                || has("fused_adam")
                || has("FusedAdam"),
            single_tensor: has("_single_tensor_"),
            eight_bit_optimizer: has("bitsandbytes/optim") || (has("8bit") && has("optim")),
            inference: has("inference_mode")
                || has("transformers/generation/")
                || has("vllm/")
                || has("sglang/")
                || has("model_executor")
                || n.ends_with(": generate"),
            serving_engine: has("vllm/")
                || has("sglang/")
                || n.starts_with("_C_cache_ops::")
                || n.starts_with("sglang::")
                || n.starts_with("vllm::"),
            checkpoint: has("torch/utils/checkpoint.py")
                || has("CheckpointFunction")
                || has("checkpoint_wrapper"),
            collectives: n.starts_with("nccl:")
                || n.starts_with("c10d::")
                || n.starts_with("record_param_comms")
                || has("ProcessGroupNCCL")
                || has("rccl"),
            data_parallel: is_ddp_name(n)
                || has("megatron/core/distributed")
                || has("deepspeed/runtime/engine.py"),
            sharded: has("torch/distributed/fsdp")
                || has("FullyShardedDataParallel")
                || has("fully_shard")
                || has("deepspeed/runtime/zero/")
                || has("distrib_optimizer"),
        }
    }

    /// One pass for all of `name_says`'s needles says what a `contains`
    /// per needle said: names holding each needle, two of them side by
    /// side or overlapping, each cut short, and real operator and frame
    /// names.
    #[test]
    fn name_says_as_a_contains_per_needle_said() {
        let mut texts: Vec<String> = SAYS_NEEDLES.iter().map(|n| n.to_string()).collect();
        for (i, a) in SAYS_NEEDLES.iter().enumerate() {
            for b in [
                SAYS_NEEDLES[(i * 7 + 3) % SAYS_NEEDLES.len()],
                SAYS_NEEDLES[(i + 1) % SAYS_NEEDLES.len()],
            ] {
                texts.push(format!("x{a}{b}y"));
                texts.push(format!("{a}{}", &b[1.min(b.len())..]));
            }
            texts.push(a[..a.len() - 1].to_string());
            texts.push(a[1..].to_string());
        }
        texts.extend(
            [
                "",
                "Optimizer.step#AdamW.step",
                "aten::_foreach_add_",
                "aten::_fused_adamw_",
                "MulBackward0",
                "torch::autograd::generated::MulBackward0::~MulBackward0()",
                "nccl:all_reduce",
                "c10d::allreduce_",
                "record_param_comms",
                "sglang::fused_moe",
                "vllm::unified_attention",
                "_C_cache_ops::reshape_and_cache",
                "model.py(88): generate",
                "torch/nn/parallel/distributed.py(1633): forward",
                "bitsandbytes/optim/optimizer.py(287): step",
                "adam8bit_optimizer",
            ]
            .map(String::from),
        );
        for text in &texts {
            assert_eq!(name_says(text), name_says_by_contains(text), "{text:?}");
        }
        let search = needle_search(SAYS_NEEDLES);
        for text in &texts {
            let found = needle_bits(&search, text);
            for (k, needle) in SAYS_NEEDLES.iter().enumerate() {
                assert_eq!(
                    found >> k & 1 == 1,
                    text.contains(needle),
                    "{needle:?} in {text:?}"
                );
            }
        }
    }

    /// One pass finds what a substring search per needle finds, in texts
    /// that hold needles inside, overlapping and around each other.
    #[test]
    fn found_is_a_search_per_needle() {
        let mut texts: Vec<String> = NEEDLES.iter().map(|n| n.to_string()).collect();
        for (i, a) in NEEDLES.iter().enumerate() {
            let b = NEEDLES[(i * 7 + 3) % NEEDLES.len()];
            texts.push(format!("x{a}{b}y"));
            // Each without its last byte: no longer a match.
            texts.push(a[..a.len() - 1].to_string());
            // Overlapping: the end of one is the start of the next.
            texts.push(format!("{a}{}", &b[1.min(b.len())..]));
        }
        texts.extend(
            [
                "",
                "torch/optim/adamw.py",
                "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py",
                "nn.Module: Attention_3",
                "torch/_tensor.py(521): backward",
                "AddmmBackward0",
                "<built-in method cat>",
                "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)",
            ]
            .map(String::from),
        );
        for file in &texts {
            for name in texts.iter().step_by(5) {
                let found = Found::of(file, name);
                for (k, needle) in NEEDLES.iter().enumerate() {
                    let bit = |bits: u64| bits >> k & 1 == 1;
                    assert_eq!(
                        bit(found.file),
                        file.contains(needle),
                        "{needle:?} in {file:?}"
                    );
                    assert_eq!(
                        bit(found.name),
                        name.contains(needle),
                        "{needle:?} in {name:?}"
                    );
                }
            }
        }
    }

    /// An FX node's `stack_trace` as dynamo writes it (outermost first, each
    /// frame's code and carets after it): the innermost frame.
    #[test]
    fn the_innermost_frame_of_a_traceback_text() {
        let trace = "  File \"/work/train.py\", line 52, in forward\n    x = self.block(x)\n        ^^^^^^^^^^^^^\n  File \"/work/model/block.py\", line 14, in forward\n    h = self.a(x)\n        ^^^^^^^^^\n";
        assert_eq!(
            innermost_traceback_frame(trace),
            Some(("/work/model/block.py", 14, "forward"))
        );
        assert_eq!(
            innermost_traceback_frame("  File \"m.py\", line 3, in <lambda>"),
            Some(("m.py", 3, "<lambda>"))
        );
        for not_one in [
            "",
            "No model stack trace available",
            "  File \"m.py\", line x, in f",
        ] {
            assert_eq!(innermost_traceback_frame(not_one), None, "{not_one:?}");
        }
        assert!(is_fx_generated("fx_generated__4rxqe3wj.py"));
        assert!(!is_fx_generated("/tmp/torchinductor_root/x3/cx3ak.py"));
    }

    #[test]
    fn attention_kernels_by_name() {
        assert!(is_attention_math_frame(
            "aten::_scaled_dot_product_attention_math"
        ));
        assert!(is_attention_math_frame(
            "at::native::_scaled_dot_product_attention_math(at::Tensor const&, ...)"
        ));
        assert!(!is_attention_math_frame(
            "aten::_scaled_dot_product_flash_attention_for_cpu"
        ));
        assert!(!is_attention_math_frame(
            "aten::scaled_dot_product_attention"
        ));
        assert!(is_attention_call_frame(
            "<built-in function scaled_dot_product_attention>"
        ));
        assert!(!is_attention_call_frame(
            "aten::scaled_dot_product_attention"
        ));
    }

    #[test]
    fn optimizer_class_from_annotation_and_file() {
        assert_eq!(
            optimizer_class("Optimizer.step#AdamW.step").as_deref(),
            Some("AdamW")
        );
        assert_eq!(optimizer_class("Optimizer.zero_grad#AdamW.zero_grad"), None);
        assert_eq!(
            optimizer_class("Optimizer.step#Lion.step").as_deref(),
            Some("Lion")
        );
        assert_eq!(
            optimizer_class("/x/torch/optim/adafactor.py").as_deref(),
            Some("Adafactor")
        );
        assert_eq!(
            optimizer_class("/x/torch/optim/sgd.py").as_deref(),
            Some("SGD")
        );
        assert_eq!(
            optimizer_class("C:\\py\\torch\\optim\\adam.py").as_deref(),
            Some("Adam")
        );
        assert_eq!(optimizer_class("torch/optim/optimizer.py"), None);
        assert_eq!(
            optimizer_class("torch/optim/adamw.py(211): step").as_deref(),
            Some("AdamW")
        );
    }

    /// A graph freed without a backward (the output of a forward-only run
    /// dropped) shows its nodes' `release_variables`: no backward pass. The
    /// engine's frames in a real backward still are one.
    #[test]
    fn a_graph_being_freed_is_no_backward() {
        let mut sites = Sites::default();
        let mut site = |names: &[&str]| {
            let frames: Vec<Frame> = names
                .iter()
                .map(|n| Frame {
                    filename: sites.intern_str("??"),
                    line: 0,
                    name: sites.intern_str(n),
                })
                .collect();
            sites.intern_site(&frames)
        };
        let freed = site(&[
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free",
            "torch::autograd::SavedVariable::reset_data()",
            "torch::autograd::generated::BmmBackward0::release_variables()",
            "infer.py:47 main",
        ]);
        let backward = site(&[
            "torch::autograd::generated::BmmBackward0::release_variables()",
            "torch::autograd::Engine::evaluate_function(...)",
        ]);
        let computing = site(&["torch::autograd::generated::BmmBackward0::apply(...)"]);
        assert!(!site_facts(&sites, freed).backward);
        assert_ne!(site_facts(&sites, freed).phase(), Phase::Backward);
        assert!(site_facts(&sites, backward).backward);
        assert!(site_facts(&sites, computing).backward);
        assert!(frees_a_graph(
            "torch::autograd::generated::MmBackward0::~MmBackward0()"
        ));
        assert!(!frees_a_graph(
            "torch::autograd::generated::MmBackward0::apply"
        ));
    }

    /// The cached per-frame evidence gives what reading each site does.
    #[test]
    fn all_site_facts_equal_site_facts() {
        let mut sites = Sites::default();
        let mut frame = |file: &str, name: &str| Frame {
            filename: sites.intern_str(file),
            line: 1,
            name: sites.intern_str(name),
        };
        let attn = frame("model.py", "attention");
        let cat = frame("??", "aten::cat");
        let opt = frame("/x/torch/optim/adamw.py", "step");
        let bwd = frame("??", "MulBackward0");
        let fwd = frame("m.py", "forward");
        for frames in [
            vec![attn, cat],
            vec![attn],
            vec![cat, fwd],
            vec![opt, bwd],
            vec![fwd, attn, fwd, cat],
        ] {
            sites.intern_site(&frames);
        }
        let all = all_site_facts(&sites);
        assert_eq!(all.len(), sites.len());
        for (s, f) in all.iter().enumerate() {
            assert_eq!(*f, site_facts(&sites, s as SiteId));
        }
        assert!(all[1].kv_cache && !all[2].kv_cache && !all[3].kv_cache);
    }
}
