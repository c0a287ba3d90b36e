//! The timeline of one device: the replay of its events into allocation
//! intervals and memory curves ([`replay`]), and the walk over its positions
//! that gives bytes by category at each one ([`walk`]), which the plots and
//! the planner both read.

mod replay;
mod steps;
mod walk;

#[cfg(test)]
pub use replay::curve;
pub use replay::{argmax, replay, Interval, Origin, Replay};
pub use steps::Steps;
pub use walk::{DeviceTimeline, Walk};
