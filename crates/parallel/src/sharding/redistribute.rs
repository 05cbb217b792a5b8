//! Moving a tensor from one layout to another: the steps (planned without running
//! anything, so plans can be printed and costed) and their execution on a rank.
//!
//! ```
//! use spore_parallel::sharding::{redistribution_steps, Layout, Step};
//! let blocks = Layout::new(vec![2], vec![Some(0), None], vec![]).unwrap();
//! let whole = Layout::replicated(2, 2);
//! let steps = redistribution_steps(&blocks, &whole, &[4, 4]).unwrap();
//! assert_eq!(steps, [Step::AllGather { dim: 0, dev: vec![2], axis: 0 }]);
//! ```
//!
//! Order: summands are reduced first (a ReduceScatter where the target splits a
//! dimension over the same device axis, else an AllReduce); then a device axis that
//! moves from one dimension to another (each whole on the other side) is one AllToAll;
//! then every other dimension whose blocks differ is gathered where the source splits
//! it, then cut where the target splits it. Each step runs on the ranks that differ only
//! along its device axes.

use std::collections::HashMap;
use std::sync::Mutex;

use spore_core::{Error, Result, Tensor};

use super::comm::{Move, Redistribution};
use super::layout::{Layout, group_ranks};
use crate::management::{GroupInfo, create_group, group};
use crate::ops::{AllToAll, apply_primitive};

/// One collective (or local cut) of a redistribution, over device matrix `dev`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Summands over `axes` added into the whole value.
    AllReduce { dev: Vec<usize>, axes: Vec<usize> },
    /// Summands over `axis` added, and dimension `dim` cut into that axis's blocks.
    ReduceScatter {
        dim: usize,
        dev: Vec<usize>,
        axis: usize,
    },
    /// Blocks of `dim` over `axis` joined into the whole dimension.
    AllGather {
        dim: usize,
        dev: Vec<usize>,
        axis: usize,
    },
    /// The whole dimension `dim` cut into `axis`'s blocks (no communication).
    Slice {
        dim: usize,
        dev: Vec<usize>,
        axis: usize,
    },
    /// Blocks of `concat_dim` over `axis` become blocks of `split_dim` over the same
    /// axis: one AllToAll, where an AllGather then a Slice would move `p` times the data.
    AllToAll {
        split_dim: usize,
        concat_dim: usize,
        dev: Vec<usize>,
        axis: usize,
    },
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::AllReduce { dev, axes } => write!(f, "AllReduce(axes {axes:?} of dev{dev:?})"),
            Step::ReduceScatter { dim, dev, axis } => {
                write!(f, "ReduceScatter(dim {dim}, axis {axis} of dev{dev:?})")
            }
            Step::AllGather { dim, dev, axis } => {
                write!(f, "AllGather(dim {dim}, axis {axis} of dev{dev:?})")
            }
            Step::Slice { dim, dev, axis } => {
                write!(f, "Slice(dim {dim}, axis {axis} of dev{dev:?})")
            }
            Step::AllToAll {
                split_dim,
                concat_dim,
                dev,
                axis,
            } => write!(
                f,
                "AllToAll(dim {concat_dim} -> dim {split_dim}, axis {axis} of dev{dev:?})"
            ),
        }
    }
}

