//! Data parallelism: what `TrainOneStepCell` and `Model` do differently when
//! `parallel_mode` is `data_parallel`. `init()` registers it with `spore-nn`; user code
//! does not change.
//!
//! ```
//! use spore_parallel::context::*;
//! spore_parallel::init().unwrap();
//! set_auto_parallel_context(AutoParallelUpdate::new().parallel_mode(ParallelMode::DataParallel)).unwrap();
//! // From here a TrainOneStepCell's gradients are reduced over the ranks before its
//! // optimizer runs, and its first step checks (and with `parameter_broadcast`,
//! // synchronises) the ranks' parameters.
//! # reset_auto_parallel_context();
//! ```

mod optimizer;
mod plan;
mod reducer;

use std::sync::Arc;

use spore_core::{Error, Parameter, Result, Tensor};
use spore_kernels::Buffer;
use spore_nn::distributed::{Distributed, GradientReduction};
use spore_nn::optim::Optimizer;

use crate::backend::ReduceOp;
use crate::collective;
use crate::context::{AutoParallelContext, ParallelMode, get_auto_parallel_context};
use crate::management::{GroupInfo, engine, group};
use crate::ops::contiguous_buffer;

/// Makes `spore-nn`'s training wrappers data parallel when the context says so.
pub(crate) fn install() {
    spore_nn::distributed::register(Some(Arc::new(DataParallel)));
}

struct DataParallel;

/// The context and the group size (checked against the context's `device_num`) when
/// the job is data parallel; `None` when it is not.
fn data_parallel() -> Result<Option<(AutoParallelContext, usize)>> {
    let ctx = get_auto_parallel_context();
    if ctx.parallel_mode != ParallelMode::DataParallel {
        return Ok(None);
    }
    let size = group(None)?.size();
    if let Some(n) = ctx.device_num
        && n != size
    {
        return Err(Error::invalid(format!(
            "data parallel: device_num is {n} in the auto-parallel context, but the job has {size} ranks"
        )));
    }
    Ok(Some((ctx, size)))
}

