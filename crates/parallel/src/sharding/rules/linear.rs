//! Products and convolutions: the ops whose contracted dimension can be split, leaving
//! summands on each rank.
//!
//! ```
//! use spore_core::op::Op;
//! use spore_core::{DType, TensorType};
//! use spore_parallel::sharding::{plan_op, Layout, Strategy};
//! let x = TensorType::new(&[8, 16], DType::F32);
//! let w = TensorType::new(&[16, 32], DType::F32);
//! let out = TensorType::new(&[8, 32], DType::F32);
//! let whole = Layout::replicated(4, 2);
//! // Data parallel x model parallel: rows 2 ways, columns 2 ways.
//! let s: Strategy = "((2, 1), (1, 2))".parse().unwrap();
//! let p = plan_op(&Op::MatMul, &[&x, &w], &out, &[whole.clone(), whole], Some(&s), 4).unwrap();
//! assert_eq!(p.out.to_string(), "dev[2,1,2] (S0, S2)");
//! assert_eq!(p.marks, [vec![2], vec![0]]);
//! ```

use super::{RuleInput, current_on, device_matrix, leading_dev};
use crate::sharding::layout::Layout;
use crate::sharding::strategy::Strategy;

/// MatMul `[..., M, K] x [..., K, N]`: device axes for the batch dimensions, then M, K, N.
pub(super) fn matmul_with_strategy(
    i: &RuleInput,
    s: &Strategy,
) -> Result<(Vec<Layout>, Layout), String> {
    let (a, b) = (i.args[0], i.args[1]);
    let (ra, rb, ro) = (a.shape.len(), b.shape.len(), i.out.shape.len());
    if ra < 2 || rb < 2 {
        return Err(format!(
            "MatMul: strategies apply to products of matrices; got shapes {:?} and {:?}",
            a.shape, b.shape
        ));
    }
    let (sa, sb) = (&s.inputs[0], &s.inputs[1]);
    if sa[ra - 1] != sb[rb - 2] {
        return Err(format!(
            "MatMul: strategy {s} splits the contracted dimension {} ways in the left input and {} in the right; they must agree",
            sa[ra - 1],
            sb[rb - 2]
        ));
    }
    let nb = ro - 2;
    let mut batch = vec![1; nb];
    for (t, st) in [(a, sa), (b, sb)] {
        let offset = nb - (t.shape.len() - 2);
        for (j, &f) in st.iter().enumerate().take(t.shape.len() - 2) {
            let d = offset + j;
            if t.shape[j] != i.out.shape[d] && f != 1 {
                return Err(format!(
                    "MatMul: strategy {s} splits a broadcast batch dimension (shape {:?})",
                    t.shape
                ));
            }
            if t.shape[j] == i.out.shape[d] && f != 1 {
                if batch[d] != 1 && batch[d] != f {
                    return Err(format!(
                        "MatMul: strategy {s} splits batch dimension {d} in two ways"
                    ));
                }
                batch[d] = f;
            }
        }
    }
    let mut factors = batch;
    factors.extend([sa[ra - 2], sa[ra - 1], sb[rb - 1]]);
    let (dev, first) = device_matrix("MatMul", &factors, i.devices)?;
    let axis = |d: usize| Some(first + d);
    let (m, k, n) = (axis(nb), axis(nb + 1), axis(nb + 2));
    let side = |t: &spore_core::TensorType, last2: [Option<usize>; 2]| {
        let offset = nb - (t.shape.len() - 2);
        let mut map: Vec<Option<usize>> = (0..t.shape.len() - 2)
            .map(|j| (t.shape[j] == i.out.shape[offset + j]).then_some(first + offset + j))
            .collect();
        map.extend(last2);
        Layout {
            dev: dev.clone(),
            map,
            partial: vec![],
        }
    };
    let mut out_map: Vec<Option<usize>> = (0..nb).map(axis).collect();
    out_map.extend([m, n]);
    let out = Layout {
        dev: dev.clone(),
        map: out_map,
        partial: k.into_iter().collect(),
    };
    Ok((vec![side(a, [m, k]), side(b, [k, n])], out))
}

