//! Ops that move, reduce or index dimensions: each keeps its input's blocks on the
//! dimensions it carries over and needs whole the dimensions it reads across.
//!
//! ```
//! use spore_core::op::Op;
//! use spore_core::{DType, TensorType};
//! use spore_parallel::sharding::{plan_op, Layout};
//! // Flatten keeps the batch split: [8, 1, 28, 28] -> [8, 784].
//! let x = TensorType::new(&[8, 1, 28, 28], DType::F32);
//! let y = TensorType::new(&[8, 784], DType::F32);
//! let rows = Layout::new(vec![4], vec![Some(0), None, None, None], vec![]).unwrap();
//! let p = plan_op(&Op::Reshape(vec![8, 784]), &[&x], &y, &[rows], None, 4).unwrap();
//! assert_eq!(p.out.to_string(), "dev[4] (S0, R)");
//! ```

use spore_kernels::ReduceFn;

use super::{RuleInput, current_on, device_matrix, following, leading_dev};
use crate::sharding::layout::Layout;
use crate::sharding::strategy::Strategy;

fn input(i: &RuleInput) -> Layout {
    current_on(i, 0, &leading_dev(i))
}

fn with_map(l: &Layout, map: Vec<Option<usize>>, partial: Vec<usize>) -> Layout {
    Layout {
        dev: l.dev.clone(),
        map,
        partial,
    }
}

/// A strategy that names the first input's blocks; the output follows from them.
pub(super) fn first_input_strategy(
    i: &RuleInput,
    s: &Strategy,
) -> Result<(Vec<Layout>, Layout), String> {
    let name = i.op.name();
    if i.args.len() != 1 {
        return Err(format!("{name}: expected one input, got {}", i.args.len()));
    }
    let factors = &s.inputs[0];
    let pooling = matches!(
        i.op,
        spore_core::op::Op::MaxPool2d(_) | spore_core::op::Op::AvgPool2d(_)
    );
    if pooling && factors[2..].iter().any(|&f| f != 1) {
        return Err(format!(
            "{name}: strategy {s} splits the image; pooling can be split by batch and channels only"
        ));
    }
    let (dev, first) = device_matrix(&name, factors, i.devices)?;
    let given = Layout {
        dev,
        map: (0..factors.len()).map(|d| Some(first + d)).collect(),
        partial: vec![],
    };
    let current = [given.clone()];
    let (args, out) = following(&RuleInput {
        current: &current,
        ..*i
    });
    if !args[0].equivalent(&given, &i.args[0].shape) {
        return Err(format!(
            "{name}: strategy {s} splits a dimension the op reads across (it needs {} instead)",
            args[0]
        ));
    }
    Ok((args, out))
}

pub(super) fn pool_following(i: &RuleInput) -> Option<(Vec<Layout>, Layout)> {
    let l = input(i);
    if l.map.len() != 4 {
        return None;
    }
    let l = with_map(&l, vec![l.map[0], l.map[1], None, None], vec![]);
    Some((vec![l.clone()], l))
}

pub(super) fn reduce(
    i: &RuleInput,
    kind: ReduceFn,
    axes: &[usize],
    keep_dims: bool,
) -> (Vec<Layout>, Layout) {
    let mut l = input(i);
    // Only sums of floats leave summands a later AllReduce can add.
    let sums = kind == ReduceFn::Sum && i.args[0].dtype.is_float();
    if !sums {
        for &d in axes {
            l.map[d] = None;
        }
    }
    let mut map = vec![];
    let mut partial = vec![];
    for (d, m) in l.map.iter().enumerate() {
        if axes.contains(&d) {
            if keep_dims {
                map.push(None);
            }
            if let Some(a) = m.filter(|&a| l.dev[a] > 1) {
                partial.push(a);
            }
        } else {
            map.push(*m);
        }
    }
    partial.sort_unstable();
    let out = with_map(&l, map, partial);
    (vec![l], out)
}