/// The steps that turn a tensor of `shape` laid out as `from` into `to`.
pub fn redistribution_steps(from: &Layout, to: &Layout, shape: &[usize]) -> Result<Vec<Step>> {
    let fail = |why: String| {
        Err(Error::invalid(format!(
            "cannot redistribute a tensor of shape {shape:?} from {from} to {to}: {why}"
        )))
    };
    if from.devices() != to.devices() {
        return fail(format!(
            "the layouts span {} and {} ranks",
            from.devices(),
            to.devices()
        ));
    }
    if from.map.len() != shape.len() || to.map.len() != shape.len() {
        return fail("the layouts' ranks differ from the tensor's".into());
    }
    if to.partial.iter().any(|&a| to.dev[a] > 1) {
        return fail("a target layout holds whole values, never summands".into());
    }
    from.local_shape(shape).map_err(Error::invalid)?;
    to.local_shape(shape).map_err(Error::invalid)?;
    if from.equivalent(to, shape) {
        return Ok(vec![]);
    }
    let mut steps = vec![];
    let mut cur = from.clone();
    let partial: Vec<usize> = from
        .partial
        .iter()
        .copied()
        .filter(|&a| from.dev[a] > 1)
        .collect();
    if !partial.is_empty() {
        let scatter = (partial.len() == 1 && from.dev == to.dev)
            .then(|| {
                (0..shape.len()).find(|&d| to.map[d] == Some(partial[0]) && from.factor(d) == 1)
            })
            .flatten();
        match scatter {
            Some(d) => {
                steps.push(Step::ReduceScatter {
                    dim: d,
                    dev: from.dev.clone(),
                    axis: partial[0],
                });
                cur.map[d] = Some(partial[0]);
            }
            None => steps.push(Step::AllReduce {
                dev: from.dev.clone(),
                axes: partial,
            }),
        }
        cur.partial.clear();
    }
    let mut differs: Vec<usize> = (0..shape.len())
        .filter(|&d| !cur.same_blocks(to, shape, d))
        .collect();
    // Ranks that split one dimension here and another there (each whole on the other
    // side), in the same groups: an AllToAll moves the blocks across.
    for c in differs.clone() {
        let Some(from_axis) = cur.map[c].filter(|_| cur.factor(c) > 1 && to.factor(c) == 1) else {
            continue;
        };
        let split = differs.iter().copied().find(|&s| {
            s != c
                && cur.factor(s) == 1
                && to.map[s]
                    .is_some_and(|a| to.dev[a] > 1 && same_groups(&cur.dev, from_axis, &to.dev, a))
        });
        if let Some(split) = split {
            steps.push(Step::AllToAll {
                split_dim: split,
                concat_dim: c,
                dev: cur.dev.clone(),
                axis: from_axis,
            });
            differs.retain(|&d| d != c && d != split);
            cur.map[c] = None;
            cur.map[split] = Some(from_axis);
        }
    }
    for &d in &differs {
        if cur.factor(d) > 1 {
            steps.push(Step::AllGather {
                dim: d,
                dev: cur.dev.clone(),
                axis: cur.map[d].unwrap_or_default(),
            });
        }
    }
    for &d in &differs {
        if to.factor(d) > 1 {
            steps.push(Step::Slice {
                dim: d,
                dev: to.dev.clone(),
                axis: to.map[d].unwrap_or_default(),
            });
        }
    }
    Ok(steps)
}

/// Whether axis `a` of device matrix `dev` and axis `b` of `other` group the ranks alike,
/// in the same order (row-major matrices: the same size and the same rank stride).
fn same_groups(dev: &[usize], a: usize, other: &[usize], b: usize) -> bool {
    let stride = |d: &[usize], x: usize| d[x + 1..].iter().product::<usize>();
    dev[a] == other[b] && stride(dev, a) == stride(other, b)
}

/// Runs the steps that move this rank's part of a tensor of global `shape` from `from`
/// to `to`, over the job's ranks.
pub fn redistribute(x: &Tensor, shape: &[usize], from: &Layout, to: &Layout) -> Result<Tensor> {
    redistribute_on(&group(None)?, x, shape, from, to)
}

/// [`redistribute`] over the ranks of `mesh` (the job's, or a group of them such as a
/// pipeline stage's): device `i` of a layout is the mesh's rank `i`.
pub(crate) fn redistribute_on(
    mesh: &GroupInfo,
    x: &Tensor,
    shape: &[usize],
    from: &Layout,
    to: &Layout,
) -> Result<Tensor> {
    let mut y = x.clone();
    for step in redistribution_steps(from, to, shape)? {
        y = run_step(mesh, &y, &step)?;
    }
    Ok(y)
}

/// Identity whose gradient is summed over the ranks along `axes` of `dev`: marks a
/// value that ranks computing different parts of an op all read whole.
pub(crate) fn mark_gradient_sum(
    mesh: &GroupInfo,
    x: &Tensor,
    dev: &[usize],
    axes: &[usize],
) -> Result<Tensor> {
    match step_group(mesh, dev, axes)? {
        Some(group) => apply_primitive(
            Redistribution {
                kind: Move::GradSum,
                group,
            },
            &[x],
        ),
        None => Ok(x.clone()),
    }
}

fn run_step(mesh: &GroupInfo, x: &Tensor, step: &Step) -> Result<Tensor> {
    match step {
        Step::AllReduce { dev, axes } => match step_group(mesh, dev, axes)? {
            Some(group) => apply_primitive(
                Redistribution {
                    kind: Move::PartialSum,
                    group,
                },
                &[x],
            ),
            None => Ok(x.clone()),
        },
        Step::ReduceScatter { dim, dev, axis } => {
            along(mesh, x, *dim, dev, *axis, Move::ReduceScatter)
        }
        Step::AllGather { dim, dev, axis } => along(mesh, x, *dim, dev, *axis, Move::Gather),
        Step::Slice { dim, dev, axis } => along(mesh, x, *dim, dev, *axis, Move::Slice),
        Step::AllToAll {
            split_dim,
            concat_dim,
            dev,
            axis,
        } => match step_group(mesh, dev, &[*axis])? {
            // A permutation of the data: its gradient is the AllToAll back, whatever the
            // ranks' losses are.
            Some(group) => apply_primitive(AllToAll::new(*split_dim, *concat_dim, group), &[x]),
            None => Ok(x.clone()),
        },
    }
}

