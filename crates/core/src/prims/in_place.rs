//! In-place execution: a graph executor lends an op the buffer of an argument that dies
//! at that op, and the op writes its result into it. Fused elementwise programs take any
//! argument of the result's type; `MatMulAdd` takes its addend when the product's tiles
//! can read it just before overwriting it (an optimizer's `m' = beta * m + dW` written
//! over `m`).
//!
//! ```
//! use spore_core::prims::in_place::{accepts_lent_buffer, EvalContext};
//! use spore_core::{apply::apply_in_graph, op::Op, Tensor};
//! let (a, b) = (Tensor::ones(&[2, 3], spore_core::DType::F32).unwrap(), Tensor::ones(&[3, 4], spore_core::DType::F32).unwrap());
//! let mut m = Tensor::zeros(&[2, 4], spore_core::DType::F32).unwrap();
//! let op = Op::MatMulAdd { beta_bits: 0.5f64.to_bits() };
//! let out = m.tensor_type().clone();
//! // The product's tiles write over the addend where AVX2 runs (see `spore_kernels::isa`).
//! let tiles = spore_kernels::isa::allows(spore_kernels::isa::Isa::Avx2);
//! assert_eq!(accepts_lent_buffer(&op, &[&a, &b, &m], &out, 2), tiles);
//! assert!(!accepts_lent_buffer(&op, &[&a, &b, &m], &out, 0)); // only the addend
//! let mut ctx = EvalContext::default();
//! if tiles {
//!     assert!(ctx.lend(2, &mut m)); // nobody else holds m: its buffer is lent
//! }
//! let loc = std::panic::Location::caller();
//! let r = apply_in_graph(&op, &[&a, &b, &m], loc, &mut ctx).unwrap();
//! assert_eq!(r.to_vec::<f32>().unwrap(), vec![3.0; 8]);
//! assert!(ctx.reclaim().is_none(), "the op took the buffer, if it was lent");
//! ```
//!
//! Why only when nobody else holds the argument: its values are overwritten, so a tensor
//! the user (or another node) still reads must keep its own buffer.

use spore_kernels::Buffer;
use spore_kernels::matmul_epilogue::adds_in_place;

use crate::op::Op;
use crate::tensor::{Tensor, TensorType};

/// What an op's `eval` gets besides its inputs: the buffer an executor lends it, as
/// (argument position, that argument's buffer). The op takes it, writes its result into
/// it, and reads that argument from it. Passed explicitly (it was a thread-local), so
/// that what reaches an op is in its signature.
#[derive(Debug, Default)]
pub struct EvalContext {
    lent: Option<(usize, Buffer)>,
}

impl EvalContext {
    /// Lends the buffer of `t`, argument `r` of the op this context goes to, when nobody
    /// else holds it and it is a plain row-major buffer of exactly `t`'s values: the
    /// buffer is taken out (`t` is left empty, to be released). Returns whether it was.
    pub fn lend(&mut self, r: usize, t: &mut Tensor) -> bool {
        let Some(buffer) = t.take_unique_buffer() else {
            return false;
        };
        self.lent = Some((r, buffer));
        true
    }

    /// The lent buffer, for the op that writes into it (taken once).
    pub(crate) fn take_lent(&mut self) -> Option<(usize, Buffer)> {
        self.lent.take()
    }

    /// Puts a lent buffer back, untouched (an op that failed before writing into it).
    pub(crate) fn relend(&mut self, r: usize, buffer: Buffer) {
        self.lent = Some((r, buffer));
    }

    /// The lent buffer that the op did not take (it failed before running), values
    /// intact, for the executor to give back to its owner.
    pub fn reclaim(&mut self) -> Option<Buffer> {
        self.lent.take().map(|(_, b)| b)
    }
}

/// True when `op`, producing `out` from `args`, writes its result into argument `r`'s
/// buffer once it is lent (see [`EvalContext::lend`]). Executors ask this first: an op
/// that would not use the buffer must not be lent it.
pub fn accepts_lent_buffer(op: &Op, args: &[&Tensor], out: &TensorType, r: usize) -> bool {
    let Some(arg) = args.get(r) else {
        return false;
    };
    // 16-bit values go through float32 kernels, which write a buffer of their own.
    if out.dtype.is_half() {
        return false;
    }
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
