//! The in-memory trace model that every input format is parsed into.
//!
//! A [`Trace`] holds one [`DeviceTrace`] per device, each a time-ordered list of
//! allocator [`Event`]s. Where an allocation came from is a *site*: a list of
//! frames, innermost first (Python/C++ frames for snapshots, the operator stack
//! for Chrome traces). Frames, strings and sites are interned once in
//! [`Sites`], and events only hold a `u32` [`SiteId`], so a frames list that a
//! pickle references ten thousand times costs one site.

use std::fmt;
use std::num::NonZeroU32;

use rustc_hash::FxHashMap as HashMap;

use serde::{Deserialize, Serialize};

/// Index into [`Sites`]; `0` is the empty site (no frames recorded).
pub type SiteId = u32;
/// Index of an interned string in [`Sites`].
pub type StrId = u32;

/// The input format, detected from content (see `input::sniff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// `torch.cuda.memory._snapshot()` as pickle, JSON, legacy list or memory_viz HTML.
    TorchSnapshot,
    /// Chrome trace JSON from the PyTorch profiler (Kineto) or any writer.
    ChromeTrace,
    /// `export_memory_timeline` output (already categorised by PyTorch).
    MemoryTimeline,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::TorchSnapshot => "torch_snapshot",
            Format::ChromeTrace => "chrome_trace",
            Format::MemoryTimeline => "memory_timeline",
        }
    }
}

/// The component taxonomy shared by every input format (DESIGN.md §4).
///
/// The declaration order is the display order of every table and legend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Category {
    Parameter,
    Gradient,
    OptimizerState,
    Activation,
    AutogradDetail,
    Temporary,
    Input,
    KvCache,
    AllocatorCache,
    Unknown,
}

impl Category {
    pub const ALL: [Category; 10] = [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::AutogradDetail,
        Category::Temporary,
        Category::Input,
        Category::KvCache,
        Category::AllocatorCache,
        Category::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::Gradient => "gradient",
            Category::OptimizerState => "optimizer_state",
            Category::Activation => "activation",
            Category::AutogradDetail => "autograd_detail",
            Category::Temporary => "temporary",
            Category::Input => "input",
            Category::KvCache => "kv_cache",
            Category::AllocatorCache => "allocator_cache",
            Category::Unknown => "unknown",
        }
    }

    /// Parses memcut's own names and PyTorch's (`Category` enum names, any case).
    pub fn parse(s: &str) -> Option<Category> {
        let lower = s.trim().to_ascii_lowercase();
        Category::ALL
            .into_iter()
            .find(|c| c.as_str() == lower)
            .or(match lower.as_str() {
                "none" | "" => Some(Category::Unknown),
                _ => None,
            })
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an allocator event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Memory handed to the program (`size` = bytes of the allocation).
    Alloc,
    /// The program released the block; it may still be in use by another stream.
    FreeRequested,
    /// The block is really free (the memory curve drops here).
    FreeCompleted,
    /// `cudaMalloc` of a segment: reserved memory grows.
    SegmentAlloc,
    /// `cudaFree` of a segment: reserved memory shrinks.
    SegmentFree,
    /// Expandable segment grew.
    SegmentMap,
    /// Expandable segment shrank.
    SegmentUnmap,
    /// A snapshot was taken here (`size` = active bytes then).
    Snapshot,
    /// An allocation of `size` bytes failed; [`Event::device_free`] bytes
    /// were free.
    Oom,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
        }
    }

    /// The snapshot action name, or `None` for actions memcut does not replay.
    pub fn parse(s: &str) -> Option<Action> {
        Some(match s {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "free" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            _ => return None,
        })
    }
}

/// Allocator totals a Chrome trace reports after each event (`Total Allocated`,
/// `Total Reserved`); `None` where the file does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportedTotals {
    pub allocated: Option<u64>,
    pub reserved: Option<u64>,
}

/// One allocator event, in trace order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Event {
    pub action: Action,
    /// Category the *file itself* states (profile-derived snapshots and
    /// memory-timeline exports). Only memory-timeline exports are trusted by
    /// the classifier; for snapshots this is ground truth for tests.
    pub given: Option<Category>,
    /// Where the event came from (allocation stack or operator stack).
    pub site: SiteId,
    /// Block address; for `Oom`, the bytes `cudaMemGetInfo` reported free
    /// (PyTorch's allocator keeps it in the same field): see
    /// [`Event::device_free`]. One field for both keeps events at 32 bytes,
    /// 32 MB for a 1M-entry trace.
    pub addr: u64,
    /// Bytes: requested size for snapshot allocs, block size for Chrome
    /// traces, segment bytes for segment events, failed request for `Oom`.
    pub size: u64,
    /// Microseconds (epoch for snapshots; trace clock for Chrome); NaN if unknown.
    pub ts_us: f64,
}

