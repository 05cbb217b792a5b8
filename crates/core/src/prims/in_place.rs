//! In-place execution: a graph executor lends an op the buffer of an argument that dies
//! at that op, and the op writes its result into it. Fused elementwise programs take any
//! argument of the result's type; `MatMulAdd` takes its addend when the product's tiles
//! can read it just before overwriting it (an optimizer's `m' = beta * m + dW` written
//! over `m`).
//!
//! ```
//! use spore_core::prims::in_place::{accepts_lent_buffer, lend_input_buffer};
//! use spore_core::{op::Op, Tensor};
//! let (a, b) = (Tensor::ones(&[2, 3], spore_core::DType::F32).unwrap(), Tensor::ones(&[3, 4], spore_core::DType::F32).unwrap());
//! let mut m = Tensor::zeros(&[2, 4], spore_core::DType::F32).unwrap();
//! let op = Op::MatMulAdd { beta_bits: 0.5f64.to_bits() };
//! let out = m.tensor_type().clone();
//! assert!(accepts_lent_buffer(&op, &[&a, &b, &m], &out, 2));
//! assert!(!accepts_lent_buffer(&op, &[&a, &b, &m], &out, 0)); // only the addend
//! assert!(lend_input_buffer(2, &mut m)); // nobody else holds m: its buffer is lent
//! let r = spore_core::apply::apply(op, &[&a, &b, &m], std::panic::Location::caller()).unwrap();
//! assert_eq!(r.to_vec::<f32>().unwrap(), vec![3.0; 8]);
//! ```
//!
//! Why only when nobody else holds the argument: its values are overwritten, so a tensor
//! the user (or another node) still reads must keep its own buffer.

use std::cell::RefCell;

use spore_kernels::Buffer;
use spore_kernels::matmul_epilogue::adds_in_place;

use crate::op::Op;
use crate::tensor::{Tensor, TensorType};

thread_local! {
    /// A buffer lent to the next op on this thread: (argument position, that argument's
    /// buffer). Set by [`lend_input_buffer`], taken by the op, which then reads that
    /// argument from the buffer it writes its result into.
    static LENT: RefCell<Option<(usize, Buffer)>> = const { RefCell::new(None) };
}

/// True when `op`, producing `out` from `args`, writes its result into argument `r`'s
/// buffer once it is lent (see [`lend_input_buffer`]). Executors ask this first: an op
/// that would not use the buffer must not be lent it.
pub fn accepts_lent_buffer(op: &Op, args: &[&Tensor], out: &TensorType, r: usize) -> bool {
    let Some(arg) = args.get(r) else {
        return false;
    };
    if arg.tensor_type() != out || arg.is_symbolic() {
        return false;
    }
    match op {
        Op::Fused(p) => r < p.num_inputs && out.dtype == p.compute,
        Op::MatMulAdd { .. } => {
            r == 2
                && args.len() == 3
                && !args[0].is_symbolic()
                && !args[1].is_symbolic()
                && adds_in_place(out.dtype, &args[0].layout(), &args[1].layout())
        }
        _ => false,
    }
}

/// Lends the buffer of `t`, argument `r` of the next op this thread runs, when nobody else
/// holds it and it is a plain row-major buffer of exactly `t`'s values: the buffer is
/// taken out (`t` is left empty, to be released) and that op writes its result into it.
/// Returns whether the buffer was taken.
pub fn lend_input_buffer(r: usize, t: &mut Tensor) -> bool {
    let Some(buffer) = t.take_unique_buffer() else {
        return false;
    };
    LENT.with(|l| *l.borrow_mut() = Some((r, buffer)));
    true
}

/// The buffer lent to the op now running, if any (the op takes it once).
pub(crate) fn take_lent() -> Option<(usize, Buffer)> {
    LENT.with(|l| l.borrow_mut().take())
}

/// Puts a lent buffer back, untouched, for [`reclaim_lent_buffer`] (an op that failed
/// before writing into it).
pub(crate) fn relend(r: usize, buffer: Buffer) {
    LENT.with(|l| *l.borrow_mut() = Some((r, buffer)));
}

/// The lent buffer that no op took (the op failed before running), with its values
/// intact, for the executor to give back to its owner.
pub fn reclaim_lent_buffer() -> Option<Buffer> {
    take_lent().map(|(_, b)| b)
}