pub(super) fn arg_reduce(i: &RuleInput, axis: usize, keep_dims: bool) -> (Vec<Layout>, Layout) {
    let mut l = input(i);
    l.map[axis] = None;
    let mut map = l.map.clone();
    if !keep_dims {
        map.remove(axis);
    }
    let out = with_map(&l, map, vec![]);
    (vec![l], out)
}

pub(super) fn transpose(i: &RuleInput, perm: &[usize]) -> (Vec<Layout>, Layout) {
    let l = input(i);
    let out = with_map(&l, perm.iter().map(|&p| l.map[p]).collect(), vec![]);
    (vec![l], out)
}

/// A block split of input dimension `d` carries over to the output dimension that
/// starts at the same flat position, when that dimension divides into as many blocks:
/// then both cut the row-major order at the same places.
pub(super) fn reshape(i: &RuleInput) -> (Vec<Layout>, Layout) {
    let mut l = input(i);
    let (a, o) = (&i.args[0].shape, &i.out.shape);
    let mut map = vec![None; o.len()];
    for d in 0..a.len() {
        let f = l.factor(d);
        if f == 1 {
            continue;
        }
        let prefix: usize = a[..d].iter().product();
        let target = (0..o.len())
            .find(|&e| o[..e].iter().product::<usize>() == prefix && o[e] > 1 && o[e] % f == 0);
        match target {
            Some(e) if a[d] % f == 0 => map[e] = l.map[d],
            _ => l.map[d] = None,
        }
    }
    let out = with_map(&l, map, vec![]);
    (vec![l], out)
}

pub(super) fn broadcast_to(i: &RuleInput) -> (Vec<Layout>, Layout) {
    let mut l = input(i);
    let (t, o) = (&i.args[0].shape, &i.out.shape);
    let offset = o.len() - t.len();
    for j in 0..t.len() {
        if t[j] != o[offset + j] {
            l.map[j] = None;
        }
    }
    let mut map = vec![None; offset];
    map.extend(l.map.iter().copied());
    let out = with_map(&l, map, vec![]);
    (vec![l], out)
}

pub(super) fn one_hot(i: &RuleInput) -> (Vec<Layout>, Layout) {
    let l = input(i);
    let mut map = l.map.clone();
    map.push(None);
    let out = with_map(&l, map, vec![]);
    (vec![l], out)
}

/// Gather with a strategy `((table factors), (index factors))`: the indices' blocks and
/// the table's other dimensions carry into the output. Rows of the table split over
/// ranks (a vocabulary-parallel embedding, axis 0 only) make each rank look up only
/// the ids in its rows, zeros elsewhere: the output is then partial sums.
pub(super) fn gather_with_strategy(
    i: &RuleInput,
    s: &Strategy,
    axis: usize,
) -> Result<(Vec<Layout>, Layout), String> {
    let (st, si) = (&s.inputs[0], &s.inputs[1]);
    if axis != 0 && st[axis] != 1 {
        return Err(format!(
            "Gather: strategy {s} splits the gathered axis {axis}; Spore splits the rows of axis 0 only"
        ));
    }
    let mut factors = st.clone();
    factors.extend(si.iter().copied());
    let (dev, first) = device_matrix("Gather", &factors, i.devices)?;
    let rt = st.len();
    let table_map: Vec<Option<usize>> = (0..rt).map(|d| Some(first + d)).collect();
    let index_map: Vec<Option<usize>> = (0..si.len()).map(|j| Some(first + rt + j)).collect();
    let mut out = table_map[..axis].to_vec();
    out.extend(index_map.iter().copied());
    out.extend(table_map[axis + 1..].iter().copied());
    let partial = if st[axis] > 1 {
        vec![first + axis]
    } else {
        vec![]
    };
    let layout = |map: Vec<Option<usize>>, partial: Vec<usize>| Layout {
        dev: dev.clone(),
        map,
        partial,
    };
    Ok((
        vec![layout(table_map, vec![]), layout(index_map, vec![])],
        layout(out, partial),
    ))
}