impl Event {
    pub fn new(action: Action, addr: u64, size: u64) -> Event {
        Event {
            action,
            given: None,
            site: 0,
            addr,
            size,
            ts_us: f64::NAN,
        }
    }

    /// An allocation of `size` bytes that failed with `device_free` bytes free.
    pub fn oom(size: u64, device_free: u64) -> Event {
        Event::new(Action::Oom, device_free, size)
    }

    /// For `Oom`: the bytes free on the device when the allocation failed
    /// (0 when unknown); otherwise 0.
    pub fn device_free(&self) -> u64 {
        match self.action {
            Action::Oom => self.addr,
            _ => 0,
        }
    }

    pub fn ts(&self) -> Option<f64> {
        (!self.ts_us.is_nan()).then_some(self.ts_us)
    }
}

/// State of a block in a snapshot's `segments` at dump time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    ActiveAllocated,
    ActivePendingFree,
    Inactive,
}

/// A sub-range of a segment at dump time.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub addr: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    pub site: SiteId,
}

/// One `cudaMalloc` (or mapped range) at dump time.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub addr: u64,
    pub total_size: u64,
    pub is_expandable: bool,
    pub blocks: Blocks,
}

/// A segment's blocks, the first kept inline: most segments of a large
/// snapshot hold one block (see [`crate::schema::BlockSpans`]).
pub type Blocks = smallvec::SmallVec<[Block; 1]>;

/// The events of one device, plus what the file says about its final state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceTrace {
    /// `cuda:0`, `cpu`, `hip:1`, …
    pub device: String,
    pub events: Vec<Event>,
    /// Per-event allocator totals (Chrome traces); empty when unknown,
    /// otherwise the same length as `events`.
    pub reported: Vec<ReportedTotals>,
    /// Segments at dump time (snapshots only).
    pub segments: Option<Vec<Segment>>,
    /// Whether `segments` show what the caching allocator reserved. False for
    /// `_profile_to_snapshot` output, whose segments are a synthetic layout
    /// of the CPU allocator's blocks: live blocks count, reserved is unknown.
    pub segments_show_reserved: bool,
    /// Total device memory when the file says (Kineto `deviceProperties`).
    pub capacity_bytes: Option<u64>,
    /// An NVIDIA device's compute capability (major, minor) when the file
    /// says (Kineto `deviceProperties`: `computeMajor`, `computeMinor`);
    /// `None` for AMD devices, whose numbers mean something else.
    pub compute_capability: Option<(u32, u32)>,
    /// Per event (same length as `events`), the operator call it happened
    /// in, for formats that record operator boundaries (Chrome traces);
    /// empty otherwise.
    pub op_calls: Vec<Option<OpCall>>,
}

/// One operator call of a Chrome trace: the outermost operator that was open
/// around an event on its thread and that PyTorch's memory profiler counts
/// as one op (an ATen operator or an autograd backward function). Two events
/// with the same call happened during the same call; the ids mean nothing
/// else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpCall(NonZeroU32);

impl OpCall {
    /// The call with this index among the trace's operators (`None` past
    /// `u32::MAX - 1` calls, which no trace that fits in memory has).
    pub fn new(index: usize) -> Option<OpCall> {
        u32::try_from(index)
            .ok()
            .and_then(|i| i.checked_add(1))
            .and_then(NonZeroU32::new)
            .map(OpCall)
    }
}

/// A named time range (`external_annotations` START/END, `ProfilerStep#N`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct Annotation {
    pub name: String,
    /// Device ordinal the range was recorded for; `None` = all devices.
    pub device: Option<i64>,
    pub start_us: f64,
    pub end_us: f64,
}

/// What a trace says about the run as a whole, beyond its memory events.
/// The planner reads it (`plan::facts`) to decide which levers apply to the
/// run: training or inference, the optimizer, the weights' dtype, data
/// parallelism, the allocator's settings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunInfo {
    /// Chrome traces: every operator, Python-function and annotation name
    /// of the whole trace (not only those open at a memory event) with its
    /// number of calls, sorted by name. Empty for other formats, whose
    /// evidence is in their frames.
    pub operators: Vec<(String, u64)>,
    /// Chrome traces recorded with `record_shapes`: the dtype (`Input type`)
    /// of the weight of each linear layer or library GEMM call, with counts,
    /// sorted.
    pub weight_dtypes: Vec<(Dtype, u64)>,
    /// Snapshots: `allocator_settings.expandable_segments`.
    pub expandable_segments: Option<bool>,
}

