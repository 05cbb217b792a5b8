//! When a cell's compiled `construct` can stand in for the eager one.
//!
//! A compiled call's outputs get their gradient by re-running the function eagerly
//! (spore-compile's rematerialisation), and only when the graph has no side effects. So a
//! graph that draws random numbers (Dropout) would get a backward pass with *other* masks,
//! and one that updates state (BatchNorm in training) none at all. When a gradient may flow
//! through such a call, the cell runs eagerly instead (once-per-signature warning), which
//! keeps gradients right. A graph that updates trainable parameters is an optimizer step
//! (`TrainOneStepCell`): nobody differentiates through it, so it always runs compiled.
//!
//! ```
//! use spore_core::{DType, Tensor, value_and_grad};
//! use spore_nn::prelude::*;
//! let drop = Dropout::new(0.5).unwrap();
//! drop.set_train(true);
//! drop.set_jit(true);
//! let d = drop.clone();
//! let f = move |x: &[Tensor]| -> spore_core::Result<Vec<Tensor>> {
//!     let y = d.call1(&x[0])?;
//!     Ok(vec![y.sum(&[], false)?, y])
//! };
//! let x = Tensor::ones(&[64], DType::F32).unwrap();
//! let out = value_and_grad(f, Some(&[0]), &[], true)(&[x]).unwrap();
//! // The gradient uses the forward pass's mask.
//! assert_eq!(out.aux[0].to_vec::<f32>().unwrap(), out.input_grads[0].to_vec::<f32>().unwrap());
//! ```

use std::sync::{Arc, Weak};

use smallvec::SmallVec;
use spore_compile::{Jit, jit};
use spore_core::{Error, Result, Tensor, TensorType, is_grad_enabled, trace};

use crate::cell::{Cell, Purity};

/// The jit of `cell.construct`. It holds a weak reference: the jit lives inside the cell,
/// and a strong one would keep every compiled cell alive forever (a cycle).
pub(crate) fn compile<C: Cell + ?Sized>(cell: &Arc<C>, training: bool) -> Jit {
    let weak: Weak<C> = Arc::downgrade(cell);
    let class = cell.class_name();
    let name = format!("{class}_{}", if training { "train" } else { "eval" });
    jit(&name, move |inputs: &[Tensor]| {
        let cell = weak.upgrade().ok_or_else(|| {
            Error::invalid(format!("{class}: the cell was dropped while compiling"))
        })?;
        cell.construct(inputs)
    })
}

fn classify<C: Cell + ?Sized>(cell: &Arc<C>, types: &[TensorType]) -> Result<Purity> {
    let c = cell.clone();
    let g = trace::trace(cell.class_name(), types, move |x| c.construct(x))?;
    if g.updates.iter().any(|(i, _)| g.params[*i].requires_grad()) {
        return Ok(Purity::OptimizerStep);
    }
    if g.updates.is_empty() && g.num_keys == 0 {
        return Ok(Purity::Pure);
    }
    Ok(Purity::Stateful {
        reads_trainable: g.params.iter().any(|p| p.requires_grad()),
    })
}

/// Whether this call of a compiled cell should run eagerly to keep gradients right.
pub(crate) fn prefer_eager<C: Cell + ?Sized>(
    cell: &Arc<C>,
    training: bool,
    inputs: &[Tensor],
) -> Result<bool> {
    if !is_grad_enabled() {
        return Ok(false);
    }
    // Inline: a steady-state call allocates nothing to look its types up.
    let types: SmallVec<[TensorType; 4]> = inputs.iter().map(|t| t.tensor_type().clone()).collect();
    let cached = cell
        .base()
        .purity
        .lock()
        .map_err(|_| Error::invalid("cell purity cache poisoned"))?
        .get(&types[..])
        .and_then(|by_flag| by_flag[training as usize]);
    let purity = match cached {
        Some(p) => p,
        None => {
            let p = classify(cell, &types)?;
            if let Purity::Stateful { .. } = p {
                log::warn!(
                    "{}: its compiled graph draws random numbers or updates state, which a compiled call cannot differentiate; \
                     running it eagerly where gradients may flow (compile the whole training step instead)",
                    cell.class_name()
                );
            }
            if let Ok(mut cache) = cell.base().purity.lock() {
                cache.entry(types.to_vec()).or_default()[training as usize] = Some(p);
            }
            p
        }
    };
    Ok(match purity {
        Purity::Pure | Purity::OptimizerStep => false,
        Purity::Stateful { reads_trainable } => {
            reads_trainable || inputs.iter().any(|t| t.requires_grad())
        }
    })
}
