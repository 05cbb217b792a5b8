//! The candidate strategies of a product or a convolution.

use spore_core::ir::Graph;
use spore_core::op::Op;

use crate::sharding::strategy::Strategy;

/// The strategies a MatMul, Conv2D or Gather can take on `devices` ranks: every split of
/// its dimensions using all of them (or as many as the shapes allow).
pub fn candidates(g: &Graph, id: usize, devices: usize) -> Vec<Strategy> {
    let node = &g.nodes[id];
    let Some(op) = node.op() else {
        return vec![];
    };
    let args: Vec<&[usize]> = node
        .args()
        .iter()
        .map(|&a| &g.nodes[a].ty().shape[..])
        .collect();
    let out = &node.ty().shape;
    match op {
        Op::MatMul if args.len() == 2 && args[0].len() >= 2 && args[1].len() >= 2 => {
            let (a, b) = (args[0], args[1]);
            let (ra, rb, ro) = (a.len(), b.len(), out.len());
            // The first batch dimension (when the left input has it whole), M, K, N.
            // (Only where the left input has it at full size, not broadcast.)
            let batch = ro > 2 && ra == ro && a[0] == out[0];
            let sizes: Vec<usize> = if batch {
                vec![out[0], a[ra - 2], a[ra - 1], b[rb - 1]]
            } else {
                vec![a[ra - 2], a[ra - 1], b[rb - 1]]
            };
            splits(&sizes, devices)
                .into_iter()
                .filter_map(|f| {
                    let (fb, m, k, n) = if batch {
                        (f[0], f[1], f[2], f[3])
                    } else {
                        (1, f[0], f[1], f[2])
                    };
                    let mut sa = vec![1; ra];
                    let mut sb = vec![1; rb];
                    sa[ra - 2] = m;
                    sa[ra - 1] = k;
                    sb[rb - 2] = k;
                    sb[rb - 1] = n;
                    if batch {
                        sa[0] = fb;
                        // A right input without the dimension (or broadcast along it)
                        // is read whole by every batch block.
                        if rb == ro && b[0] == out[0] {
                            sb[0] = fb;
                        }
                    }
                    Strategy::new(vec![sa, sb]).ok()
                })
                .collect()
        }
        Op::Conv2d(attrs) if args.len() == 2 && args[0].len() == 4 => {
            let (x, w) = (args[0], args[1]);
            let sizes = if attrs.groups == 1 {
                vec![x[0], x[1], w[0]]
            } else {
                vec![x[0], 1, 1]
            };
            splits(&sizes, devices)
                .into_iter()
                .filter_map(|f| {
                    Strategy::new(vec![vec![f[0], f[1], 1, 1], vec![f[2], f[1], 1, 1]]).ok()
                })
                .collect()
        }
        // A lookup: the table's rows (a vocabulary split) and the ids' first dimension.
        Op::Gather { axis: 0 } if args.len() == 2 && !args[0].is_empty() && !args[1].is_empty() => {
            let (table, ids) = (args[0], args[1]);
            splits(&[table[0], ids[0]], devices)
                .into_iter()
                .filter_map(|f| {
                    let mut st = vec![1; table.len()];
                    let mut si = vec![1; ids.len()];
                    st[0] = f[0];
                    si[0] = f[1];
                    Strategy::new(vec![st, si]).ok()
                })
                .collect()
        }
        _ => vec![],
    }
}

/// Factor tuples, one per size, each dividing its size, whose product divides
/// `devices`; only those with the largest product reached.
fn splits(sizes: &[usize], devices: usize) -> Vec<Vec<usize>> {
    let mut all: Vec<Vec<usize>> = vec![vec![]];
    for &s in sizes {
        let mut next = vec![];
        for t in &all {
            let used: usize = t.iter().product();
            for f in (1..=devices / used).filter(|f| (devices / used).is_multiple_of(*f)) {
                if s.is_multiple_of(f) {
                    let mut u = t.clone();
                    u.push(f);
                    next.push(u);
                }
            }
        }
        all = next;
    }
    let most = all
        .iter()
        .map(|t| t.iter().product::<usize>())
        .max()
        .unwrap_or(1);
    all.retain(|t| t.iter().product::<usize>() == most);
    all
}