/// Runs `kind` along `dim` over `axis`'s group, with `dim` moved to the front (views
/// both ways).
fn along(
    mesh: &GroupInfo,
    x: &Tensor,
    dim: usize,
    dev: &[usize],
    axis: usize,
    kind: Move,
) -> Result<Tensor> {
    let Some(group) = step_group(mesh, dev, &[axis])? else {
        return Ok(x.clone());
    };
    let f = |group, x: &Tensor| apply_primitive(Redistribution { kind, group }, &[x]);
    if dim == 0 {
        return f(group, x);
    }
    let rank = x.rank();
    let mut to_front: Vec<usize> = vec![dim];
    to_front.extend((0..rank).filter(|&d| d != dim));
    let mut back = vec![0; rank];
    for (i, &d) in to_front.iter().enumerate() {
        back[d] = i;
    }
    let moved = spore_core::ops::transpose(x, &to_front)?;
    spore_core::ops::transpose(&f(group, &moved)?, &back)
}

/// Communicators of the sharding steps, by their world ranks, made on first use. All
/// the ranks of a step's group reach it together (a rank's group along some axes is
/// every member's), so each group is made by all its members at the same point.
type GroupNames = HashMap<Vec<usize>, String>;
static GROUPS: Mutex<Option<GroupNames>> = Mutex::new(None);

/// The group of the mesh's ranks that differ from this one only along `axes` of `dev`,
/// or `None` where that group is this rank alone.
fn step_group(mesh: &GroupInfo, dev: &[usize], axes: &[usize]) -> Result<Option<GroupInfo>> {
    let devices: usize = dev.iter().product();
    if devices != mesh.size() {
        return Err(Error::invalid(format!(
            "a sharded layout spans {devices} ranks (device matrix {dev:?}) but {} has {}; plan for that many",
            super::cell::mesh_name(mesh),
            mesh.size()
        )));
    }
    let members = group_ranks(dev, axes, mesh.rank);
    if members.len() == 1 {
        return Ok(None);
    }
    if members.len() == mesh.size() {
        return Ok(Some(mesh.clone()));
    }
    let ranks: Vec<usize> = members.iter().map(|&i| mesh.world_ranks[i]).collect();
    group_of_ranks(&ranks).map(Some)
}

/// The group of these world ranks (this rank among them), made on first use by all its
/// members at the same point of their programs.
pub(crate) fn group_of_ranks(ranks: &[usize]) -> Result<GroupInfo> {
    let world = group(None)?;
    if ranks == world.world_ranks {
        return Ok(world);
    }
    // The lock is held while the group is made, so two threads never make it twice;
    // the collective runs on the communication thread, which never takes this lock.
    let name = with_groups(|g| -> Result<String> {
        if let Some(name) = g.get(ranks) {
            return Ok(name.clone());
        }
        let listed: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
        let name = format!("sharding_ranks_{}", listed.join("_"));
        create_group(&name, ranks)?;
        g.insert(ranks.to_vec(), name.clone());
        Ok(name)
    })?;
    group(Some(&name))
}

fn with_groups<R>(f: impl FnOnce(&mut GroupNames) -> R) -> R {
    let mut guard = GROUPS.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.get_or_insert_with(HashMap::new))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dev: &[usize], map: &[Option<usize>]) -> Layout {
        Layout::new(dev.to_vec(), map.to_vec(), vec![]).unwrap()
    }

    #[test]
    fn a_split_moving_between_dimensions_is_one_all_to_all() {
        let shape = [8, 6];
        let steps = redistribution_steps(
            &layout(&[2], &[Some(0), None]),
            &layout(&[2], &[None, Some(0)]),
            &shape,
        )
        .unwrap();
        let all_to_all = Step::AllToAll {
            split_dim: 1,
            concat_dim: 0,
            dev: vec![2],
            axis: 0,
        };
        assert_eq!(steps, [all_to_all]);
        // Two operators' device matrices that group the ranks alike.
        let steps = redistribution_steps(
            &layout(&[2, 1, 1], &[Some(0), None]),
            &layout(&[1, 2, 1], &[None, Some(1)]),
            &shape,
        )
        .unwrap();
        assert!(matches!(steps[..], [Step::AllToAll { .. }]), "{steps:?}");
        // On a 2x2 mesh, rows over one axis and columns over the other: not one group.
        let steps = redistribution_steps(
            &layout(&[2, 2], &[Some(0), None]),
            &layout(&[2, 2], &[None, Some(1)]),
            &shape,
        )
        .unwrap();
        assert!(
            matches!(steps[..], [Step::AllGather { .. }, Step::Slice { .. }]),
            "{steps:?}"
        );
    }
}
