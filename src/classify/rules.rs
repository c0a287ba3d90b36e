//! The rule table: every built-in rule with its name, the category it
//! gives, the phase it saw and how it knows (`builtin_rules!`), in the order
//! `classify_one` tries them; user rules by index.

use super::{Classification, Phase, UserRule};
use crate::model::Category;

/// The rule that chose a category: a built-in one, or one of the user's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    Builtin(Builtin),
    /// The user rule at this index of the rule set given to [`classify`].
    User(u32),
}

impl Rule {
    /// The name reports show: the built-in rule's name, or `user:NAME`.
    /// `user_rules` is the rule set the classifier was given.
    pub fn name(self, user_rules: &[UserRule]) -> String {
        match self {
            Rule::Builtin(b) => b.as_str().to_owned(),
            Rule::User(i) => format!("user:{}", user_rules[i as usize].name),
        }
    }

    /// Whether the rule infers the category from evidence elsewhere in the
    /// trace rather than observing it on the allocation itself: built-in
    /// rules named `inferred_…`.
    pub fn infers(self) -> bool {
        matches!(self, Rule::Builtin(b) if b.infers())
    }
}

impl From<Builtin> for Rule {
    fn from(b: Builtin) -> Rule {
        Rule::Builtin(b)
    }
}

/// Declares the built-in rules: each rule's name (in reports), the category
/// it gives (`None`: the file states it), the phase it saw the allocation
/// made in (`None`: none observed) and how it knows. The one place a rule's
/// meaning is written: everything else asks the rule.
macro_rules! builtin_rules {
    ($($(#[$doc:meta])* $rule:ident = $name:literal, $category:expr, $phase:expr, $provenance:expr;)*) => {
        /// The built-in rules. `classify_one` tries them as a decision tree
        /// (user rules first, then the file's own category, the framework's
        /// buffers, memory from before recording, then by the phase of the
        /// allocation); this lists them grouped the same way.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Builtin {
            $($(#[$doc])* $rule,)*
        }

        impl Builtin {
            pub const ALL: &'static [Builtin] = &[$(Builtin::$rule,)*];

            /// The rule's name in reports (`forward_output_freed_in_backward`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Builtin::$rule => $name,)*
                }
            }

            /// The category the rule gives; `None` for the file's own
            /// (`category_from_file`).
            pub fn category(self) -> Option<Category> {
                match self {
                    $(Builtin::$rule => $category,)*
                }
            }

            /// The phase the rule saw the allocation made in, if it saw one
            /// (for memory from before recording: the phase its site shows).
            pub fn phase(self) -> Option<Phase> {
                match self {
                    $(Builtin::$rule => $phase,)*
                }
            }

            /// How the rule knows.
            pub fn provenance(self) -> Provenance {
                match self {
                    $(Builtin::$rule => $provenance,)*
                }
            }
        }
    };
}

impl Builtin {
    /// Whether the rule infers rather than observes (`inferred_…`).
    pub fn infers(self) -> bool {
        matches!(
            self.provenance(),
            Provenance::Inferred | Provenance::InferredBeforeRecording
        )
    }

    /// Whether the rule classifies only memory that existed before
    /// recording began.
    pub fn before_recording(self) -> bool {
        matches!(
            self.provenance(),
            Provenance::BeforeRecording | Provenance::InferredBeforeRecording
        )
    }

    /// The phase the rule saw the allocation made in during the recording:
    /// memory from before it has none (its interval starts at 0).
    pub fn phase_observed(self) -> Option<Phase> {
        self.phase()
            .filter(|_| self.provenance() == Provenance::Observed)
    }

    /// The classification this rule gives (for `category_from_file`, whose
    /// category is the file's: `unknown`; callers give the file's).
    pub fn class(self) -> Classification {
        Classification {
            category: self.category().unwrap_or(Category::Unknown),
            rule: self.into(),
        }
    }

    /// The built-in rule of this name.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL.iter().copied().find(|b| b.as_str() == name)
    }
}

/// How a rule knows an allocation's category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provenance {
    /// Seen on the allocation itself: its frames, phase and lifetime.
    Observed,
    /// Memory that existed before recording began, named by the frames of
    /// what freed or used it, or by none (`existed_before_trace_…`).
    BeforeRecording,
    /// Inferred from evidence elsewhere in the trace (`inferred_…`).
    Inferred,
    /// Memory from before recording, inferred from evidence elsewhere.
    InferredBeforeRecording,
}