/// How much a [`Diagnostic`] matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Level {
    Info,
    Warning,
}

/// Something a reader of the report should know about the input.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Diagnostic {
    pub level: Level,
    pub message: String,
    /// The input was read only in part (truncated or with skipped damaged
    /// records): the report describes what could be read. `memcut analyze`
    /// prints these as warnings and fails on them with `--strict`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial_read: bool,
}

impl Diagnostic {
    pub fn info(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            level: Level::Info,
            message: message.into(),
            partial_read: false,
        }
    }
    pub fn warning(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            level: Level::Warning,
            message: message.into(),
            partial_read: false,
        }
    }
    /// A warning that the input was read only in part (see [`Diagnostic::partial_read`]).
    pub fn partial(message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            level: Level::Warning,
            message: message.into(),
            partial_read: true,
        }
    }
}

/// A parsed trace of any format.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub format: Format,
    pub devices: Vec<DeviceTrace>,
    pub sites: Sites,
    pub annotations: Vec<Annotation>,
    pub diagnostics: Vec<Diagnostic>,
    /// Which rank of a distributed job recorded the trace, when the file
    /// says (Kineto `distributedInfo`).
    pub distributed: Option<Distributed>,
    /// Evidence about the run that no memory event carries.
    pub run: RunInfo,
    /// Operator calls that say something about memory no event names
    /// (Chrome traces; empty for other formats).
    pub evidence: Vec<OperatorCall>,
}

/// A trace's place in a distributed job (Kineto's `distributedInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Distributed {
    pub rank: u32,
    pub world_size: u32,
}

impl Distributed {
    /// A rank of a job of `world_size` ranks; `None` unless `rank < world_size`.
    pub fn new(rank: u32, world_size: u32) -> Option<Distributed> {
        (rank < world_size).then_some(Distributed { rank, world_size })
    }
}

impl Trace {
    pub fn new(format: Format) -> Trace {
        Trace {
            format,
            devices: Vec::new(),
            sites: Sites::default(),
            annotations: Vec::new(),
            diagnostics: Vec::new(),
            distributed: None,
            run: RunInfo::default(),
            evidence: Vec::new(),
        }
    }
}

/// An operator whose calls are evidence about memory that existed before
/// recording (issue 11): the weights it reads, the KV-cache pool it writes,
/// or what an optimizer's step does. The Chrome reader keeps calls of these
/// operators only; their `record_shapes` inputs, where recorded, say which
/// tensors they touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvidenceOp {
    /// `aten::linear(input, weight, bias?)`.
    Linear,
    /// `aten::addmm(bias, input, weight)` outside a linear (Hugging Face `Conv1D`).
    Addmm,
    /// `aten::embedding(weight, indices, …)`.
    Embedding,
    /// `aten::embedding_bag(weight, indices, …)`.
    EmbeddingBag,
    /// `aten::conv{1,2,3}d`, `aten::convolution`, `aten::conv_transpose{1,2,3}d`
    /// (`input, weight, bias?, …`).
    Convolution,
    /// `aten::layer_norm(input, shape, weight?, bias?, …)`.
    LayerNorm,
    /// `aten::group_norm(input, groups, weight?, bias?, …)`.
    GroupNorm,
    /// `aten::batch_norm(input, weight?, bias?, running_mean?, running_var?, …)`.
    BatchNorm,
    /// `aten::rms_norm(input, shape, weight?, eps)`.
    RmsNorm,
    /// `aten::_native_multi_head_attention(query, key, value, embed_dim,
    /// num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, …)`: the
    /// fast path of `nn.MultiheadAttention` in eval.
    NativeMultiHeadAttention,
    /// Library GEMMs that take a weight second (`vllm::rocm_unquantized_gemm`,
    /// `aiter::gemm_a16w16`).
    LibraryGemm,
    /// vLLM `_C_cache_ops::reshape_and_cache{,_flash}(key, value, key_cache,
    /// value_cache, …)` and SGLang `sglang::store_cache(k, v, k_cache, v_cache, …)`:
    /// one call per attention layer and forward pass.
    KvCacheWrite,
    /// vLLM `_C_cache_ops::concat_and_cache_mla(kv_c, k_pe, kv_cache, …)`.
    KvCacheWriteMla,
    /// `aten::mul_` / `aten::_foreach_mul_`: in an SGD or RMSprop step, a
    /// momentum buffer being decayed.
    MulInPlace,
    /// `aten::maximum` / `aten::_foreach_maximum_`: Adam's `amsgrad` state.
    Maximum,
    /// `aten::lerp_` / `aten::_foreach_lerp_`: RMSprop's centred average.
    LerpInPlace,
    /// `aten::index_copy_(self, dim, index, source)`: Hugging Face's
    /// `StaticCache.update` writing each forward's keys and values into
    /// its preallocated tensors (`self` is the cache).
    IndexCopyInPlace,
    /// `gloo:all_reduce` / `nccl:all_reduce`: the range a process group's
    /// all-reduce records around its work, with the tensor it reduces in
    /// place (a DistributedDataParallel gradient bucket, one call per bucket
    /// and step). Recorded as a `user_annotation` or a `cpu_op`.
    AllReduce,
}

