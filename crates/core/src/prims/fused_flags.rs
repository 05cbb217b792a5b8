//! A fused loop's selections on a flag known when it runs: a `Select` whose condition is
//! a boolean scalar input (amp's overflow flag, under which a loss-scaled step's update
//! runs: see `conditional_assign`) picks one of its operands for the whole result, so
//! the loop runs without it, and without the work only the other operand needed.
//!
//! ```
//! use spore_core::prims::fused::{FusedInstr, FusedProgram};
//! use spore_core::op::Op;
//! use spore_core::{apply::apply, DType, Tensor};
//! // flag ? w - m * lr : w, an update applied only where the flag holds
//! let p = FusedProgram {
//!     num_inputs: 4,
//!     instrs: vec![
//!         FusedInstr::MulAdd { a: 0, b: 1, c: 2, subtract: true },
//!         FusedInstr::Select(3, 4, 2),
//!     ],
//!     compute: DType::F32,
//!     out_dtype: DType::F32,
//! };
//! let m = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
//! let (lr, w) = (Tensor::scalar(0.5f32), Tensor::from_vec(vec![10.0f32, 20.0], &[2]).unwrap());
//! let run = |flag: bool| {
//!     let flag = Tensor::scalar(flag);
//!     let y = apply(Op::Fused(p.clone()), &[&m, &lr, &w, &flag], std::panic::Location::caller());
//!     y.unwrap().to_vec::<f32>().unwrap()
//! };
//! assert_eq!(run(true), vec![9.5, 19.0]); // runs as `w - m * lr` alone
//! assert_eq!(run(false), vec![10.0, 20.0]);
//! ```
//!
//! Why: the selection itself costs a pass over each chunk, and the instruction before
//! it can no longer write straight into the result (an optimizer's `w - lr * m` is
//! written over `w` by a kernel that reads `w` from the result: see `LastRead`); the
//! selected loop is the loop without the flag. Only a selection whose result is computed
//! by the loop is resolved so: where the flag picks an input (a dropped update keeps its
//! old value), the loop runs as it is.

use smallvec::SmallVec;

use crate::op::program::{FusedInstr, FusedProgram};
use crate::tensor::Tensor;
use spore_kernels::DType;

impl FusedProgram {
    /// The program with every `Select` on a boolean scalar input resolved to the operand
    /// its value picks and the instructions left unread dropped, when the result is then
    /// an instruction's (`None` when nothing changes that way).
    pub(crate) fn with_flags_resolved(&self, inputs: &[&Tensor]) -> Option<FusedProgram> {
        let flag = |r: usize| -> Option<bool> {
            let t = inputs.get(r)?;
            (t.dtype() == DType::Bool && t.numel() == 1 && !t.is_symbolic())
                .then(|| t.item().ok().map(|v| v != 0.0))
                .flatten()
        };
        let n = self.num_inputs;
        let on_flag =
            |i: &FusedInstr| matches!(*i, FusedInstr::Select(c, ..) if c < n && flag(c).is_some());
        // Most loops have no flag: they pay this scan, nothing more.
        if !self.instrs.iter().any(on_flag) {
            return None;
        }
        // Register each register stands for once the selections are resolved.
        let mut alias: SmallVec<[usize; 16]> = (0..n + self.instrs.len()).collect();
        let mut resolved = false;
        for (k, ins) in self.instrs.iter().enumerate() {
            if let FusedInstr::Select(c, a, b) = ins.renumbered(|r| alias[r])
                && c < n
                && let Some(value) = flag(c)
            {
                alias[n + k] = if value { a } else { b };
                resolved = true;
            }
        }
        let result = alias[n + self.instrs.len() - 1];
        if !resolved || result < n {
            return None;
        }
        // The instructions the result reads, directly or not (resolved ones read nothing).
        let mut needed: SmallVec<[bool; 16]> = SmallVec::from_elem(false, n + self.instrs.len());
        needed[result] = true;
        for k in (0..self.instrs.len()).rev() {
            if needed[n + k] && alias[n + k] == n + k {
                for r in self.instrs[k].renumbered(|r| alias[r]).operands() {
                    needed[r] = true;
                }
            }
        }
        // Kept instructions in order, renumbered; the result's is last (it is needed, and
        // no needed instruction reads a later one).
        let mut new_index: SmallVec<[usize; 16]> = (0..n).collect();
        new_index.resize(n + self.instrs.len(), usize::MAX);
        let mut instrs: SmallVec<[FusedInstr; 8]> = SmallVec::new();
        for (k, ins) in self.instrs.iter().enumerate() {
            if needed[n + k] && alias[n + k] == n + k {
                instrs.push(ins.renumbered(|r| new_index[alias[r]]));
                new_index[n + k] = n + instrs.len() - 1;
            }
        }
        Some(FusedProgram {
            instrs: instrs.into_vec(),
            ..self.clone()
        })
    }
}
