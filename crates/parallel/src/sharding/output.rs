//! MindSpore's `out_strategy`: the layout an operator leaves its output in, reached from
//! the layout its inputs produce (with partial sums where they split the contraction).
//!
//! ```
//! use spore_parallel::sharding::{Layout, output_layout};
//! // A product whose contraction is split 4 ways: whole rows and columns, partial sums
//! // over device axis 1.
//! let produced = Layout::new(vec![1, 4, 1], vec![Some(0), Some(2)], vec![1]).unwrap();
//! // `((4, 1),)`: the sums are reduce-scattered by rows.
//! let out = output_layout(&produced, &[4, 1], &[64, 32]).unwrap();
//! assert_eq!(out.to_string(), "dev[1,4,1] (S1, R)");
//! ```

use super::layout::Layout;

/// The layout `factors` asks for: each dimension either keeps the split the inputs give
/// it, or, where the inputs leave it whole, takes a device axis that holds partial sums
/// and has that many devices. Partial sums no dimension takes are added whole.
pub fn output_layout(
    produced: &Layout,
    factors: &[usize],
    shape: &[usize],
) -> Result<Layout, String> {
    if factors.len() != produced.map.len() {
        return Err(format!(
            "out_strategy has {} factors, but the output has {} dimensions",
            factors.len(),
            produced.map.len()
        ));
    }
    let mut free: Vec<usize> = produced
        .partial
        .iter()
        .copied()
        .filter(|&a| produced.dev[a] > 1)
        .collect();
    let mut map = produced.map.clone();
    for (d, &f) in factors.iter().enumerate() {
        let have = produced.factor(d);
        if f == have {
            continue;
        }
        let taken = (have == 1)
            .then(|| free.iter().position(|&a| produced.dev[a] == f))
            .flatten();
        match taken {
            Some(i) => map[d] = Some(free.remove(i)),
            None => {
                return Err(format!(
                    "out_strategy splits output dimension {d} {f} ways, but the input strategy makes it {have} \
                     way(s) and leaves partial sums over {:?} devices; a dimension can keep its split or take \
                     the devices of one partial sum",
                    produced
                        .partial
                        .iter()
                        .map(|&a| produced.dev[a])
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
    let out = Layout::new(produced.dev.clone(), map, vec![])?;
    out.local_shape(shape)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_keeps_its_splits_or_takes_a_partial_axis() {
        // Rows split 2 ways by the inputs, partial sums over 2 devices.
        let produced = Layout::new(vec![2, 2, 1], vec![Some(0), Some(2)], vec![1]).unwrap();
        let cols = output_layout(&produced, &[2, 2], &[8, 8]).unwrap();
        assert_eq!(cols.to_string(), "dev[2,2,1] (S0, S1)");
        // The same as the inputs': the sums are added whole.
        let whole = output_layout(&produced, &[2, 1], &[8, 8]).unwrap();
        assert!(whole.partial.is_empty());
        // A split the inputs' rows cannot become, and no partial axis of that size.
        for bad in [[4, 1], [2, 4], [1, 1]] {
            let e = output_layout(&produced, &bad, &[8, 8]).unwrap_err();
            assert!(
                e.contains("out_strategy splits output dimension"),
                "{bad:?}: {e}"
            );
        }
        assert!(
            output_layout(&produced, &[2], &[8, 8])
                .unwrap_err()
                .contains("factors")
        );
    }
}
