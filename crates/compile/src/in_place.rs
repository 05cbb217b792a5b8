//! The executor's side of in-place execution (see `spore_core::prims::in_place`): which
//! argument of a node is lent to its op, and parameters whose buffer their own update
//! overwrites (an optimizer's `m' = 0.9 m + g` and `w' = w - lr m'` written over `m`
//! and `w`, as MindSpore's and PyTorch's optimizers do).
//!
//! ```
//! use spore_compile::executor::Executable;
//! use spore_compile::pass::{default_passes, run_passes};
//! use spore_core::{trace::trace, DType, Parameter, Tensor, TensorType};
//! let w = Parameter::new(Tensor::ones(&[4096], DType::F32).unwrap(), "w");
//! let x = TensorType::new(&[4096], DType::F32);
//! let mut step = trace("step", &[x], |x| {
//!     w.assign(&w.value().sub(&x[0].mul_scalar(0.5)?)?)?; // w - 0.5 x: one fused op
//!     Ok(vec![])
//! }).unwrap();
//! run_passes(&mut step, &default_passes(), None).unwrap();
//! let mut exe = Executable::new(step).unwrap();
//! let x = Tensor::ones(&[4096], DType::F32).unwrap();
//! exe.run(&[x.clone()]).unwrap();
//! exe.run(&[x]).unwrap();
//! assert_eq!(w.value().to_vec::<f32>().unwrap()[0], 0.0);
//! assert_eq!(exe.in_place_updates(), 2); // w's buffer took both new values
//! ```
//!
//! Why parameters need more than a dying value: the parameter itself holds its value, so
//! the executor stores a stand-in in it while the op runs, and restores the value if the
//! op cannot take the buffer (the user kept a handle on it) or fails before writing.
//! Another thread that reads the parameter while that op runs sees the stand-in, an
//! empty tensor: as with any optimizer step, read parameters between steps.

use spore_core::ir::{Graph, NodeKind, ValueId};
use spore_core::op::Op;
use spore_core::prims::in_place::{EvalContext, accepts_lent_buffer};
use spore_core::{Tensor, TensorType};
use spore_kernels::arena;

use crate::plan::MemoryPlan;

/// What a node's op was lent.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lent {
    /// An intermediate value's buffer.
    Value,
    /// Parameter `k`'s buffer: the op computes that parameter's new value.
    Parameter(usize),
}

/// What [`lend_dying_argument`] reads: the graph, its plan, the value slots, and the
/// stand-in that a parameter holds while its buffer is lent.
pub(crate) struct Lending<'a> {
    pub graph: &'a Graph,
    pub plan: &'a MemoryPlan,
    pub slots: &'a mut [Vec<Tensor>],
    pub stand_in: &'a Tensor,
}

impl Lending<'_> {
    /// Offers node `i`'s op (producing `out`) the buffer of an argument that dies at `i`
    /// and that it reads once, when the op will write its result there and nobody else
    /// holds that value: the buffer goes into `ctx`, which the op gets. Returns what was
    /// lent.
    pub(crate) fn lend_dying_argument(
        &mut self,
        i: usize,
        op: &Op,
        out: &TensorType,
        args: &[ValueId],
        ctx: &mut EvalContext,
    ) -> Option<Lent> {
        for (r, &a) in args.iter().enumerate() {
            let dying = self.plan.free_after[i].contains(&a)
                && args.iter().filter(|&&b| b == a).count() == 1
                && !self.slots[a].is_empty();
            if !dying
                || !crate::args::with_args(self.slots, args, |refs| {
                    accepts_lent_buffer(op, refs, out, r)
                })
            {
                continue;
            }
            let donor = match self.graph.nodes[a].kind {
                NodeKind::Parameter(k) if self.plan.donates[i] == Some(k) => Some(k),
                _ => None,
            };
            if let Some(k) = donor {
                // The parameter lets go of its value; the slot may now hold it alone.
                drop(self.graph.params[k].swap_stored(self.stand_in.clone()));
            }
            if ctx.lend(r, &mut self.slots[a][0]) {
                return Some(donor.map_or(Lent::Value, Lent::Parameter));
            }
            if let Some(k) = donor {
                // Someone else holds it: the parameter keeps its value, written elsewhere.
                drop(self.graph.params[k].swap_stored(self.slots[a][0].clone()));
            }
        }
        None
    }
}

/// After node `i`'s op failed: the buffer it was lent and did not take goes back to its
/// owner, values intact (a parameter gets its value back; an intermediate's buffer goes
/// to the pool).
pub(crate) fn reclaim(lent: Lent, graph: &Graph, i: usize, ctx: &mut EvalContext) {
    let Some(buffer) = ctx.reclaim() else {
        return;
    };
    match lent {
        Lent::Value => arena::recycle(buffer),
        Lent::Parameter(k) => {
            let NodeKind::Op { args, .. } = &graph.nodes[i].kind else {
                return;
            };
            let param_node = args
                .iter()
                .find(|&&a| matches!(graph.nodes[a].kind, NodeKind::Parameter(p) if p == k));
            if let Some(&a) = param_node
                && let Ok(value) = Tensor::from_buffer(buffer, &graph.nodes[a].ty().shape)
            {
                graph.params[k].store(value);
            }
        }
    }
}
