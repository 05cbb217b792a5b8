//! spore-core's integration tests (one binary: linking dominates build time on 2 cores).

mod autodiff;
mod custom;
mod errors;
mod op_table;
mod reference;
mod table;
mod tensor;
mod training;

/// A small deterministic generator for test inputs (independent of Spore's own RNG).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next_f64(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }
}
