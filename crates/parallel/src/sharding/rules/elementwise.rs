//! Elementwise ops with NumPy broadcasting: the output takes one layout and each input
//! the same blocks on the dimensions it shares (a broadcast dimension of size 1 is whole).
//!
//! ```
//! use spore_core::op::Op;
//! use spore_core::{DType, TensorType};
//! use spore_kernels::BinaryFn;
//! use spore_parallel::sharding::{plan_op, Layout};
//! let x = TensorType::new(&[8, 16], DType::F32);
//! let bias = TensorType::new(&[16], DType::F32);
//! let rows = Layout::new(vec![2], vec![Some(0), None], vec![]).unwrap();
//! let p = plan_op(&Op::Binary(BinaryFn::Add), &[&x, &bias], &x, &[rows, Layout::replicated(2, 1)], None, 2).unwrap();
//! // The bias is read whole by both halves of the batch: its gradient is summed over axis 0.
//! assert_eq!(p.marks, [vec![], vec![0]]);
//! ```

use spore_core::TensorType;

use super::{RuleInput, current_on, device_matrix, leading_dev};
use crate::sharding::layout::Layout;
use crate::sharding::strategy::Strategy;

/// Input `k`'s dimension aligned with output dimension `d` (right-aligned), if it has one
/// of the output's size (not broadcast).
fn aligned(arg: &TensorType, out: &TensorType, d: usize) -> Option<usize> {
    let offset = out.shape.len().checked_sub(arg.shape.len())?;
    let j = d.checked_sub(offset)?;
    (arg.shape[j] == out.shape[d]).then_some(j)
}

/// Each input's layout for an output layout `out`.
fn inputs_for(i: &RuleInput, out: &Layout) -> Vec<Layout> {
    i.args
        .iter()
        .map(|t| {
            let mut map = vec![None; t.shape.len()];
            for d in 0..i.out.shape.len() {
                if let Some(j) = aligned(t, i.out, d) {
                    map[j] = out.map[d];
                }
            }
            Layout {
                dev: out.dev.clone(),
                map,
                partial: vec![],
            }
        })
        .collect()
}

pub(super) fn following(i: &RuleInput) -> (Vec<Layout>, Layout) {
    let dev = leading_dev(i);
    // The output follows the most-split input of the output's own shape.
    let base = (0..i.args.len())
        .filter(|&k| i.args[k].shape == i.out.shape)
        .map(|k| current_on(i, k, &dev))
        .max_by_key(|l| l.split_axes().len());
    let out = match base {
        Some(l) => l,
        None => Layout {
            dev,
            map: vec![None; i.out.shape.len()],
            partial: vec![],
        },
    };
    (inputs_for(i, &out), out)
}

pub(super) fn with_strategy(i: &RuleInput, s: &Strategy) -> Result<(Vec<Layout>, Layout), String> {
    let name = i.op.name();
    let rank = i.out.shape.len();
    let mut factors = vec![1; rank];
    for (k, t) in i.args.iter().enumerate() {
        let offset = rank - t.shape.len();
        for (j, &f) in s.inputs[k].iter().enumerate() {
            let d = offset + j;
            if t.shape[j] != i.out.shape[d] {
                if f != 1 {
                    return Err(format!(
                        "{name}: input {k} is broadcast along dimension {j}, so strategy {s} cannot split it {f} ways"
                    ));
                }
                continue;
            }
            if factors[d] != 1 && factors[d] != f {
                return Err(format!(
                    "{name}: strategy {s} splits output dimension {d} both {} and {f} ways",
                    factors[d]
                ));
            }
            factors[d] = f;
        }
    }
    let (dev, first) = device_matrix(&name, &factors, i.devices)?;
    let out = Layout {
        dev,
        map: (0..rank).map(|d| Some(first + d)).collect(),
        partial: vec![],
    };
    Ok((inputs_for(i, &out), out))
}
