//! Where a tensor's elements live across the ranks: MindSpore's device matrix and tensor
//! map, plus the device axes over which the local values are partial sums.
//!
//! ```
//! use spore_parallel::sharding::Layout;
//! // 4 ranks as a 2x2 matrix; rows split over device axis 0, columns over axis 1.
//! let l = Layout::new(vec![2, 2], vec![Some(0), Some(1)], vec![]).unwrap();
//! assert_eq!(l.local_shape(&[8, 6]).unwrap(), [4, 3]);
//! assert_eq!(l.block(&[8, 6], 3, 1), (3, 3)); // rank 3 = (1, 1): columns 3..6
//! assert_eq!(l.to_string(), "dev[2,2] (S0, S1)");
//! ```
//!
//! Rank `r`'s coordinates in the device matrix are row-major (the last axis varies
//! fastest), as in MindSpore. A tensor dimension mapped to device axis `a` is cut into
//! `dev[a]` equal blocks and the rank with coordinate `c` on `a` holds block `c`; an
//! unmapped dimension is whole on every rank. Axes listed in `partial` hold summands:
//! the tensor is the sum of the local values over that axis's ranks.

use std::fmt;

/// A tensor's placement over the ranks of a job.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The device matrix: its product is the number of ranks.
    pub dev: Vec<usize>,
    /// Per tensor dimension, the device axis that splits it.
    pub map: Vec<Option<usize>>,
    /// Device axes over which the local values are summands, in increasing order.
    pub partial: Vec<usize>,
}

impl Layout {
    /// Checks that `map` and `partial` name distinct axes of `dev`.
    pub fn new(
        dev: Vec<usize>,
        map: Vec<Option<usize>>,
        mut partial: Vec<usize>,
    ) -> Result<Layout, String> {
        if dev.is_empty()
            || dev.contains(&0)
            || dev
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .is_none()
        {
            return Err(format!(
                "a device matrix needs positive sizes whose product fits, got {dev:?}"
            ));
        }
        partial.sort_unstable();
        partial.dedup();
        let mut used = vec![false; dev.len()];
        for a in map.iter().flatten().chain(&partial) {
            if *a >= dev.len() {
                return Err(format!(
                    "device axis {a} does not exist in the device matrix {dev:?}"
                ));
            }
            if used[*a] {
                return Err(format!(
                    "device axis {a} is used twice in map {map:?} / partial {partial:?}"
                ));
            }
            used[*a] = true;
        }
        Ok(Layout { dev, map, partial })
    }

    /// Every rank holds the whole tensor of `rank` dimensions.
    pub fn replicated(devices: usize, rank: usize) -> Layout {
        Layout {
            dev: vec![devices.max(1)],
            map: vec![None; rank],
            partial: vec![],
        }
    }

    /// The number of ranks the layout spreads over.
    pub fn devices(&self) -> usize {
        self.dev.iter().product()
    }

    /// The same placement without its partial sums (what a consumer reads once they
    /// are reduced).
    pub fn without_partial(&self) -> Layout {
        Layout {
            partial: vec![],
            ..self.clone()
        }
    }

    /// The split factor of tensor dimension `d`.
    pub fn factor(&self, d: usize) -> usize {
        self.map[d].map_or(1, |a| self.dev[a])
    }

    /// Device axes of size > 1 that split some dimension.
    pub fn split_axes(&self) -> Vec<usize> {
        self.map
            .iter()
            .flatten()
            .copied()
            .filter(|&a| self.dev[a] > 1)
            .collect()
    }

    /// `rank`'s coordinates in the device matrix.
    pub fn coords(&self, rank: usize) -> Vec<usize> {
        coords(&self.dev, rank)
    }

    /// The local shape of a tensor of `global` shape; an error where a split does not
    /// divide its dimension.
    pub fn local_shape(&self, global: &[usize]) -> Result<Vec<usize>, String> {
        if global.len() != self.map.len() {
            return Err(format!(
                "layout {self} is for {} dimensions, the tensor has shape {global:?}",
                self.map.len()
            ));
        }
        global
            .iter()
            .enumerate()
            .map(|(d, &n)| {
                let f = self.factor(d);
                if n % f == 0 {
                    Ok(n / f)
                } else {
                    Err(format!(
                        "dimension {d} of shape {global:?} ({n}) cannot be split {f} ways (layout {self})"
                    ))
                }
            })
            .collect()
    }

