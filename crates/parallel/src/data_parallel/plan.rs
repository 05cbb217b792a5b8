//! Which gradients share an AllReduce: the bucket plan.
//!
//! ```ignore
//! // Three weights of 1 MB, buckets of up to 2 MB, filled from the last weight back
//! // (the order the backward pass finishes them): [[2, 1], [0]].
//! ```

use spore_core::{DType, Error, Result};

use crate::context::AllReduceFusion;

/// One weight's gradient as the plan sees it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GradientSlot {
    pub(crate) numel: usize,
    pub(crate) dtype: DType,
}

/// Buckets of weight indices. Every weight is in exactly one bucket, and a bucket's
/// weights share a dtype (their gradients travel as one flat buffer).
pub(crate) fn plan_buckets(
    slots: &[GradientSlot],
    fusion: &AllReduceFusion,
) -> Result<Vec<Vec<usize>>> {
    let n = slots.len();
    Ok(match fusion {
        AllReduceFusion::Off => (0..n).map(|i| vec![i]).collect(),
        AllReduceFusion::Auto => by_size(slots, 64.0),
        AllReduceFusion::SizeMb(mb) => by_size(slots, *mb),
        AllReduceFusion::Index(bounds) => by_index(slots, bounds)?,
    })
}

/// Why from the last weight: the backward pass finishes the last layer's gradients
/// first, so a bucket filled in that order is complete (and starts) early.
fn by_size(slots: &[GradientSlot], mb: f64) -> Vec<Vec<usize>> {
    let limit = (mb * 1024.0 * 1024.0).max(1.0);
    let mut buckets: Vec<Vec<usize>> = vec![];
    let mut bytes = 0.0;
    for i in (0..slots.len()).rev() {
        let size = (slots[i].numel * slots[i].dtype.size_in_bytes()) as f64;
        let fits = buckets
            .last()
            .is_some_and(|b| bytes + size <= limit && slots[b[0]].dtype == slots[i].dtype);
        if fits {
            bytes += size;
            if let Some(b) = buckets.last_mut() {
                b.push(i);
            }
        } else {
            bytes = size;
            buckets.push(vec![i]);
        }
    }
    buckets
}

/// MindSpore's `all_reduce_fusion_config`: `[20, 35]` splits the weights into `0..20`,
/// `20..35` and `35..`; a dtype change also starts a bucket.
fn by_index(slots: &[GradientSlot], bounds: &[usize]) -> Result<Vec<Vec<usize>>> {
    if let Some(&last) = bounds.last()
        && last > slots.len()
    {
        return Err(Error::invalid(format!(
            "all_reduce_fusion_config {bounds:?}: the index {last} is past the network's {} trainable parameters",
            slots.len()
        )));
    }
    let mut buckets: Vec<Vec<usize>> = vec![];
    for i in 0..slots.len() {
        let new = buckets.last().is_none_or(|b: &Vec<usize>| {
            bounds.contains(&i) || slots[b[0]].dtype != slots[i].dtype
        });
        if new {
            buckets.push(vec![i]);
        } else if let Some(b) = buckets.last_mut() {
            b.push(i);
        }
    }
    Ok(buckets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(numels: &[usize]) -> Vec<GradientSlot> {
        numels
            .iter()
            .map(|&numel| GradientSlot {
                numel,
                dtype: DType::F32,
            })
            .collect()
    }

    #[test]
    fn size_buckets_fill_from_the_last_weight() {
        let mb = 1 << 18; // 1 MB of f32
        let b = plan_buckets(&slots(&[mb, mb, mb]), &AllReduceFusion::SizeMb(2.0)).unwrap();
        assert_eq!(b, vec![vec![2, 1], vec![0]]);
    }

    #[test]
    fn index_buckets_follow_the_bounds_and_check_them() {
        let s = slots(&[1, 1, 1, 1]);
        let b = plan_buckets(&s, &AllReduceFusion::Index(vec![1, 3])).unwrap();
        assert_eq!(b, vec![vec![0], vec![1, 2], vec![3]]);
        let e = plan_buckets(&s, &AllReduceFusion::Index(vec![9])).unwrap_err();
        assert!(e.to_string().contains("past the network's 4"), "{e}");
    }

    #[test]
    fn every_plan_covers_each_weight_once() {
        let s = slots(&[5, 300_000, 7, 1, 1 << 20]);
        for f in [
            AllReduceFusion::Off,
            AllReduceFusion::Auto,
            AllReduceFusion::SizeMb(0.5),
            AllReduceFusion::Index(vec![2]),
        ] {
            let mut all: Vec<usize> = plan_buckets(&s, &f).unwrap().concat();
            all.sort();
            assert_eq!(all, vec![0, 1, 2, 3, 4], "{f:?}");
        }
    }
}
