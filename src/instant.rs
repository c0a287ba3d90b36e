//! `--at`: the instant a report shows instead of the peak: an event index,
//! a time since the first event, the N-th OOM, the peak or the end.

use std::fmt;

use crate::model::DeviceTrace;
use crate::timeline::Replay;
use crate::units::human_duration_us;

/// An instant of a trace, as given on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct At {
    spec: String,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Peak,
    End,
    /// The state after this event.
    Event(u64),
    /// The state after the last event at or before this many µs since the first.
    Time(f64),
    /// The state when the N-th OOM (from 0) happened.
    Oom(usize),
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spec)
    }
}

impl At {
    /// Parses `1234` (the state after event 1234), `1.5s` / `300ms` /
    /// `20us` (time since the first event), `oom:N` (the N-th OOM, from 0),
    /// `peak` or `end`.
    pub fn parse(s: &str) -> Result<At, String> {
        let spec = s.trim().to_owned();
        let bad = || {
            format!(
                "`{s}` is not an instant: give an event index (1234), a time since the first event (1.5s, 300ms, 20us), oom:N, peak or end"
            )
        };
        let kind = if spec == "peak" {
            Kind::Peak
        } else if spec == "end" {
            Kind::End
        } else if let Some(n) = spec.strip_prefix("oom:") {
            Kind::Oom(n.parse().map_err(|_| bad())?)
        } else if spec.bytes().all(|b| b.is_ascii_digit()) && !spec.is_empty() {
            Kind::Event(spec.parse().map_err(|_| bad())?)
        } else {
            let split = spec
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .ok_or_else(bad)?;
            let (number, unit) = spec.split_at(split);
            let scale = match unit {
                "s" => 1e6,
                "ms" => 1e3,
                "us" | "µs" => 1.0,
                _ => return Err(bad()),
            };
            let value: f64 = number.parse().map_err(|_| bad())?;
            Kind::Time(value * scale)
        };
        Ok(At { spec, kind })
    }

    /// The position (the state after that many events) this instant names
    /// on `device`, or why it names none there.
    pub fn resolve(&self, device: &DeviceTrace, replay: &Replay) -> Result<u32, String> {
        let events = replay.events;
        match self.kind {
            Kind::Peak => Ok(replay.peak_position()),
            Kind::End => Ok(events),
            Kind::Event(e) if e < u64::from(events) => Ok(e as u32 + 1),
            Kind::Event(e) => Err(match events {
                0 => format!("--at {e}: {} has no events", device.device),
                n => format!("--at {e}: {} has events 0 to {} only", device.device, n - 1),
            }),
            Kind::Oom(n) => match replay.ooms.get(n) {
                Some(&k) => Ok(k + 1),
                None => Err(format!(
                    "--at oom:{n}: {} has {} OOM event(s) (oom:0 is the first)",
                    device.device,
                    replay.ooms.len()
                )),
            },
            Kind::Time(t) => {
                if !replay.timestamped {
                    return Err(format!(
                        "--at {}: {} has no usable timestamps; give an event index",
                        self.spec, device.device
                    ));
                }
                let t0 = device.events[0].ts_us;
                let last = device.events[device.events.len() - 1].ts_us - t0;
                if t > last {
                    return Err(format!(
                        "--at {}: the recording of {} lasts {}",
                        self.spec,
                        device.device,
                        human_duration_us(last)
                    ));
                }
                let k = device
                    .events
                    .iter()
                    .rposition(|e| e.ts_us - t0 <= t)
                    .unwrap_or(0);
                Ok(k as u32 + 1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Action, Event};

    fn device(times: &[f64]) -> DeviceTrace {
        DeviceTrace {
            device: "cuda:0".into(),
            events: times
                .iter()
                .enumerate()
                .map(|(k, &t)| {
                    let mut e = if k == 2 {
                        Event::oom(1 << 30, 0)
                    } else {
                        Event::new(Action::Alloc, 0x100 * (k as u64 + 1), 100)
                    };
                    e.ts_us = t;
                    e
                })
                .collect(),
            ..DeviceTrace::default()
        }
    }

    #[test]
    fn instants_resolve_to_positions() {
        let d = device(&[1000.0, 1500.0, 2500.0, 4000.0]);
        let r = crate::timeline::replay(&d);
        let at = |s: &str| At::parse(s).unwrap().resolve(&d, &r);
        assert_eq!(at("0"), Ok(1));
        assert_eq!(at("3"), Ok(4));
        assert!(at("4").unwrap_err().contains("events 0 to 3 only"));
        assert_eq!(at("oom:0"), Ok(3));
        assert!(at("oom:1").unwrap_err().contains("1 OOM event(s)"));
        assert_eq!(at("peak"), Ok(r.peak_position()));
        assert_eq!(at("end"), Ok(4));
        // Times since the first event: the state after the last event at or before.
        assert_eq!(at("0us"), Ok(1));
        assert_eq!(at("499us"), Ok(1));
        assert_eq!(at("0.5ms"), Ok(2));
        assert_eq!(at("0.003s"), Ok(4));
        assert!(at("4ms").unwrap_err().contains("lasts 3.00 ms"));
        for bad in ["", "-3", "oom:x", "1.5h", "ms", "1e3"] {
            assert!(At::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(At::parse(" oom:0 ").unwrap().to_string(), "oom:0");
    }
}
