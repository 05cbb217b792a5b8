//! spore-compile's integration tests (one binary). The op table and its references are
//! shared with spore-core's tests.

#[path = "../../../core/tests/core/reference.rs"]
mod reference;
#[allow(dead_code)] // the compile tests use the runners, not the references
#[path = "../../../core/tests/core/table.rs"]
mod table;

mod compiled_table;
mod control_flow;
mod jit_cache;
mod passes;
mod save_graphs;
mod training_step;

/// The deterministic input generator the shared table expects.
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

/// Asserts two tensors hold the same shape and values within `tol`.
pub fn assert_close(a: &spore_core::Tensor, b: &spore_core::Tensor, tol: f64, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtypes");
    let (x, y) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!(
            (p - q).abs() <= tol * (1.0 + q.abs()),
            "{what}: element {i}: {p} vs {q}"
        );
    }
}
