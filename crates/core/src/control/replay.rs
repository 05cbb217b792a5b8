//! A recorded graph run again as tensor code: every node through `apply` (so that, inside
//! a trace, it is recorded again, and with gradients on, it gets autodiff links), and
//! control-flow nodes through [`super::cond`] and [`super::while_loop`]. The gradients of
//! control flow differentiate the branches and loop bodies this way.
//!
//! ```text
//! let outputs = replay(&branch_graph, &args)?;   // the branch's ops, applied to `args`
//! ```

use std::panic::Location;

use crate::apply::apply;
use crate::error::{Error, Result};
use crate::ir::{Graph, NodeKind};
use crate::tensor::Tensor;

/// Runs `g` on `args` (its inputs) with tensor operations; returns its outputs. A graph
/// with parameter updates or random draws cannot be replayed (their effects would
/// happen twice): an error names it.
pub(crate) fn replay(g: &Graph, args: &[Tensor]) -> Result<Vec<Tensor>> {
    if !g.updates.is_empty() || g.num_keys > 0 {
        return Err(Error::invalid(format!(
            "gradients through control flow: the body `{}` assigns parameters or draws random numbers, which cannot be differentiated there",
            g.name
        )));
    }
    if args.len() != g.inputs.len() {
        return Err(Error::invalid(format!(
            "replay of `{}`: {} inputs expected, {} given",
            g.name,
            g.inputs.len(),
            args.len()
        )));
    }
    let mut values: Vec<Vec<Tensor>> = Vec::with_capacity(g.nodes.len());
    let get = |ids: &[usize], values: &Vec<Vec<Tensor>>| -> Vec<Tensor> {
        ids.iter().map(|&a| values[a][0].clone()).collect()
    };
    for node in &g.nodes {
        let loc = node.location.unwrap_or(Location::caller());
        let v = match &node.kind {
            NodeKind::Input(i) => vec![args[*i].clone()],
            NodeKind::Parameter(i) => vec![g.params[*i].value()],
            NodeKind::Constant(t) => vec![t.clone()],
            NodeKind::RandomKey(_) => {
                return Err(Error::invalid(format!(
                    "replay of `{}`: random keys cannot be replayed",
                    g.name
                )));
            }
            NodeKind::Op { op, args } => {
                let inputs = get(args, &values);
                let refs: Vec<&Tensor> = inputs.iter().collect();
                vec![apply(op.clone(), &refs, loc)?]
            }
            NodeKind::Cond {
                pred,
                then_args,
                else_args,
                then_branch,
                else_branch,
            } => {
                // The operands of both branches travel together; each takes its own.
                let (t, e) = (get(then_args, &values), get(else_args, &values));
                let split = t.len();
                let all: Vec<Tensor> = t.into_iter().chain(e).collect();
                super::cond(
                    &values[*pred][0],
                    &all,
                    |a| replay(then_branch, &a[..split]),
                    |a| replay(else_branch, &a[split..]),
                )?
            }
            NodeKind::While {
                init,
                cond_args,
                body_args,
                cond,
                body,
            } => {
                let (ca, ba) = (get(cond_args, &values), get(body_args, &values));
                let with = |s: &[Tensor], extra: &[Tensor]| -> Vec<Tensor> {
                    s.iter().chain(extra).cloned().collect()
                };
                super::while_loop(
                    |s| {
                        replay(cond, &with(s, &ca))?
                            .into_iter()
                            .next()
                            .ok_or_else(|| {
                                Error::invalid("replay: a loop condition without an output")
                            })
                    },
                    |s| replay(body, &with(s, &ba)),
                    &get(init, &values),
                )?
            }
            NodeKind::GetItem { of, index } => vec![values[*of][*index].clone()],
        };
        values.push(v);
    }
    Ok(g.outputs.iter().map(|&o| values[o][0].clone()).collect())
}