    /// `rank`'s block of dimension `d` (size `global[d]`): (start, length).
    pub fn block(&self, global: &[usize], rank: usize, d: usize) -> (usize, usize) {
        let len = global[d] / self.factor(d);
        match self.map[d] {
            Some(a) => (digit(&self.dev, a, rank) * len, len),
            None => (0, len),
        }
    }

    /// Whether every rank holds the same elements in `self` and `other` along `d`.
    pub fn same_blocks(&self, other: &Layout, global: &[usize], d: usize) -> bool {
        let (f, g) = (self.factor(d), other.factor(d));
        if f != g {
            // Both may still hold the whole dimension (a factor of 1 either way).
            return f == 1 && g == 1;
        }
        match (self.map[d], other.map[d]) {
            _ if f == 1 || global[d] == 0 => true,
            // The same number of blocks, picked by the same digit of the rank.
            (Some(a), Some(b)) => stride(&self.dev, a) == stride(&other.dev, b),
            _ => false,
        }
    }

    /// Whether `self` and `other` put the same elements on every rank and agree on
    /// partial sums: the two describe one placement (device matrices may differ).
    pub fn equivalent(&self, other: &Layout, global: &[usize]) -> bool {
        self.devices() == other.devices()
            && self.map.len() == other.map.len()
            && (0..self.map.len()).all(|d| self.same_blocks(other, global, d))
            && self.same_partial_groups(other)
    }

    /// Whether the ranks that sum together are the same groups in both layouts: each
    /// group is a rank with its partial axes' digits varied, so two layouts agree when
    /// zeroing one's digits never separates what the other's groups join.
    fn same_partial_groups(&self, other: &Layout) -> bool {
        let zero = |l: &Layout, r: usize| {
            l.partial
                .iter()
                .fold(r, |r, &a| r - digit(&l.dev, a, r) * stride(&l.dev, a))
        };
        let real = |l: &Layout| l.partial.iter().any(|&a| l.dev[a] > 1);
        match (real(self), real(other)) {
            (false, false) => true,
            (true, true) => (0..self.devices()).all(|r| {
                zero(self, zero(other, r)) == zero(self, r)
                    && zero(other, zero(self, r)) == zero(other, r)
            }),
            _ => false,
        }
    }
}

/// Ranks per step of device axis `a` (the product of the axes after it).
fn stride(dev: &[usize], a: usize) -> usize {
    dev[a + 1..].iter().product()
}

/// `rank`'s coordinate on device axis `a`.
fn digit(dev: &[usize], a: usize, rank: usize) -> usize {
    (rank / stride(dev, a)) % dev[a]
}

/// `rank`'s coordinates in device matrix `dev` (row-major).
pub fn coords(dev: &[usize], rank: usize) -> Vec<usize> {
    let mut c = vec![0; dev.len()];
    let mut r = rank;
    for (a, &n) in dev.iter().enumerate().rev() {
        c[a] = r % n;
        r /= n;
    }
    c
}

