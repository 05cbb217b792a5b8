//! Which ranks hold the same block of a sharded parameter: those that differ from this
//! one only along the device axes its layout leaves unsplit. They compute equal
//! gradients for it, so the parallel optimizer can shard its state and update among
//! them (ZeRO-1 within a sharded network).
//!
//! ```
//! use spore_parallel::sharding::Layout;
//! // Rows of a weight split 2 ways on a 2 x 2 mesh: ranks 0 and 2 hold the same block.
//! let rows = Layout::new(vec![2, 2], vec![Some(1), None], vec![]).unwrap();
//! assert_eq!(spore_parallel::sharding::block_holders(&rows, 0), [0, 2]);
//! ```

use std::collections::HashMap;
use std::sync::Mutex;

use spore_core::Parameter;

use super::layout::{Layout, group_ranks};
use crate::management::GroupInfo;

/// Parameter id to the world ranks that hold its block (this rank among them).
static HOLDERS: Mutex<Option<HashMap<u64, Vec<usize>>>> = Mutex::new(None);

/// The ranks of a layout's mesh (by index) that hold the same block as `rank`.
pub fn block_holders(layout: &Layout, rank: usize) -> Vec<usize> {
    let unsplit: Vec<usize> = (0..layout.dev.len())
        .filter(|a| !layout.map.contains(&Some(*a)) && !layout.partial.contains(a))
        .collect();
    group_ranks(&layout.dev, &unsplit, rank)
}

/// Records, for each of a sharded network's local parameters, the world ranks of
/// `mesh` that hold the same block.
pub(crate) fn register(params: &[Parameter], layouts: &[Layout], mesh: &GroupInfo) {
    let mut holders = HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
    let map = holders.get_or_insert_with(HashMap::new);
    for (p, layout) in params.iter().zip(layouts) {
        let ranks = block_holders(layout, mesh.rank)
            .into_iter()
            .map(|i| mesh.world_ranks[i])
            .collect();
        map.insert(p.id(), ranks);
    }
}

/// The world ranks that hold the same block of `p`, for a sharded network's parameter.
pub(crate) fn holders_of(p: &Parameter) -> Option<Vec<usize>> {
    let holders = HOLDERS.lock().unwrap_or_else(|p| p.into_inner());
    holders.as_ref()?.get(&p.id()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_differ_only_along_unsplit_axes() {
        // Columns over axis 1 of a 2 x 2 mesh: axis 0 unsplit.
        let cols = Layout::new(vec![2, 2], vec![None, Some(1)], vec![]).unwrap();
        assert_eq!(block_holders(&cols, 3), [1, 3]);
        // Split over every axis: each rank alone; whole: every rank.
        let all = Layout::new(vec![2, 2], vec![Some(0), Some(1)], vec![]).unwrap();
        assert_eq!(block_holders(&all, 2), [2]);
        assert_eq!(block_holders(&Layout::replicated(4, 2), 1), [0, 1, 2, 3]);
    }
}
