//! Flow control: a key groups messages from any destination and any publish path; at most
//! `parallelism` of them are in flight and at most `rate` start per `period`.
//!
//! What a key is told to do (pause, pin) is logged (`Event::FlowControl`). Its counters (in
//! flight, started in this window) and its wait list are the scheduler's view, like the
//! in-flight marks: after a restart they start from zero and every pending message is due again.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// The logged part of a key: pause and pinned limits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowSettings {
    pub paused: bool,
    pub pin_parallelism: Option<u32>,
    pub pin_rate: Option<u32>,
    pub pin_period_s: Option<u64>,
}

#[derive(Debug, Default)]
pub struct Flow {
    pub settings: FlowSettings,
    /// Limits the key's latest message asked for (shown when nothing is pinned).
    pub parallelism: Option<u32>,
    pub rate: Option<u32>,
    pub period_s: Option<u64>,
    pub in_flight: u32,
    pub window_start_ms: u64,
    pub window_count: u32,
    /// Due messages held back by the key's limits, in the order they came due.
    pub waiting: VecDeque<Arc<str>>,
}

impl Flow {
    pub fn parallelism_max(&self) -> Option<u32> {
        self.settings.pin_parallelism.or(self.parallelism)
    }
    pub fn rate_max(&self) -> Option<u32> {
        self.settings.pin_rate.or(self.rate)
    }
    pub fn period_s(&self) -> u64 {
        self.settings
            .pin_period_s
            .or(self.period_s)
            .unwrap_or(1)
            .max(1)
    }

    /// Whether one more message may start at `now_ms`; if so, counts it.
    /// `Err(Some(t))`: the rate window is full until `t`; `Err(None)`: wait for a slot.
    pub fn try_start(&mut self, now_ms: u64) -> Result<(), Option<u64>> {
        if self.settings.paused {
            return Err(None);
        }
        if let Some(p) = self.parallelism_max() {
            if self.in_flight >= p.max(1) {
                return Err(None);
            }
        }
        if let Some(r) = self.rate_max() {
            let period_ms = self.period_s() * 1000;
            if now_ms >= self.window_start_ms + period_ms {
                self.window_start_ms = now_ms;
                self.window_count = 0;
            }
            if self.window_count >= r {
                return Err(Some(self.window_start_ms + period_ms));
            }
            self.window_count += 1;
        }
        self.in_flight += 1;
        Ok(())
    }

    pub fn finished(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

/// All keys.
#[derive(Debug, Default)]
pub struct Flows {
    pub keys: HashMap<String, Flow>,
}

impl Flows {
    pub fn get_mut(&mut self, key: &str) -> &mut Flow {
        self.keys.entry(key.to_string()).or_default()
    }
}
