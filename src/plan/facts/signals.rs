//! The planner's evidence read off names (frames, operators, annotations):
//! how often each kind was seen and the first name that showed it. What a
//! name says is the frame vocabulary's ([`crate::vocabulary::name_says`]).

use crate::model::Trace;

/// Evidence read off names: frames, operators, annotations.
#[derive(Debug, Default)]
pub(super) struct Signals {
    pub(super) backward: Seen,
    pub(super) optimizer_step: Seen,
    pub(super) optimizer_name: Option<String>,
    pub(super) foreach: Seen,
    pub(super) fused: Seen,
    pub(super) single_tensor: Seen,
    pub(super) eight_bit_optimizer: Seen,
    pub(super) inference: Seen,
    pub(super) checkpoint: Seen,
    pub(super) serving_engine: Seen,
    pub(super) collectives: Seen,
    pub(super) data_parallel: Seen,
    pub(super) sharded: Seen,
}

/// How often a kind of evidence was seen, and the first name that showed it.
#[derive(Debug, Default)]
pub(super) struct Seen {
    pub(super) count: u64,
    pub(super) example: Option<String>,
}

impl Seen {
    fn note(&mut self, hit: bool, name: &str, count: u64) {
        if hit {
            self.count += count;
            if self.example.is_none() {
                self.example = Some(shorten(name));
            }
        }
    }
    pub(super) fn any(&self) -> bool {
        self.count > 0
    }
    pub(super) fn example(&self) -> &str {
        self.example.as_deref().unwrap_or("")
    }
}

/// A name short enough for a report line: a path from its package on
/// (`torch/optim/adamw.py(231): step`), at most 60 characters.
fn shorten(name: &str) -> String {
    const MAX: usize = 60;
    let name = match name.rfind("site-packages/") {
        Some(i) => &name[i + "site-packages/".len()..],
        None => name,
    };
    if name.chars().count() <= MAX {
        name.to_owned()
    } else {
        let cut: String = name.chars().take(MAX - 1).collect();
        format!("{cut}…")
    }
}

impl Signals {
    pub(super) fn read(trace: &Trace) -> Signals {
        // Annotations first: their names make the best examples.
        let mut s = Signals::default();
        for a in &trace.annotations {
            s.note(&a.name, 1);
        }
        for (name, count) in &trace.run.operators {
            s.note(name, *count);
        }
        for name in trace.sites.strings() {
            s.note(name, 1);
        }
        s
    }

    fn note(&mut self, raw: &str, count: u64) {
        if raw.is_empty() {
            return;
        }
        // Windows paths use backslashes; the patterns are written with `/`.
        let name: std::borrow::Cow<'_, str> = if raw.contains('\\') {
            raw.replace('\\', "/").into()
        } else {
            raw.into()
        };
        let n = name.as_ref();
        let says = crate::vocabulary::name_says(n);
        self.backward.note(says.backward, n, count);
        self.optimizer_step.note(says.optimizer_step, n, count);
        if self.optimizer_name.is_none() {
            self.optimizer_name = crate::vocabulary::optimizer_class(n);
        }
        self.foreach.note(says.foreach, n, count);
        self.fused.note(says.fused, n, count);
        self.single_tensor.note(says.single_tensor, n, count);
        self.eight_bit_optimizer
            .note(says.eight_bit_optimizer, n, count);
        self.inference.note(says.inference, n, count);
        self.serving_engine.note(says.serving_engine, n, count);
        self.checkpoint.note(says.checkpoint, n, count);
        self.collectives.note(says.collectives, n, count);
        self.data_parallel.note(says.data_parallel, n, count);
        self.sharded.note(says.sharded, n, count);
    }
}