/// Gather rows of a table: the table whole along the gathered axis, the indices' blocks
/// carried into the output.
pub(super) fn gather(i: &RuleInput, axis: usize) -> Option<(Vec<Layout>, Layout)> {
    let dev = leading_dev(i);
    let mut table = current_on(i, 0, &dev);
    table.map[axis] = None;
    let idx = current_on(i, 1, &dev);
    let mut map = table.map[..axis].to_vec();
    map.extend(idx.map.iter().copied());
    map.extend(table.map[axis + 1..].iter().copied());
    let out = Layout::new(dev, map, vec![]).ok()?;
    Some((vec![table, idx], out))
}

pub(super) fn concat(i: &RuleInput, axis: usize) -> (Vec<Layout>, Layout) {
    let mut l = input(i);
    l.map[axis] = None;
    (vec![l.clone(); i.args.len()], l)
}

pub(super) fn strided_slice(
    i: &RuleInput,
    begin: &[usize],
    step: &[isize],
    len: &[usize],
) -> (Vec<Layout>, Layout) {
    let mut l = input(i);
    let shape = &i.args[0].shape;
    for d in 0..shape.len() {
        if !(begin[d] == 0 && step[d] == 1 && len[d] == shape[d]) {
            l.map[d] = None;
        }
    }
    (vec![l.clone()], l)
}

pub(super) fn pad(i: &RuleInput, pads: &[(usize, usize)]) -> (Vec<Layout>, Layout) {
    let mut l = input(i);
    for (d, p) in pads.iter().enumerate() {
        if *p != (0, 0) {
            l.map[d] = None;
        }
    }
    (vec![l.clone()], l)
}

#[cfg(test)]
mod tests {
    use spore_core::op::{Op, PoolAttrs};
    use spore_core::{DType, TensorType};
    use spore_kernels::ReduceFn;

    use crate::sharding::{Layout, Strategy, plan_op};

    fn plan(op: &Op, x: &[usize], out: &[usize], strategy: &str) -> Result<String, String> {
        let (x, out) = (
            TensorType::new(x, DType::F32),
            TensorType::new(out, DType::F32),
        );
        let s: Strategy = strategy
            .parse()
            .map_err(|e: spore_core::Error| e.to_string())?;
        let whole = Layout::replicated(4, x.shape.len());
        plan_op(op, &[&x], &out, &[whole], Some(&s), 4).map(|p| p.out.to_string())
    }

    #[test]
    fn first_input_strategies_split_what_the_op_carries_over() {
        let pool = Op::MaxPool2d(PoolAttrs {
            kernel: [2, 2],
            stride: [2, 2],
            pads: [0; 4],
            count_include_pad: false,
            ceil_mode: false,
        });
        let (x, y) = ([8, 4, 6, 6], [8, 4, 3, 3]);
        assert_eq!(
            plan(&pool, &x, &y, "((4, 1, 1, 1))").unwrap(),
            "dev[4,1,1,1] (S0, R, R, R)"
        );
        assert_eq!(
            plan(&pool, &x, &y, "((2, 2, 1, 1))").unwrap(),
            "dev[2,2,1,1] (S0, S1, R, R)"
        );
        // Using one rank of four: every rank pools the whole batch.
        assert_eq!(
            plan(&pool, &x, &y, "((1, 1, 1, 1))").unwrap(),
            "dev[4] (R, R, R, R)"
        );
        let e = plan(&pool, &x, &y, "((1, 1, 2, 2))").unwrap_err();
        assert!(e.contains("splits the image"), "{e}");
        let max = Op::Reduce {
            kind: ReduceFn::Max,
            axes: vec![1],
            keep_dims: false,
        };
        assert_eq!(
            plan(&max, &[8, 6], &[8], "((4, 1))").unwrap(),
            "dev[4,1] (S0)"
        );
        let e = plan(&max, &[8, 6], &[8], "((1, 2))").unwrap_err();
        assert!(e.contains("reads across"), "{e}");
        let sum = Op::Reduce {
            kind: ReduceFn::Sum,
            axes: vec![1],
            keep_dims: false,
        };
        assert_eq!(
            plan(&sum, &[8, 6], &[8], "((2, 2))").unwrap(),
            "dev[2,2] (S0) partial[1]"
        );
    }
}
