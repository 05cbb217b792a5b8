//! Which rank runs which stage, which cells each stage holds, and the one message that
//! tells a stage the type of the activations it will receive.

use std::sync::Arc;

use spore_core::{DType, Error, Result, TensorType};
use spore_kernels::Buffer;
use spore_nn::cell::Cell;

use crate::collective;
use crate::management::GroupInfo;

/// A rank's place in the pipeline: stages are consecutive blocks of ranks (MindSpore's
/// layout), so stage `s` holds world ranks `s * per_stage .. (s + 1) * per_stage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) stage: usize,
    pub(crate) stages: usize,
    pub(crate) per_stage: usize,
    pub(crate) rank: usize,
}

impl Place {
    pub(crate) fn new(rank: usize, world: usize, stages: usize) -> Result<Place> {
        if stages > world {
            return Err(Error::invalid(format!(
                "PipelineCell: pipeline_stages is {stages}, but the job has only {world} ranks (one stage needs at \
                 least one)"
            )));
        }
        if stages == 0 || !world.is_multiple_of(stages) {
            return Err(Error::invalid(format!(
                "PipelineCell: pipeline_stages is {stages}, which does not divide the job's {world} ranks"
            )));
        }
        let per_stage = world / stages;
        Ok(Place {
            stage: rank / per_stage,
            stages,
            per_stage,
            rank,
        })
    }
    /// This rank's index among its stage's data-parallel ranks.
    pub(crate) fn replica(&self) -> usize {
        self.rank % self.per_stage
    }
    /// The world ranks of this stage (its data-parallel group).
    pub(crate) fn stage_ranks(&self) -> Vec<usize> {
        (self.stage * self.per_stage..(self.stage + 1) * self.per_stage).collect()
    }
    pub(crate) fn is_first(&self) -> bool {
        self.stage == 0
    }
    pub(crate) fn is_last(&self) -> bool {
        self.stage + 1 == self.stages
    }
    /// The rank of the previous stage that sends to this one.
    pub(crate) fn prev(&self) -> usize {
        self.rank - self.per_stage
    }
    pub(crate) fn next(&self) -> usize {
        self.rank + self.per_stage
    }
    /// On the last stage, the ranks of the earlier stages in this pipeline.
    pub(crate) fn earlier(&self) -> Vec<usize> {
        (1..self.stages)
            .map(|back| self.rank - back * self.per_stage)
            .collect()
    }
    /// The last stage's rank in this pipeline.
    pub(crate) fn last(&self) -> usize {
        self.rank + (self.stages - 1 - self.stage) * self.per_stage
    }
}

/// The backbone's children with the stage each runs in: a child with no
/// `pipeline_stage` of its own runs in the stage of the child before it (the first in
/// stage 0). Stages must not decrease along the sequence, and each must hold a child.
pub(crate) fn assign_stages(
    children: &[(String, Arc<dyn Cell>)],
    stages: usize,
) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(children.len());
    let mut current = 0;
    for (name, c) in children {
        if let Some(s) = c.base().pipeline_stage() {
            if s >= stages {
                return Err(Error::invalid(format!(
                    "PipelineCell: cell '{name}' ({}) has pipeline_stage {s}, but pipeline_stages is {stages}",
                    c.class_name()
                )));
            }
            if s < current {
                return Err(Error::invalid(format!(
                    "PipelineCell: cell '{name}' ({}) has pipeline_stage {s} after a cell of stage {current}; \
                     stages must not decrease along the backbone",
                    c.class_name()
                )));
            }
            current = s;
        }
        out.push(current);
    }
    if let Some(empty) = (0..stages).find(|s| !out.contains(s)) {
        return Err(Error::invalid(format!(
            "PipelineCell: no cell of the backbone is in stage {empty} of {stages} (set pipeline_stage on its cells)"
        )));
    }
    Ok(out)
}

/// Dimensions a boundary type may have (the message has a fixed length).
const MAX_DIMS: usize = 8;

/// Tells the next stage the type of the activations this stage sends.
pub(crate) fn announce(g: &GroupInfo, ty: &TensorType, dest: usize, tag: i32) -> Result<()> {
    if ty.shape.len() > MAX_DIMS {
        return Err(Error::invalid(format!(
            "PipelineCell: the activation between stages is {ty}; at most {MAX_DIMS} dimensions cross a stage boundary"
        )));
    }
    let dtype = DType::ALL.iter().position(|&d| d == ty.dtype).unwrap_or(0);
    let mut msg = vec![dtype as i64, ty.shape.len() as i64];
    msg.extend(ty.shape.iter().map(|&d| d as i64));
    msg.resize(2 + MAX_DIMS, 0);
    // Sent even when refused below, so that the next stage refuses it too instead of
    // waiting.
    collective::send(g, Buffer::I64(msg), &[2 + MAX_DIMS], dest, tag)?;
    float_activation(ty)
}

/// Gradients flow back across every stage boundary, so activations must be floats.
fn float_activation(ty: &TensorType) -> Result<()> {
    match ty.dtype.is_float() {
        true => Ok(()),
        false => Err(Error::invalid(format!(
            "PipelineCell: the activation between two stages is {ty}; only float activations cross a stage \
             boundary (their gradients flow back across it); move the cell that makes it into the next stage"
        ))),
    }
}

/// The type the previous stage announced.
pub(crate) fn announced(g: &GroupInfo, src: usize, tag: i32) -> Result<TensorType> {
    let bad = |what: String| {
        Error::invalid(format!(
            "PipelineCell: the type rank {src} announced for its activations is malformed ({what})"
        ))
    };
    let Buffer::I64(msg) = collective::recv(g, &[2 + MAX_DIMS], DType::I64, src, tag)? else {
        return Err(bad("not integers".to_string()));
    };
    let dtype = usize::try_from(msg[0])
        .ok()
        .and_then(|i| DType::ALL.get(i))
        .ok_or_else(|| bad(format!("dtype index {}", msg[0])))?;
    let ndim = usize::try_from(msg[1])
        .ok()
        .filter(|&n| n <= MAX_DIMS)
        .ok_or_else(|| bad(format!("{} dimensions", msg[1])))?;
    let shape = msg[2..2 + ndim]
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| bad(format!("dimension {d}"))))
        .collect::<Result<Vec<usize>>>()?;
    let ty = TensorType::new(&shape, *dtype);
    float_activation(&ty)?;
    Ok(ty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_blocks_of_ranks() {
        let p = Place::new(2, 4, 4).unwrap();
        assert_eq!((p.stage, p.prev(), p.next(), p.last()), (2, 1, 3, 3));
        let last = Place::new(3, 4, 4).unwrap();
        assert_eq!(last.earlier(), [2, 1, 0]);
        assert!(
            Place::new(0, 4, 3)
                .unwrap_err()
                .to_string()
                .contains("does not divide")
        );
        // 2 stages of 2 data-parallel ranks: rank 3 is the second replica of stage 1.
        let p = Place::new(3, 4, 2).unwrap();
        assert_eq!(
            (p.stage, p.replica(), p.prev(), p.stage_ranks()),
            (1, 1, 1, vec![2, 3])
        );
        assert_eq!(p.earlier(), [1]);
    }
}