impl Distributed for DataParallel {
    fn rank(&self) -> usize {
        engine().map_or(0, |e| e.rank)
    }
    fn group_size(&self) -> usize {
        engine().map_or(1, |e| e.size)
    }
    fn is_data_parallel(&self) -> bool {
        matches!(data_parallel(), Ok(Some((_, n))) if n > 1)
    }
    fn gradient_reduction(
        &self,
        params: &[Parameter],
        weights: &[Tensor],
    ) -> Result<Option<Box<dyn GradientReduction>>> {
        if weights.is_empty() {
            return Ok(None);
        }
        if let Some(replicas) = crate::pipeline::replica_group_of(params)? {
            // Each data-parallel replica of a pipeline stage computed the gradient of its
            // share of the batch's mean loss: their mean is the whole batch's.
            let fusion = get_auto_parallel_context().all_reduce_fusion();
            let reducer = reducer::Reducer::new(weights, &fusion, ReduceOp::Mean, Some(replicas))?;
            return Ok(Some(Box::new(reducer)));
        }
        let Some((ctx, _)) = data_parallel()? else {
            return Ok(None);
        };
        let op = if ctx.gradients_mean {
            ReduceOp::Mean
        } else {
            ReduceOp::Sum
        };
        let reducer = reducer::Reducer::new(weights, &ctx.all_reduce_fusion(), op, None)?;
        Ok(Some(Box::new(reducer)))
    }
    fn prepare_parameters(&self, params: &[(String, Parameter)]) -> Result<()> {
        // The parallel optimizer's blocks and their state differ between ranks by design.
        let shared: Vec<(String, Parameter)> = params
            .iter()
            .filter(|(_, p)| !optimizer::is_rank_local(p))
            .cloned()
            .collect();
        let params = &shared[..];
        let trainable: Vec<Parameter> = params
            .iter()
            .filter(|(_, p)| p.requires_grad())
            .map(|(_, p)| p.clone())
            .collect();
        if let Some(replicas) = crate::pipeline::replica_group_of(&trainable)? {
            // A pipeline stage's replicas: the same checks within the stage's group.
            let g = group(Some(&replicas))?;
            check_same_parameters(params, &g)?;
            if get_auto_parallel_context().parameter_broadcast {
                broadcast_parameters(params, &g)?;
            }
            return Ok(());
        }
        let Some((ctx, size)) = data_parallel()? else {
            return Ok(());
        };
        let world = group(None)?;
        if size > 1 {
            check_same_parameters(params, &world)?;
        }
        if ctx.parameter_broadcast {
            broadcast_parameters(params, &world)?;
        }
        Ok(())
    }
    fn parallel_optimizer(
        &self,
        optimizer: &Arc<dyn Optimizer>,
    ) -> Result<Option<Arc<dyn Optimizer>>> {
        let ctx = get_auto_parallel_context();
        if !ctx.enable_parallel_optimizer || ctx.parallel_mode == ParallelMode::StandAlone {
            return Ok(None);
        }
        let shares = match ctx.parallel_mode {
            ParallelMode::SemiAutoParallel | ParallelMode::AutoParallel => {
                // One optimizer trains one pipeline stage's replicas, or parameters of none.
                crate::pipeline::replica_group_of(optimizer.params())?;
                let shares: Vec<optimizer::Share> = optimizer
                    .params()
                    .iter()
                    .map(shared_in_sharded_job)
                    .collect::<Result<_>>()?;
                if self.group_size() > 1 && shares.iter().all(|s| s.ranks == 1) {
                    log::warn!(
                        "enable_parallel_optimizer: no parameter of the optimizer is held by more than one rank (a \
                         network sharded over every rank, or one not sharded nor pipelined); its state stays whole"
                    );
                }
                shares
            }
            _ => {
                let Some((ctx, size)) = data_parallel()? else {
                    return Err(Error::invalid(format!(
                        "enable_parallel_optimizer shards the optimizer across data-parallel ranks and is available \
                         in parallel_mode data_parallel, semi_auto_parallel and auto_parallel; not with {} yet",
                        ctx.parallel_mode.name()
                    )));
                };
                let share = optimizer::Share {
                    group: None,
                    rank: group(None)?.rank,
                    ranks: size,
                    reduce: Some(match ctx.gradients_mean {
                        true => ReduceOp::Mean,
                        false => ReduceOp::Sum,
                    }),
                };
                vec![share; optimizer.params().len()]
            }
        };
        let sharded = optimizer::ParallelOptimizer::new(optimizer, shares)?;
        Ok(Some(Arc::new(sharded)))
    }
    fn sum_across_ranks(&self, values: &[f64]) -> Result<Vec<f64>> {
        if !self.is_data_parallel() {
            return Ok(values.to_vec());
        }
        collective::collective_sum_f64(values)
    }
    /// Sharded and pipelined networks hold each rank's blocks or stage; the parallel
    /// optimizer, each rank's block of the state.
    fn rank_local_state(&self, params: &[Parameter]) -> bool {
        let sharded_modes = matches!(
            get_auto_parallel_context().parallel_mode,
            ParallelMode::SemiAutoParallel | ParallelMode::AutoParallel
        );
        self.group_size() > 1 && (sharded_modes || params.iter().any(optimizer::is_rank_local))
    }
    /// A small AllReduce over the job each loss-scaled step (not in stand_alone mode,
    /// where each rank trains alone): it keeps every rank's loss scale and parameters in
    /// step whatever gradients each one checked, and catches ranks at different steps.
    fn overflow_anywhere(&self, local: bool, step: u64) -> Result<bool> {
        let alone = get_auto_parallel_context().parallel_mode == ParallelMode::StandAlone;
        if self.group_size() <= 1 || alone {
            return Ok(local);
        }
        let step = step as f64;
        let flags = collective::collective_max_f64s(&[f64::from(u8::from(local)), step, -step])?;
        if flags[1] != -flags[2] {
            return Err(Error::invalid(format!(
                "loss-scaled training: rank {} is at step {step}, other ranks at steps {} to {}; a rank failed or \
                 skipped a step, and the ranks can no longer agree on overflows",
                self.rank(),
                -flags[2],
                flags[1]
            )));
        }
        Ok(flags[0] > 0.0)
    }
}

/// Who shares a parameter's update in a sharded or pipelined job: a sharded network's
/// ranks holding the same block (each with the whole gradient of it), or a pipeline
/// stage's data-parallel replicas (each with its share's gradient, averaged); else this
/// rank alone.
fn shared_in_sharded_job(p: &Parameter) -> Result<optimizer::Share> {
    let alone = optimizer::Share {
        group: None,
        rank: 0,
        ranks: 1,
        reduce: None,
    };
    if let Some(ranks) = crate::sharding::holders_of(p) {
        if ranks.len() == 1 {
            return Ok(alone);
        }
        let g = crate::sharding::group_of_ranks(&ranks)?;
        return Ok(optimizer::Share {
            rank: g.rank,
            ranks: g.size(),
            group: Some(g.name),
            reduce: None,
        });
    }
    match crate::pipeline::replica_group_of(std::slice::from_ref(p))? {
        Some(name) => {
            let g = group(Some(&name))?;
            Ok(optimizer::Share {
                rank: g.rank,
                ranks: g.size(),
                group: Some(name),
                reduce: Some(ReduceOp::Mean),
            })
        }
        None => Ok(alone),
    }
}

