//! The reference interpreter: runs a graph node by node with the eager operators. It is
//! the semantics every pass and the planned executor are tested against.
//!
//! ```
//! use spore_core::{trace::trace, DType, Tensor, TensorType};
//! let g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| Ok(vec![x[0].mul(&x[0])?])).unwrap();
//! let out = g.interpret(&[Tensor::from_vec(vec![3.0f32, 4.0], &[2]).unwrap()]).unwrap();
//! assert_eq!(out.outputs[0].to_vec::<f32>().unwrap(), vec![9.0, 16.0]);
//! ```

use std::panic::Location;

use super::{Graph, NodeKind};
use crate::apply::{apply_in_graph as apply, no_grad};
use crate::error::{Error, Result};
use crate::parameter::Parameter;
use crate::prims::in_place::EvalContext;
use crate::tensor::Tensor;

/// What a run produces: the outputs, and the new values for parameters (not yet stored).
#[derive(Clone, Debug)]
pub struct RunOutput {
    pub outputs: Vec<Tensor>,
    pub updates: Vec<(Parameter, Tensor)>,
}

impl RunOutput {
    /// Stores the parameter updates.
    pub fn commit(&self) {
        for (p, v) in &self.updates {
            p.store(v.clone());
        }
    }
}

/// Checks run inputs against the graph's input types.
pub fn check_inputs(g: &Graph, inputs: &[Tensor]) -> Result<()> {
    if inputs.len() != g.inputs.len() {
        return Err(Error::invalid(format!(
            "graph {} takes {} inputs, got {}",
            g.name,
            g.inputs.len(),
            inputs.len()
        )));
    }
    for (i, (t, &v)) in inputs.iter().zip(&g.inputs).enumerate() {
        if t.tensor_type() != g.nodes[v].ty() {
            return Err(Error::invalid(format!(
                "graph {}: input {i} must be {}, got {}",
                g.name,
                g.nodes[v].ty(),
                t.tensor_type()
            )));
        }
    }
    Ok(())
}

impl Graph {
    /// Runs the graph with fresh random keys from the global generator.
    pub fn interpret(&self, inputs: &[Tensor]) -> Result<RunOutput> {
        let keys: Vec<Tensor> = (0..self.num_keys)
            .map(|_| Tensor::scalar(crate::rng::next_key() as i64))
            .collect();
        self.interpret_with_keys(inputs, &keys)
    }

    /// Runs the graph with the given random keys (Int64 scalars, one per `RandomKey`).
    pub fn interpret_with_keys(&self, inputs: &[Tensor], keys: &[Tensor]) -> Result<RunOutput> {
        check_inputs(self, inputs)?;
        let values = no_grad(|| eval_nodes(self, inputs, keys))?;
        let outputs = self.outputs.iter().map(|&o| values[o][0].clone()).collect();
        let updates = self
            .updates
            .iter()
            .map(|&(p, v)| (self.params[p].clone(), values[v][0].clone()))
            .collect();
        Ok(RunOutput { outputs, updates })
    }
}

/// Runs a sub-graph (no parameters, no keys of its own) and returns its outputs.
fn call(g: &Graph, args: Vec<Tensor>) -> Result<Vec<Tensor>> {
    let values = eval_nodes(g, &args, &[])?;
    Ok(g.outputs.iter().map(|&o| values[o][0].clone()).collect())
}

fn eval_nodes(g: &Graph, inputs: &[Tensor], keys: &[Tensor]) -> Result<Vec<Vec<Tensor>>> {
    let mut values: Vec<Vec<Tensor>> = Vec::with_capacity(g.nodes.len());
    for node in &g.nodes {
        let get = |ids: &[usize], values: &Vec<Vec<Tensor>>| {
            ids.iter()
                .map(|&a| values[a][0].clone())
                .collect::<Vec<_>>()
        };
        let v = match &node.kind {
            NodeKind::Input(i) => vec![inputs[*i].clone()],
            NodeKind::Parameter(i) => vec![g.params[*i].stored()],
            NodeKind::RandomKey(k) => match keys.get(*k) {
                Some(key) => vec![key.clone()],
                None => {
                    return Err(Error::invalid(format!(
                        "graph {}: random key {k} was not supplied",
                        g.name
                    )));
                }
            },
            NodeKind::Constant(t) => vec![t.clone()],
            NodeKind::Op { op, args } => {
                let args = get(args, &values);
                let refs: Vec<&Tensor> = args.iter().collect();
                vec![apply(
                    op,
                    &refs,
                    node.location.unwrap_or(Location::caller()),
                    &mut EvalContext::default(),
                )?]
            }
            NodeKind::Cond {
                pred,
                then_args,
                else_args,
                then_branch,
                else_branch,
            } => {
                if values[*pred][0].item()? != 0.0 {
                    call(then_branch, get(then_args, &values))?
                } else {
                    call(else_branch, get(else_args, &values))?
                }
            }
            NodeKind::While {
                init,
                cond_args,
                body_args,
                cond,
                body,
            } => {
                let mut state = get(init, &values);
                let (ca, ba) = (get(cond_args, &values), get(body_args, &values));
                loop {
                    let c = call(cond, state.iter().chain(&ca).cloned().collect())?;
                    if c[0].item()? == 0.0 {
                        break;
                    }
                    state = call(body, state.iter().chain(&ba).cloned().collect())?;
                }
                state
            }
            NodeKind::GetItem { of, index } => vec![values[*of][*index].clone()],
        };
        values.push(v);
    }
    Ok(values)
}
