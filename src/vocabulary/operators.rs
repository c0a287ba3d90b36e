//! What profiler operator names say about an allocation (Chrome traces,
//! whose sites are operator stacks: `cpu_op` frames named `aten::addmm`).
//!
//! Without Python stacks (the profiler's default `with_stack=False`) the
//! operator tree is all a trace tells about the program: the backward pass
//! and the optimizer are named by their operators and annotations
//! (`frame_facts` in the parent module), and what is left is either the
//! forward pass computing or a tensor being *created*. The two are told apart
//! by the outermost operator call that allocated.

use super::is_operator_call;

/// How the outermost operator call of a site made its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outermost {
    /// A tensor made from nothing but sizes, fill values or random numbers
    /// (`torch.empty`, `zeros`, `randn`, `arange`, `*_like`), or copied from
    /// another device or dtype (`.to()`): how weights, buffers and batches
    /// come into being. Its category follows from its lifetime.
    Creates,
    /// Any other operator: a computation on tensors. Outside the backward
    /// pass and the optimizer, that is the forward pass (or the loss).
    Computes,
}

/// The operators that create a tensor without computing it from another
/// (ATen names without the `aten::` prefix).
const CREATION_OPS: &[&str] = &[
    "empty",
    "empty_strided",
    "empty_like",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "rand",
    "rand_like",
    "randn",
    "randn_like",
    "randint",
    "randint_like",
    "randperm",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "scalar_tensor",
    "normal",
    "to",
    "_to_copy",
    "pin_memory",
    "_pin_memory",
    "from_file",
];

/// What a `cpu_op` frame named `name` says, when it is an operator call.
pub(super) fn outermost(name: &str) -> Option<Outermost> {
    if !is_operator_call(name) {
        return None;
    }
    let creates = name
        .strip_prefix("aten::")
        .is_some_and(|op| CREATION_OPS.contains(&op));
    Some(if creates {
        Outermost::Creates
    } else {
        Outermost::Computes
    })
}

/// Whether the operator concatenates tensors (`torch.cat`), the way a cache
/// that grows by one token per step is extended.
pub(super) fn concatenates(name: &str) -> bool {
    matches!(name, "aten::cat" | "aten::concat" | "aten::concatenate")
        || name.contains("method cat>")
        || name.starts_with("<built-in method cat ")
}

/// Whether the operator's backward reads its result, so autograd saves the
/// output itself (`result` in PyTorch's `derivatives.yaml`): `relu`
/// (allocating as `clamp_min` below it on CPU), `sigmoid`, `tanh`, `exp`,
/// the softmaxes, `sqrt`, `rsqrt`, `elu`. Only operator frames count
/// (`aten::relu`, Python's `<built-in method relu of …>`), not a Python
/// function that happens to have such a name.
pub fn saves_its_result(name: &str) -> bool {
    let op = if let Some(rest) = name.strip_prefix("<built-in ") {
        let rest = rest
            .strip_prefix("method ")
            .or_else(|| rest.strip_prefix("function "))
            .unwrap_or(rest);
        rest.split([' ', '>']).next().unwrap_or(rest)
    } else if let Some(op) = name.strip_prefix("aten::") {
        op
    } else {
        return false;
    };
    matches!(
        op.trim_end_matches('_'),
        "relu"
            | "sigmoid"
            | "tanh"
            | "exp"
            | "_softmax"
            | "softmax"
            | "_log_softmax"
            | "log_softmax"
            | "sqrt"
            | "rsqrt"
            | "elu"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_saved_for_backward() {
        assert!(saves_its_result("aten::relu"));
        assert!(saves_its_result("aten::relu_"));
        assert!(saves_its_result("aten::_softmax"));
        assert!(saves_its_result(
            "<built-in method relu of type object at 0x7ff7e44bc100>"
        ));
        assert!(saves_its_result("<built-in function sigmoid>"));
        assert!(!saves_its_result("<built-in function linear>"));
        assert!(!saves_its_result("aten::clamp_min"));
        assert!(!saves_its_result("aten::gelu"));
        assert!(!saves_its_result("aten::add"));
        // A Python function of that name is no operator.
        assert!(!saves_its_result("softmax"));
    }

    #[test]
    fn creation_and_computation() {
        assert_eq!(outermost("aten::empty"), Some(Outermost::Creates));
        assert_eq!(outermost("aten::to"), Some(Outermost::Creates));
        assert_eq!(outermost("aten::addmm"), Some(Outermost::Computes));
        assert_eq!(outermost("AddmmBackward0"), Some(Outermost::Computes));
        assert_eq!(outermost("ProfilerStep#2"), None);
        assert_eq!(
            outermost("autograd::engine::evaluate_function: AddmmBackward0"),
            None
        );
        assert!(concatenates("aten::cat"));
        assert!(!concatenates("aten::catch"));
    }
}
