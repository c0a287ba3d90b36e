//! Classification: every allocation interval → a [`Category`] and the rule that fired.
//!
//! Rules are ordered and explainable: evidence comes from the allocation
//! site's frames (innermost first), the *phase* the program was in when the
//! memory was allocated and freed (forward, backward, optimizer step, …), and
//! the allocation's lifetime. User rules from a file are tried first.
//!
//! Phases come from frames because every format has them: snapshot stacks
//! (`torch/optim/adamw.py`, `run_backward`, `nn.Module: …`) and Chrome
//! operator stacks (`Optimizer.step#…`, `autograd::engine::evaluate_function`).
//! The phase at a free is the phase of the latest allocation before it, since
//! free events often carry the *allocation* stack (`context="alloc"`).
//! `external_annotations` time ranges (`Optimizer.step#…`) override both.
//!
//! Classification of one interval only reads shared, precomputed facts, so it
//! runs in parallel with rayon and gives the same answer at any thread count.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::model::{Action, Category, DeviceTrace, Format, SiteId, Sites, Trace};
use crate::timeline::{Interval, Origin, Replay};

/// The category of one interval and the name of the rule that chose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    pub category: Category,
    pub rule: &'static str,
}

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
        } else if self.forward {
            Phase::Forward
        } else {
            Phase::Unknown
        }
    }
}

/// Reads a site's frames for evidence. Patterns cover Python frames
/// (`filename`, `name`), C++ frames and profiler operator names.
pub fn site_facts(sites: &Sites, site: SiteId) -> SiteFacts {
    let mut f = SiteFacts::default();
    let mut attention = false;
    let mut concat_or_copy = false;
    for frame in sites.frames(site) {
        // Windows stacks use backslashes; patterns are written with `/`.
        let file = sites.str(frame.filename).replace('\\', "/");
        let name = sites.str(frame.name).replace('\\', "/");
        let (file, name) = (file.as_str(), name.as_str());
        let has = |needle: &str| file.contains(needle) || name.contains(needle);
        f.optimizer |= has("torch/optim/")
            || file.contains("/optimizer/")
            || file.contains("/optim/")
            || has("Optimizer.step")
            || name.starts_with("Optimizer.")
            || (file.contains("optimizer") && name == "step");
        f.zero_grad |= has("zero_grad");
        f.accumulate_grad |= has("AccumulateGrad");
        f.backward |= has("run_backward")
            || has("autograd::engine::evaluate_function")
            || has("torch::autograd::Engine")
            || name.contains("Backward0")
            || name.contains("Backward1")
            || has("CompiledFunction(Backward)")
            || (file.contains("torch/autograd/") && name == "backward")
            || (file.contains("torch/_tensor.py") && name.contains("backward"));
        f.forward |= name.starts_with("nn.Module:")
            || has("torch/nn/functional.py")
            || name.contains("_call_impl")
            || name == "forward"
            || name.contains("): forward")
            || name.contains("## forward ##");
        f.module_init |= (file.contains("torch/nn/modules/") && name.contains("__init__"))
            || name.contains("torch/nn/modules/") && name.contains("__init__")
            || has("reset_parameters")
            || has("torch/nn/init.py")
            || has("load_state_dict")
            || name.ends_with("): _apply")
            || (file.contains("torch/nn/modules/module.py")
                && matches!(name, "_apply" | "to" | "cuda" | "convert"))
            || has("from_pretrained");
        f.data_loading |= has("DataLoader") || has("dataloader.py") || has("collate");
        f.kv_cache |= has("cache_utils")
            || has("past_key")
            || has("kv_cache")
            || has("key_cache")
            || has("value_cache")
            || has("KVCache")
            || has("DynamicCache")
            || has("StaticCache");
        f.recompute |= has("torch/utils/checkpoint.py") || has("CheckpointFunction");
        attention |= has("attn") || has("attention") || has("Attention");
        concat_or_copy |= name.contains("method cat>")
            || name.contains("aten::cat")
            || name.contains("index_copy")
            || name.contains("aten::copy_")
            || name.contains("scatter");
    }
    // A cache grows by concatenating or copying new keys/values under attention.
    f.kv_cache |= attention && concat_or_copy;
    f
}

/// A user rule (from `--rules FILE`, a JSON list), tried before the built-in ones.
/// Every present condition must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserRule {
    pub name: String,
    pub category: Category,
    /// Substring that some frame's file or name must contain.
    #[serde(default)]
    pub site_contains: Option<String>,
    /// Only allocations that are (or are not) alive at the end of the trace.
    #[serde(default)]
    pub alive_at_end: Option<bool>,
    /// Only allocations at least this large.
    #[serde(default)]
    pub min_bytes: Option<u64>,
}