builtin_rules! {
    /// A memory-timeline export states the category.
    CategoryFromFile = "category_from_file", None, None, Provenance::Observed;
    /// Memory a Chrome trace's totals show but no event names.
    AllocatedBeforeProfilingUnattributed = "allocated_before_profiling_unattributed", Some(Category::Unknown), None, Provenance::BeforeRecording;
    AccumulateGradOutlivesBackward = "accumulate_grad_outlives_backward", Some(Category::Gradient), Some(Phase::Backward), Provenance::Observed;
    /// Freed within the operator call that allocated it, in the optimizer step.
    OptimizerStepScratch = "optimizer_step_scratch", Some(Category::Temporary), Some(Phase::Optimizer), Provenance::Observed;
    /// Freed before the optimizer step that allocated it ends: an
    /// intermediate of the update (`exp_avg_sq.sqrt()`, `_foreach_sqrt`).
    FreedWithinOptimizerStep = "freed_within_optimizer_step", Some(Category::Temporary), Some(Phase::Optimizer), Provenance::Observed;
    AllocatedInOptimizerStepOutlivesIt = "allocated_in_optimizer_step_outlives_it", Some(Category::OptimizerState), Some(Phase::Optimizer), Provenance::Observed;
    AllocatedInZeroGrad = "allocated_in_zero_grad", Some(Category::Gradient), Some(Phase::ZeroGrad), Provenance::Observed;
    AllocatedInBackwardOutlivesIt = "allocated_in_backward_outlives_it", Some(Category::Gradient), Some(Phase::Backward), Provenance::Observed;
    ShortLivedInBackward = "short_lived_in_backward", Some(Category::Temporary), Some(Phase::Backward), Provenance::Observed;
    RecomputedActivationInBackward = "recomputed_activation_in_backward", Some(Category::Activation), Some(Phase::Backward), Provenance::Observed;
    FreedWithinBackward = "freed_within_backward", Some(Category::AutogradDetail), Some(Phase::Backward), Provenance::Observed;
    ModuleInitOrLoad = "module_init_or_load", Some(Category::Parameter), Some(Phase::Init), Provenance::Observed;
    DataLoading = "data_loading", Some(Category::Input), Some(Phase::DataLoading), Provenance::Observed;
    ShortLivedInForward = "short_lived_in_forward", Some(Category::Temporary), Some(Phase::Forward), Provenance::Observed;
    InferenceCacheOutlivesForward = "inference_cache_outlives_forward", Some(Category::KvCache), Some(Phase::Forward), Provenance::Observed;
    /// Inference, no cache frames: replaced by a longer concatenation of
    /// itself (`cache = torch.cat([cache, new])`), the way a cache grows.
    InferredCacheGrowsByConcatenation = "inferred_cache_grows_by_concatenation", Some(Category::KvCache), Some(Phase::Forward), Provenance::Inferred;
    /// Inference: made by an operator that creates (`aten::zeros`), sized
    /// exactly like the tensor that `aten::index_copy_` writes into again
    /// and again (`record_shapes`): a preallocated cache
    /// (`StaticCache.update` writes each forward's keys and values so).
    InferredCacheWrittenInPlace = "inferred_cache_written_in_place", Some(Category::KvCache), None, Provenance::Inferred;
    /// Inference: allocated by attention code and still live when the same
    /// code runs in the next layer (keys and values of the first pass).
    InferredCacheKeptAcrossLayers = "inferred_cache_kept_across_layers", Some(Category::KvCache), Some(Phase::Forward), Provenance::Inferred;
    ForwardOutputFreedInBackward = "forward_output_freed_in_backward", Some(Category::Activation), Some(Phase::Forward), Provenance::Observed;
    ForwardOutput = "forward_output", Some(Category::Activation), Some(Phase::Forward), Provenance::Observed;
    ShortLived = "short_lived", Some(Category::Temporary), None, Provenance::Observed;
    /// Created (not computed), alive to the end, and in a training run the
    /// size of a gradient: a weight whose construction had no Python stack.
    InferredWeightsGradientSized = "inferred_weights_gradient_sized", Some(Category::Parameter), None, Provenance::Inferred;
    /// The same where no gradient was allocated (DistributedDataParallel's
    /// gradients as views of its buckets) and the optimizer's state, made
    /// in its first step one tensor per parameter (`zeros_like(p)`), gives
    /// the parameters' sizes instead.
    InferredWeightsStateSized = "inferred_weights_sized_like_optimizer_state", Some(Category::Parameter), None, Provenance::Inferred;
    /// Created, alive to the end, in a DistributedDataParallel run: tensors
    /// that hold the weights (created before them, last first, as DDP fills
    /// its buckets) in runs of exactly their sizes: its gradient buckets.
    InferredDdpBucketMade = "inferred_ddp_gradient_bucket_sized_like_parameters", Some(Category::Gradient), None, Provenance::Inferred;
    /// Created (not computed) and alive to the end of an inference run.
    InferredWeightsCreatedAliveToEnd = "inferred_weights_created_alive_to_end", Some(Category::Parameter), None, Provenance::Inferred;
    /// Freed by the user function (or its caller) that allocated it before
    /// that call returned, seen from the free's own stack (`calls.rs`).
    InferredTemporaryFreedInAllocatingCall = "inferred_temporary_freed_in_allocating_call", Some(Category::Temporary), None, Provenance::Inferred;
    /// Made in a Python constructor that is not `torch.nn`'s and alive to
    /// the end: the weights of a user's or a library's own module
    /// (`nn.Parameter(torch.randn(…))` in `__init__`, `transformers`' `Conv1D`).
    InferredWeightsMadeInConstructor = "inferred_weights_made_in_constructor", Some(Category::Parameter), None, Provenance::Inferred;
    AllocatedOutsideModelLiveDuringForward = "allocated_outside_model_live_during_forward", Some(Category::Input), None, Provenance::Observed;
    NoEvidence = "no_evidence", Some(Category::Unknown), None, Provenance::Observed;
    ExistedBeforeTraceOptimizerSite = "existed_before_trace_optimizer_site", Some(Category::OptimizerState), Some(Phase::Optimizer), Provenance::BeforeRecording;
    ExistedBeforeTraceBackwardSite = "existed_before_trace_backward_site", Some(Category::Gradient), Some(Phase::Backward), Provenance::BeforeRecording;
    ExistedBeforeTraceInitSite = "existed_before_trace_init_site", Some(Category::Parameter), Some(Phase::Init), Provenance::BeforeRecording;
    ExistedBeforeTraceCacheSite = "existed_before_trace_cache_site", Some(Category::KvCache), None, Provenance::BeforeRecording;
    ExistedBeforeTraceForwardSite = "existed_before_trace_forward_site", Some(Category::Activation), Some(Phase::Forward), Provenance::BeforeRecording;
    /// Freed by autograd dropping what it saved for backward
    /// (`SavedVariable::reset_data`, `release_variables` in the free's own
    /// stack): an activation the forward saved.
    ExistedBeforeTraceSavedForBackward = "existed_before_trace_saved_for_backward", Some(Category::Activation), None, Provenance::BeforeRecording;
    /// Freed by `Optimizer.zero_grad`: a gradient from the step before.
    ExistedBeforeTraceFreedByZeroGrad = "existed_before_trace_freed_by_zero_grad", Some(Category::Gradient), Some(Phase::ZeroGrad), Provenance::BeforeRecording;
    ExistedBeforeTraceNoEvidence = "existed_before_trace_no_evidence", Some(Category::Unknown), None, Provenance::BeforeRecording;
    /// Megatron's contiguous `param_data` buffer (`buffers.rs`).
    MegatronParamBuffer = "megatron_param_buffer", Some(Category::Parameter), None, Provenance::Observed;
    /// Megatron's contiguous `grad_data` buffer.
    MegatronGradBuffer = "megatron_grad_buffer", Some(Category::Gradient), None, Provenance::Observed;
    /// DistributedDataParallel's gradient buckets, made by its `Reducer`
    /// (`_ddp_init_helper`) and remade after the first step
    /// (`_rebuild_buckets`): the gradients, copied there for the
    /// all-reduce, or viewed there (`gradient_as_bucket_view=True`).
    DdpGradientBucket = "ddp_gradient_bucket", Some(Category::Gradient), None, Provenance::Observed;
    /// The cuBLAS / cuBLASLt workspace (`getNewWorkspace`).
    CublasWorkspace = "cublas_workspace", Some(Category::Temporary), None, Provenance::Observed;
    /// Buffers of one site sized exactly like the parameters.
    InferredStateSizedLikeParameters = "inferred_optimizer_state_sized_like_parameters", Some(Category::OptimizerState), None, Provenance::Inferred;
    /// Existed before recording: parameter bytes from the gradients' sizes
    /// (`classify/before_recording.rs`, like every `inferred_…` rule).
    InferredParameterFromGradients = "inferred_parameter_from_gradient_sizes", Some(Category::Parameter), None, Provenance::InferredBeforeRecording;
    /// Existed before recording: parameter bytes from the weights operators read.
    InferredParameterFromShapes = "inferred_parameter_from_operator_shapes", Some(Category::Parameter), None, Provenance::InferredBeforeRecording;
    /// Existed before recording: gradients kept between steps.
    InferredGradientKept = "inferred_gradient_kept_between_steps", Some(Category::Gradient), None, Provenance::InferredBeforeRecording;
    /// Existed before recording: optimizer state, its tensors per parameter × the parameters.
    InferredOptimizerState = "inferred_optimizer_state_per_parameter", Some(Category::OptimizerState), None, Provenance::InferredBeforeRecording;
    /// Existed before recording: the KV-cache pool cache-writing operators write into.
    InferredKvCachePool = "inferred_kv_cache_pool_from_cache_writes", Some(Category::KvCache), None, Provenance::InferredBeforeRecording;
    /// Existed before recording: PyTorch's cuBLAS workspace for the device's
    /// compute capability, in a trace that runs matrix multiplies.
    InferredCublasWorkspace = "inferred_cublas_workspace_default_size", Some(Category::Temporary), None, Provenance::InferredBeforeRecording;
    /// Existed before recording: the model's input, the data the first
    /// weight-reading operator reads (`record_shapes`), made by no
    /// allocation while recording (`classify/evidence.rs`, `model_input`).
    InferredModelInput = "inferred_model_input_read_by_first_operator", Some(Category::Input), None, Provenance::InferredBeforeRecording;
    /// Existed before recording and alive to the end of a forward-only history.
    InferredWeightsForwardOnly = "inferred_weights_alive_through_forward_only_history", Some(Category::Parameter), None, Provenance::InferredBeforeRecording;
    /// Existed before recording, updated in place by the optimizer step
    /// after the other tensors of its size (`classify/update_order.rs`).
    InferredParameterUpdatedLast = "inferred_parameter_updated_last_in_optimizer_step", Some(Category::Parameter), None, Provenance::InferredBeforeRecording;
    /// From before recording, in a DistributedDataParallel run: blocks that
    /// tile the parameters (last updated first, as DDP fills its buckets)
    /// into runs of exactly their sizes: its gradient buckets.
    InferredDdpBucket = "inferred_ddp_gradient_bucket", Some(Category::Gradient), None, Provenance::InferredBeforeRecording;
    /// Existed before recording, in a DistributedDataParallel training run:
    /// the tensors the first recorded step's all-reduces reduce
    /// (`gloo:all_reduce` / `nccl:all_reduce`, `record_shapes`), made by no
    /// allocation while recording: its gradient buckets
    /// (`classify/evidence.rs`, `all_reduced_buckets`).
    InferredDdpBucketAllReduced = "inferred_ddp_gradient_bucket_all_reduced", Some(Category::Gradient), None, Provenance::InferredBeforeRecording;
    /// Existed before recording, updated in place by the optimizer step
    /// before its parameter.
    InferredOptimizerStateUpdatedFirst = "inferred_optimizer_state_updated_before_its_parameter", Some(Category::OptimizerState), None, Provenance::InferredBeforeRecording;
    /// Existed before recording, and backward added a new gradient into it
    /// in place (`classify/evidence.rs`, `added_into_before_recording`): a
    /// gradient kept between steps.
    InferredGradientAddedInto = "inferred_gradient_added_into_in_backward", Some(Category::Gradient), None, Provenance::InferredBeforeRecording;
}