/// One line per parameter: `name: shape dtype` and whether it trains (a parameter frozen
/// on one rank only would change which gradients the ranks reduce).
fn describe(params: &[(String, Parameter)]) -> Vec<String> {
    params
        .iter()
        .map(|(name, p)| {
            let frozen = if p.requires_grad() { "" } else { " (frozen)" };
            format!("{name}: {}{frozen}", p.tensor_type())
        })
        .collect()
}

/// Every rank's parameter list must be that of the group's rank 0; the error names the
/// first difference.
pub(crate) fn check_same_parameters(params: &[(String, Parameter)], g: &GroupInfo) -> Result<()> {
    let mine = describe(params).join("\n").into_bytes();
    let longest = match collective::all_reduce(
        g,
        Arc::new(Buffer::I64(vec![mine.len() as i64])),
        &[1],
        ReduceOp::Max,
    )? {
        Buffer::I64(v) => v.first().copied().unwrap_or(0).max(0) as usize,
        other => {
            return Err(Error::invalid(format!(
                "internal: a length came back as {}",
                other.dtype()
            )));
        }
    };
    let mut padded = mine;
    padded.resize(longest, 0);
    let Buffer::U8(all) = collective::all_gather(g, Buffer::U8(padded), &[longest])? else {
        return Err(Error::invalid(
            "internal: the parameter lists came back in another dtype",
        ));
    };
    let lists: Vec<Vec<String>> = all
        .chunks(longest.max(1))
        .map(|c| {
            let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end])
                .lines()
                .map(str::to_string)
                .collect()
        })
        .collect();
    first_difference(&lists).map_or(Ok(()), |m| {
        Err(Error::invalid(format!(
            "data parallel: every rank must build the same network, but {m} (ranks of group '{}'; this is \
             rank {} of it)",
            g.name, g.rank
        )))
    })
}

/// The first way a rank's parameter list differs from rank 0's.
fn first_difference(lists: &[Vec<String>]) -> Option<String> {
    let first = lists.first()?;
    for (r, list) in lists.iter().enumerate().skip(1) {
        for i in 0..first.len().max(list.len()) {
            match (first.get(i), list.get(i)) {
                (Some(a), Some(b)) if a == b => continue,
                (Some(a), Some(b)) => {
                    return Some(format!(
                        "parameter {i} is `{a}` on rank 0 and `{b}` on rank {r}"
                    ));
                }
                (Some(a), None) => {
                    return Some(format!(
                        "rank 0 has {} parameters and rank {r} has {} (the first missing is `{a}`)",
                        first.len(),
                        list.len()
                    ));
                }
                (None, Some(b)) => {
                    return Some(format!(
                        "rank 0 has {} parameters and rank {r} has {} (the first extra is `{b}`)",
                        first.len(),
                        list.len()
                    ));
                }
                (None, None) => {}
            }
        }
    }
    None
}

/// MindSpore's `parameter_broadcast`: the group's rank 0's values on every rank of it.
pub(crate) fn broadcast_parameters(params: &[(String, Parameter)], g: &GroupInfo) -> Result<()> {
    for (_, p) in params {
        let value = p.stored();
        let data = contiguous_buffer(&value).map_err(Error::invalid)?;
        let synced = collective::broadcast(g, data, value.shape(), 0)?;
        p.store(Tensor::from_buffer(synced, value.shape())?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::first_difference;

    fn list(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_first_difference_names_both_sides() {
        let a = list(&["w: Float32[2, 3]", "b: Float32[3]"]);
        let b = list(&["w: Float32[2, 4]", "b: Float32[3]"]);
        let m = first_difference(&[a.clone(), a.clone(), b]).unwrap();
        assert!(
            m.contains("Float32[2, 3]` on rank 0") && m.contains("Float32[2, 4]` on rank 2"),
            "{m}"
        );
        assert!(first_difference(&[a.clone(), a.clone()]).is_none());
        let m = first_difference(&[a.clone(), a[..1].to_vec()]).unwrap();
        assert!(m.contains("first missing is `b: Float32[3]`"), "{m}");
    }
}