impl UserRule {
    fn matches(&self, sites: &Sites, interval: &Interval, alive_at_end: bool) -> bool {
        let site_ok = self.site_contains.as_deref().is_none_or(|needle| {
            sites.frames(interval.site).iter().any(|fr| {
                sites.str(fr.filename).contains(needle) || sites.str(fr.name).contains(needle)
            })
        });
        site_ok
            && self.alive_at_end.is_none_or(|a| a == alive_at_end)
            && self.min_bytes.is_none_or(|m| interval.size >= m)
    }
}

/// Everything the rules read, computed once per device.
struct Context<'a> {
    sites: &'a Sites,
    facts: Vec<SiteFacts>,
    /// Phase at each position (after the latest allocation event).
    phase_at: Vec<Phase>,
    /// Number of allocation events among the first `p` events.
    allocs_before: Vec<u32>,
    /// First position at or after `p` whose latest allocation was in forward.
    next_forward: Vec<u32>,
    positions: u32,
    /// The trace has a backward pass at all (training rather than inference).
    training: bool,
    trust_given: bool,
}

/// How many other allocations may happen between an allocation and its
/// free for it to still count as an operator's scratch space. Chosen on the
/// sample traces (`sample_traces/`): PyTorch's own TEMPORARY tensors are
/// freed before the op returns, typically with zero or one allocation between.
const TEMPORARY_MAX_ALLOCS_BETWEEN: u32 = 0;

/// Classifies every interval of one replayed device.
pub fn classify(
    trace: &Trace,
    device: &DeviceTrace,
    replay: &Replay,
    user_rules: &[UserRule],
) -> Vec<Classification> {
    let ctx = Context::new(trace, device, replay);
    replay
        .intervals
        .par_iter()
        .map(|interval| classify_one(&ctx, interval, user_rules))
        .collect()
}

