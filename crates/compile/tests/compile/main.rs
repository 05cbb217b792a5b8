//! spore-compile's integration tests (one binary). The op table and its references are
//! shared with spore-core's tests.

#[path = "../../../core/tests/core/reference.rs"]
mod reference;
#[allow(dead_code)] // the compile tests use the runners, not the references
#[path = "../../../core/tests/core/table.rs"]
mod table;
#[allow(dead_code)] // the compile tests use the runners, not the references
#[path = "../../../core/tests/core/table_products.rs"]
mod table_products;
#[allow(dead_code)] // the compile tests use the runners, not the references
#[path = "../../../core/tests/core/table_structural.rs"]
mod table_structural;

#[allow(dead_code)] // the compile tests use the runners, not the references
#[path = "../../../core/tests/core/table_api.rs"]
mod table_api;

#[path = "../../../core/tests/core/table_compiled.rs"]
mod table_compiled;

mod buffer_pool;
mod compiled_table;
mod control_flow;
mod control_flow_grad;
mod conv_epilogues;
mod custom_op;
mod fusion_bits;
mod in_place_updates;
mod jit_cache;
mod passes;
mod product_epilogues;
mod save_graphs;
#[path = "../common/train_steps.rs"]
mod train_steps;
mod training_step;

/// The deterministic input generator, shared with the op table.
pub use table::Lcg;

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

/// The bit patterns of a tensor's values (as float64), for checks that two results are
/// equal bit for bit.
pub fn bits(t: &spore_core::Tensor) -> Vec<u64> {
    t.to_f64_vec()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}
