//! The deterministic random source of the state machines: the executor seeds it once, and every
//! random choice that changes state is logged in the form it took, so replay never draws. A leaf.

/// A small deterministic generator: the executor seeds it, the state machine never does.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
    /// Numbers drawn so far (`machine::Machine::replay_draws` holds replay's at zero).
    draws: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: seed | 1,
            draws: 0,
        }
    }
    /// How many numbers were drawn.
    pub fn draws(&self) -> u64 {
        self.draws
    }
    pub fn next_u64(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        self.draws += 1;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}