impl<'a> Context<'a> {
    fn new(trace: &'a Trace, device: &DeviceTrace, replay: &Replay) -> Context<'a> {
        let sites = &trace.sites;
        let facts: Vec<SiteFacts> = (0..sites.len() as SiteId)
            .into_par_iter()
            .map(|s| site_facts(sites, s))
            .collect();
        let positions = replay.positions();
        let mut phase_at = Vec::with_capacity(positions as usize);
        let mut allocs_before = Vec::with_capacity(positions as usize);
        let mut phase = Phase::Unknown;
        let mut allocs = 0u32;
        phase_at.push(phase);
        allocs_before.push(0);
        let optimizer_ranges: Vec<(f64, f64)> = trace
            .annotations
            .iter()
            .filter(|a| a.name.starts_with("Optimizer.step"))
            .map(|a| (a.start_us, a.end_us))
            .collect();
        let mut training = false;
        for event in &device.events {
            if event.action == Action::Alloc {
                allocs += 1;
                let f = facts[event.site as usize];
                training |= f.backward || f.accumulate_grad;
                phase = f.phase();
                if let Some(ts) = event.ts() {
                    if optimizer_ranges.iter().any(|&(s, e)| s <= ts && ts <= e) {
                        phase = Phase::Optimizer;
                    }
                }
            }
            phase_at.push(phase);
            allocs_before.push(allocs);
        }
        let mut next_forward = vec![u32::MAX; phase_at.len()];
        let mut next = u32::MAX;
        for p in (0..phase_at.len()).rev() {
            if phase_at[p] == Phase::Forward {
                next = p as u32;
            }
            next_forward[p] = next;
        }
        Context {
            next_forward,
            sites,
            facts,
            phase_at,
            allocs_before,
            positions,
            training,
            trust_given: trace.format == Format::MemoryTimeline,
        }
    }

    fn phase(&self, position: u32) -> Phase {
        self.phase_at[(position as usize).min(self.phase_at.len() - 1)]
    }
}

fn classify_one(ctx: &Context, interval: &Interval, user_rules: &[UserRule]) -> Classification {
    let pick = |category, rule| Classification { category, rule };
    let alive_at_end = interval.end >= ctx.positions;
    if let Some(rule) = user_rules
        .iter()
        .find(|r| r.matches(ctx.sites, interval, alive_at_end))
    {
        // User rule names are leaked once per rule set; they live as long as the run.
        return pick(rule.category, user_rule_name(&rule.name));
    }
    if ctx.trust_given {
        if let Some(c) = interval.given {
            return pick(c, "category_from_file");
        }
    }
    let facts = ctx.facts[interval.site as usize];
    if interval.origin == Origin::Untracked {
        return pick(Category::Unknown, "allocated_before_profiling_unattributed");
    }
    if interval.origin.is_baseline() {
        return classify_baseline(&facts, alive_at_end);
    }

    let alloc_phase = ctx.phase(interval.start);
    let free_phase = (!alive_at_end).then(|| ctx.phase(interval.end));
    let allocs_between = ctx.allocs_before[(interval.end.min(ctx.positions - 1)) as usize]
        - ctx.allocs_before[interval.start as usize];
    // The threshold is a tunable that happens to be 0 today.
    #[allow(clippy::absurd_extreme_comparisons)]
    let short_lived = !alive_at_end && allocs_between <= TEMPORARY_MAX_ALLOCS_BETWEEN;

    if facts.accumulate_grad && free_phase != Some(Phase::Backward) {
        return pick(Category::Gradient, "accumulate_grad_outlives_backward");
    }
    match alloc_phase {
        Phase::Optimizer => {
            if free_phase == Some(Phase::Optimizer) && short_lived {
                pick(Category::Temporary, "optimizer_step_scratch")
            } else if free_phase == Some(Phase::Optimizer) && !facts.optimizer {
                pick(Category::Temporary, "freed_within_optimizer_step")
            } else {
                pick(
                    Category::OptimizerState,
                    "allocated_in_optimizer_step_outlives_it",
                )
            }
        }
        Phase::ZeroGrad => pick(Category::Gradient, "allocated_in_zero_grad"),
        Phase::Backward => {
            if free_phase != Some(Phase::Backward) {
                pick(Category::Gradient, "allocated_in_backward_outlives_it")
            } else if short_lived {
                pick(Category::Temporary, "short_lived_in_backward")
            } else if facts.recompute {
                pick(Category::Activation, "recomputed_activation_in_backward")
            } else {
                pick(Category::AutogradDetail, "freed_within_backward")
            }
        }
        Phase::Init => {
            if alive_at_end || free_phase != Some(Phase::Init) {
                pick(Category::Parameter, "module_init_or_load")
            } else {
                pick(Category::Temporary, "freed_during_init")
            }
        }
        Phase::DataLoading => pick(Category::Input, "data_loading"),
        Phase::Forward => {
            if short_lived {
                pick(Category::Temporary, "short_lived_in_forward")
            } else if facts.kv_cache && !ctx.training {
                pick(Category::KvCache, "inference_cache_outlives_forward")
            } else if free_phase == Some(Phase::Backward) {
                pick(Category::Activation, "forward_output_freed_in_backward")
            } else {
                pick(Category::Activation, "forward_output")
            }
        }
        Phase::Unknown => {
            if short_lived {
                pick(Category::Temporary, "short_lived")
            } else if facts.forward {
                pick(Category::Activation, "forward_output")
            } else if ctx.next_forward[interval.start as usize] < interval.end {
                pick(
                    Category::Input,
                    "allocated_outside_model_live_during_forward",
                )
            } else {
                pick(Category::Unknown, "no_evidence")
            }
        }
    }
}

fn classify_baseline(facts: &SiteFacts, alive_at_end: bool) -> Classification {
    let pick = |category, rule| Classification { category, rule };
    if facts.optimizer {
        pick(
            Category::OptimizerState,
            "existed_before_trace_optimizer_site",
        )
    } else if facts.accumulate_grad || (facts.backward && alive_at_end) {
        pick(Category::Gradient, "existed_before_trace_backward_site")
    } else if facts.module_init {
        pick(Category::Parameter, "existed_before_trace_init_site")
    } else if facts.kv_cache {
        pick(Category::KvCache, "existed_before_trace_cache_site")
    } else if facts.forward {
        pick(Category::Activation, "existed_before_trace_forward_site")
    } else if alive_at_end {
        // Alive before recording began and never freed: in a training or
        // inference process that is overwhelmingly the weights.
        pick(
            Category::Parameter,
            "existed_before_trace_alive_to_end_assumed_weights",
        )
    } else {
        pick(Category::Unknown, "existed_before_trace_no_evidence")
    }
}

fn user_rule_name(name: &str) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .expect("not poisoned");
    if let Some(n) = names.get(name) {
        return n;
    }
    let leaked: &'static str = Box::leak(format!("user:{name}").into_boxed_str());
    names.insert(name.to_owned(), leaked);
    leaked
}