/// The ranks that share `rank`'s coordinates on every axis outside `axes`, ordered
/// row-major over `axes`: the group a collective over those axes runs on.
pub fn group_ranks(dev: &[usize], axes: &[usize], rank: usize) -> Vec<usize> {
    let mine = coords(dev, rank);
    let total: usize = dev.iter().product();
    // Enumerating every rank keeps the order row-major over `axes` for free.
    (0..total)
        .filter(|&r| {
            let c = coords(dev, r);
            (0..dev.len()).all(|a| axes.contains(&a) || c[a] == mine[a])
        })
        .collect()
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dev: Vec<String> = self.dev.iter().map(|d| d.to_string()).collect();
        let map: Vec<String> = self
            .map
            .iter()
            .map(|m| match m {
                Some(a) if self.dev[*a] > 1 => format!("S{a}"),
                _ => "R".to_string(),
            })
            .collect();
        write!(f, "dev[{}] ({})", dev.join(","), map.join(", "))?;
        let partial: Vec<String> = self
            .partial
            .iter()
            .filter(|&&a| self.dev[a] > 1)
            .map(|a| a.to_string())
            .collect();
        if !partial.is_empty() {
            write!(f, " partial[{}]", partial.join(","))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_are_row_major() {
        assert_eq!(coords(&[2, 3], 4), [1, 1]);
        assert_eq!(coords(&[2, 3], 5), [1, 2]);
        assert_eq!(group_ranks(&[2, 3], &[1], 4), [3, 4, 5]);
        assert_eq!(group_ranks(&[2, 3], &[0], 4), [1, 4]);
        assert_eq!(group_ranks(&[2, 3], &[0, 1], 4), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn equivalence_ignores_how_the_matrix_is_written() {
        let a = Layout::new(vec![4], vec![Some(0), None], vec![]).unwrap();
        let b = Layout::new(vec![4, 1, 1], vec![Some(0), Some(2)], vec![]).unwrap();
        assert!(a.equivalent(&b, &[8, 8]));
        // Splitting rows over the fast axis of a 2x2 matrix is a different placement.
        let c = Layout::new(vec![2, 2], vec![Some(1), None], vec![]).unwrap();
        let d = Layout::new(vec![2, 2], vec![Some(0), None], vec![]).unwrap();
        assert!(!c.equivalent(&d, &[8, 8]));
        assert!(!a.equivalent(&a.clone().with_partial(0), &[8, 8]));
    }

    #[test]
    fn bad_layouts_and_splits_are_errors() {
        assert!(Layout::new(vec![2], vec![Some(1)], vec![]).is_err());
        assert!(Layout::new(vec![2, 2], vec![Some(0), Some(0)], vec![]).is_err());
        let l = Layout::new(vec![4], vec![Some(0)], vec![]).unwrap();
        let e = l.local_shape(&[6]).unwrap_err();
        assert!(e.contains("cannot be split 4 ways"), "{e}");
    }

    /// Every layout of a 2-d tensor of shape [12, 12] over `dev` (each dimension on an
    /// axis or whole, at most one partial axis).
    fn all_layouts(dev: &[usize]) -> Vec<Layout> {
        let choices: Vec<Option<usize>> = std::iter::once(None)
            .chain((0..dev.len()).map(Some))
            .collect();
        let mut all = vec![];
        for &m0 in &choices {
            for &m1 in &choices {
                for &p in &choices {
                    let partial: Vec<usize> = p.into_iter().collect();
                    if let Ok(l) = Layout::new(dev.to_vec(), vec![m0, m1], partial)
                        && l.local_shape(&[12, 12]).is_ok()
                    {
                        all.push(l);
                    }
                }
            }
        }
        all
    }

    /// The definition, rank by rank: same blocks everywhere, same summing groups.
    fn equivalent_by_ranks(a: &Layout, b: &Layout, shape: &[usize]) -> bool {
        let groups = |l: &Layout| -> Vec<Vec<usize>> {
            let real: Vec<usize> = l
                .partial
                .iter()
                .copied()
                .filter(|&x| l.dev[x] > 1)
                .collect();
            (0..l.devices())
                .map(|r| {
                    if real.is_empty() {
                        vec![r]
                    } else {
                        group_ranks(&l.dev, &real, r)
                    }
                })
                .collect()
        };
        (0..a.devices())
            .all(|r| (0..shape.len()).all(|d| a.block(shape, r, d) == b.block(shape, r, d)))
            && groups(a) == groups(b)
    }

    #[test]
    fn equivalence_matches_its_definition_rank_by_rank() {
        let devs: [&[usize]; 6] = [&[4], &[2, 2], &[1, 4], &[2, 3, 2], &[6, 2], &[3, 4]];
        for x in devs {
            for y in devs {
                if x.iter().product::<usize>() != y.iter().product::<usize>() {
                    continue;
                }
                for a in all_layouts(x) {
                    for b in all_layouts(y) {
                        assert_eq!(
                            a.equivalent(&b, &[12, 12]),
                            equivalent_by_ranks(&a, &b, &[12, 12]),
                            "{a:?} vs {b:?}"
                        );
                    }
                }
            }
        }
    }

    impl Layout {
        fn with_partial(mut self, a: usize) -> Layout {
            self.map = vec![None; self.map.len()];
            self.partial = vec![a];
            self
        }
    }
}