impl EvidenceOp {
    /// The operator a Chrome `cpu_op` name is (or, for [`EvidenceOp::AllReduce`],
    /// a `user_annotation`'s), if memcut keeps its calls.
    pub fn from_name(name: &str) -> Option<EvidenceOp> {
        use EvidenceOp::*;
        Some(match name {
            "aten::linear" => Linear,
            "aten::addmm" => Addmm,
            "aten::embedding" => Embedding,
            "aten::embedding_bag" => EmbeddingBag,
            "aten::conv1d"
            | "aten::conv2d"
            | "aten::conv3d"
            | "aten::convolution"
            | "aten::conv_transpose1d"
            | "aten::conv_transpose2d"
            | "aten::conv_transpose3d" => Convolution,
            "aten::layer_norm" => LayerNorm,
            "aten::group_norm" => GroupNorm,
            "aten::batch_norm" => BatchNorm,
            "aten::rms_norm" => RmsNorm,
            "aten::_native_multi_head_attention" => NativeMultiHeadAttention,
            "vllm::rocm_unquantized_gemm" | "aiter::gemm_a16w16" => LibraryGemm,
            "_C_cache_ops::reshape_and_cache_flash"
            | "_C_cache_ops::reshape_and_cache"
            | "sglang::store_cache" => KvCacheWrite,
            "_C_cache_ops::concat_and_cache_mla" => KvCacheWriteMla,
            "aten::mul_" | "aten::_foreach_mul_" => MulInPlace,
            "aten::maximum" | "aten::_foreach_maximum_" => Maximum,
            "aten::lerp_" | "aten::_foreach_lerp_" => LerpInPlace,
            "aten::index_copy_" => IndexCopyInPlace,
            "gloo:all_reduce" | "nccl:all_reduce" => AllReduce,
            _ => return None,
        })
    }

    /// Whether the calls' recorded inputs are needed (not just that they ran).
    pub fn reads_inputs(self) -> bool {
        !matches!(
            self,
            EvidenceOp::MulInPlace | EvidenceOp::Maximum | EvidenceOp::LerpInPlace
        )
    }
}

/// One call of an [`EvidenceOp`] (Chrome `cpu_op` event).
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorCall {
    pub op: EvidenceOp,
    /// The call's thread (a dense id per `pid`/`tid` of the trace).
    pub thread: u32,
    pub start_us: f64,
    pub end_us: f64,
    /// One entry per input when the profiler recorded shapes
    /// (`record_shapes=True`: `Input Dims` and `Input type`); `None` for an
    /// input that is not a tensor of a known element type. Empty when shapes
    /// were not recorded.
    pub inputs: Vec<Option<TensorShape>>,
}

/// A tensor input as `record_shapes` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorShape {
    pub dims: Vec<u64>,
    pub dtype: Dtype,
}

impl TensorShape {
    /// Bytes of a contiguous tensor of this shape (what its storage holds at
    /// least; the caching allocator rounds blocks up).
    pub fn bytes(&self) -> u64 {
        self.dims
            .iter()
            .fold(self.dtype.bytes(), |n, &d| n.saturating_mul(d))
    }
}

/// Element types, as `Input type` spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    Float64,
    Float32,
    Float16,
    BFloat16,
    /// Any 8-bit float (`Float8_e4m3fn`, `Float8_e5m2`, …).
    Float8,
    Int64,
    Int32,
    Int16,
    Int8,
    UInt8,
    Bool,
    Complex64,
    Complex128,
}