/// MatMul without a strategy: the left input's rows (and batch) blocks, the right
/// input's column blocks where they use another device axis, the contraction split
/// only where the left input already splits it.
pub(super) fn matmul_following(i: &RuleInput) -> Option<(Vec<Layout>, Layout)> {
    let (a, b) = (i.args[0], i.args[1]);
    let (ra, rb, ro) = (a.shape.len(), b.shape.len(), i.out.shape.len());
    if ra < 2 || rb < 2 {
        return None;
    }
    let dev = leading_dev(i);
    let la = current_on(i, 0, &dev);
    let lb = current_on(i, 1, &dev);
    let nb = ro - 2;
    let k = la.map[ra - 1];
    // Batch axes come from whichever input has the dimension at full size.
    let mut batch = vec![None; nb];
    for (t, l) in [(a, &la), (b, &lb)] {
        let offset = nb - (t.shape.len() - 2);
        for j in 0..t.shape.len() - 2 {
            if t.shape[j] == i.out.shape[offset + j] && batch[offset + j].is_none() {
                batch[offset + j] = l.map[j];
            }
        }
    }
    let m = la.map[ra - 2];
    let taken: Vec<usize> = batch.iter().chain([&m, &k]).flatten().copied().collect();
    let n = lb.map[rb - 1].filter(|ax| !taken.contains(ax));
    let side = |t: &spore_core::TensorType, last2: [Option<usize>; 2]| {
        let offset = nb - (t.shape.len() - 2);
        let mut map: Vec<Option<usize>> = (0..t.shape.len() - 2)
            .map(|j| {
                if t.shape[j] == i.out.shape[offset + j] {
                    batch[offset + j]
                } else {
                    None
                }
            })
            .collect();
        map.extend(last2);
        Layout::new(dev.clone(), map, vec![])
    };
    let mut out_map = batch.clone();
    out_map.extend([m, n]);
    let out = Layout::new(dev.clone(), out_map, k.into_iter().collect()).ok()?;
    Some((vec![side(a, [m, k]).ok()?, side(b, [k, n]).ok()?], out))
}

/// Conv2D `x [N, C, H, W]`, `w [O, C/g, kh, kw]`, strategy `((n, c, 1, 1), (o, c, 1, 1))`:
/// batch, input channels (summands) and output channels.
pub(super) fn conv_with_strategy(
    i: &RuleInput,
    s: &Strategy,
) -> Result<(Vec<Layout>, Layout), String> {
    let (sx, sw) = (&s.inputs[0], &s.inputs[1]);
    if sx[2] != 1 || sx[3] != 1 || sw[2] != 1 || sw[3] != 1 {
        return Err(format!(
            "Conv2D: strategy {s} splits the image or the kernel; Spore splits convolutions by batch and channels only"
        ));
    }
    if sx[1] != sw[1] {
        return Err(format!(
            "Conv2D: strategy {s} splits the input channels {} ways in the image and {} in the weight; they must agree",
            sx[1], sw[1]
        ));
    }
    let groups = match i.op {
        spore_core::op::Op::Conv2d(a) => a.groups,
        _ => 1,
    };
    if groups != 1 && (sx[1] != 1 || sw[0] != 1) {
        return Err(format!(
            "Conv2D: strategy {s} splits channels of a grouped convolution ({groups} groups); only the batch can be split"
        ));
    }
    let (dev, first) = device_matrix("Conv2D", &[sx[0], sx[1], sw[0]], i.devices)?;
    let (n, c, o) = (Some(first), Some(first + 1), Some(first + 2));
    let layout = |map: Vec<Option<usize>>, partial: Vec<usize>| Layout {
        dev: dev.clone(),
        map,
        partial,
    };
    Ok((
        vec![
            layout(vec![n, c, None, None], vec![]),
            layout(vec![o, c, None, None], vec![]),
        ],
        layout(vec![n, o, None, None], c.into_iter().collect()),
    ))
}

/// Conv2D without a strategy: the image's batch blocks and the weight's output-channel
/// blocks (ungrouped only).
pub(super) fn conv_following(i: &RuleInput, groups: usize) -> Option<(Vec<Layout>, Layout)> {
    if i.args.len() != 2 {
        return None;
    }
    let dev = leading_dev(i);
    let n = current_on(i, 0, &dev).map[0];
    let o = current_on(i, 1, &dev).map[0].filter(|a| groups == 1 && Some(*a) != n);
    let x = Layout::new(dev.clone(), vec![n, None, None, None], vec![]).ok()?;
    let w = Layout::new(dev.clone(), vec![o, None, None, None], vec![]).ok()?;
    let out = Layout::new(dev, vec![n, o, None, None], vec![]).ok()?;
    Some((vec![x, w], out))
}