impl Dtype {
    /// The dtype `Input type` names (`float`, `c10::BFloat16`, …), if a tensor's.
    pub fn parse(s: &str) -> Option<Dtype> {
        use Dtype::*;
        Some(match s {
            "double" => Float64,
            "float" => Float32,
            "c10::Half" => Float16,
            "c10::BFloat16" => BFloat16,
            "long int" | "long" | "int64_t" => Int64,
            "int" => Int32,
            "short int" | "short" => Int16,
            "signed char" | "c10::qint8" => Int8,
            "unsigned char" | "c10::quint8" => UInt8,
            "bool" => Bool,
            "c10::complex<float>" => Complex64,
            "c10::complex<double>" => Complex128,
            s if s.starts_with("c10::Float8_") => Float8,
            _ => return None,
        })
    }

    pub fn bytes(self) -> u64 {
        use Dtype::*;
        match self {
            Float64 | Int64 | Complex64 => 8,
            Complex128 => 16,
            Float32 | Int32 => 4,
            Float16 | BFloat16 | Int16 => 2,
            Float8 | Int8 | UInt8 | Bool => 1,
        }
    }

    /// PyTorch's name (`bfloat16`).
    pub fn as_str(self) -> &'static str {
        use Dtype::*;
        match self {
            Float64 => "float64",
            Float32 => "float32",
            Float16 => "float16",
            BFloat16 => "bfloat16",
            Float8 => "float8",
            Int64 => "int64",
            Int32 => "int32",
            Int16 => "int16",
            Int8 => "int8",
            UInt8 => "uint8",
            Bool => "bool",
            Complex64 => "complex64",
            Complex128 => "complex128",
        }
    }
}

/// One stack frame. For Chrome traces `filename` is empty and `name` is the
/// operator or annotation name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    pub filename: StrId,
    pub line: u32,
    pub name: StrId,
}

/// Interned strings, frames and sites. Site 0 is the empty site.
#[derive(Debug, Clone, PartialEq)]
pub struct Sites {
    strings: Vec<Box<str>>,
    string_ids: HashMap<Box<str>, StrId>,
    sites: Vec<Box<[Frame]>>,
    site_ids: HashMap<Box<[Frame]>, SiteId>,
}

impl Default for Sites {
    fn default() -> Sites {
        let mut sites = Sites {
            strings: Vec::new(),
            string_ids: HashMap::default(),
            sites: Vec::new(),
            site_ids: HashMap::default(),
        };
        sites.intern_str("");
        sites.intern_site(&[]);
        sites
    }
}

#[cfg(test)]
impl Sites {
    /// The site of `(file, line, name)` frames, innermost first (unit tests).
    pub(crate) fn intern_frames(&mut self, frames: &[(&str, u32, &str)]) -> SiteId {
        let frames: Vec<Frame> = frames
            .iter()
            .map(|&(file, line, name)| Frame {
                filename: self.intern_str(file),
                line,
                name: self.intern_str(name),
            })
            .collect();
        self.intern_site(&frames)
    }
}

impl Sites {
    pub fn intern_str(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as StrId;
        self.strings.push(s.into());
        self.string_ids.insert(s.into(), id);
        id
    }

    /// Interns a frame list (innermost first) and returns its site id.
    pub fn intern_site(&mut self, frames: &[Frame]) -> SiteId {
        if let Some(&id) = self.site_ids.get(frames) {
            return id;
        }
        let id = self.sites.len() as SiteId;
        self.sites.push(frames.into());
        self.site_ids.insert(frames.into(), id);
        id
    }

    /// A new site of `frames` that no other list of the same frames shares
    /// (a reader marks a site this way to check later whether the trace
    /// uses it).
    pub(crate) fn site_apart(&mut self, frames: &[Frame]) -> SiteId {
        let id = self.sites.len() as SiteId;
        self.sites.push(frames.into());
        id
    }

    pub fn str(&self, id: StrId) -> &str {
        &self.strings[id as usize]
    }

    /// Every interned string (file names, function and operator names), in
    /// the order they were first seen.
    pub fn strings(&self) -> impl Iterator<Item = &str> {
        self.strings.iter().map(|s| &**s)
    }

    /// Per string id, whether `pred` holds of that string: a table that
    /// lets a scan over every frame of every site (hundreds of thousands
    /// in a trace with Python stacks) test a string by its id instead of
    /// searching its text each time it is met.
    pub fn strings_where(&self, pred: impl Fn(&str) -> bool) -> Vec<bool> {
        self.strings.iter().map(|s| pred(s)).collect()
    }

    /// The frames of a site, innermost first.
    pub fn frames(&self, site: SiteId) -> &[Frame] {
        &self.sites[site as usize]
    }

    pub fn len(&self) -> usize {
        self.sites.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sites.len() <= 1
    }
}
