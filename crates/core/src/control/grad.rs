//! Gradients through traced control flow. A `Cond` or loop node recorded in a trace gets,
//! on each output, an autodiff link whose rule differentiates the recorded branch or body
//! by replaying it ([`super::replay`]) under `value_and_grad`:
//!
//! ```text
//! cond:  d(inputs) = cond(pred, |..| vjp(then_branch), |..| vjp(else_branch))
//! scan:  the carries of every step are kept (a tape); a reverse loop runs the step's
//!        vjp from the last step to the first, adding up the gradients of the sequence
//!        rows and of the values the step captured (weights)
//! ```
//!
//! Each output's link computes its own gradient (a cond, or a reverse loop, per output
//! that a gradient reaches), which costs one backward pass per such output.

use std::sync::Arc;

use spore_kernels::DType;

use super::replay::replay;
use crate::autodiff::value_and_grad;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::op::Op;
use crate::op::custom::{CustomOp, CustomPrimitive};
use crate::tensor::{Data, GradFn, Tensor, TensorType};

/// The vector-Jacobian product of graph `g` at `args`: for each argument, the gradient
/// of `Σ_j <output_j, cotangent_j>` (zeros for arguments without one: integer ones, or
/// ones no output depends on).
pub(crate) fn graph_vjp(
    g: &Graph,
    args: &[Tensor],
    cotangents: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let float: Vec<usize> = (0..args.len())
        .filter(|&i| args[i].dtype().is_float())
        .collect();
    let mut grads: Vec<Tensor> = args.iter().map(Tensor::zeros_like).collect();
    if float.is_empty() || cotangents.iter().all(Option::is_none) {
        return Ok(grads);
    }
    let weighted_sum = |x: &[Tensor]| -> Result<Tensor> {
        let outputs = replay(g, x)?;
        let mut total: Option<Tensor> = None;
        for (o, c) in outputs.iter().zip(cotangents) {
            let Some(c) = c.as_ref().filter(|_| o.dtype().is_float()) else {
                continue;
            };
            // In f64, so that outputs of different float types add up.
            let term = o.mul(c)?.sum(&[], false)?.cast(DType::F64)?;
            total = Some(match total {
                None => term,
                Some(t) => t.add(&term)?,
            });
        }
        total.ok_or_else(|| Error::invalid("graph_vjp: no cotangent"))
    };
    let out = value_and_grad(weighted_sum, Some(&float), &[], false)(args)?;
    for (&i, gi) in float.iter().zip(out.input_grads) {
        grads[i] = gi;
    }
    Ok(grads)
}

/// Gives each of `outputs` an autodiff link: output `k`'s gradient comes from
/// `rule(k)`, applied to `inputs`. `None` for integer outputs (no gradient).
pub(crate) fn link_outputs(
    outputs: Vec<Tensor>,
    inputs: &[Tensor],
    rule: impl Fn(usize) -> Arc<dyn CustomPrimitive>,
) -> Vec<Tensor> {
    outputs
        .into_iter()
        .enumerate()
        .map(|(k, o)| {
            if !o.dtype().is_float() {
                return o;
            }
            let node = GradFn {
                op: Op::Custom(CustomOp::new(rule(k))),
                inputs: inputs.to_vec(),
            };
            let ty: TensorType = o.tensor_type().clone();
            let data: Data = o.data().clone();
            Tensor::from_data(ty, data, Some(node), true)
        })
        .collect()
}

/// Gradients as autodiff wants them: `None` for integer inputs.
fn per_input(inputs: &[Tensor], grads: Vec<Tensor>) -> Vec<Option<Tensor>> {
    inputs
        .iter()
        .zip(grads)
        .map(|(x, g)| x.dtype().is_float().then_some(g))
        .collect()
}

/// Never applied as an op: these primitives only carry a gradient rule.
fn not_an_op(name: &str) -> String {
    format!("{name} is a gradient rule, not an operator to run")
}

/// The gradient of output `output` of a `Cond` whose inputs are `[pred, then..., else...]`.
#[derive(Debug)]
pub(crate) struct CondBackward {
    pub then_branch: Arc<Graph>,
    pub else_branch: Arc<Graph>,
    pub then_inputs: usize,
    pub output: usize,
}

impl CustomPrimitive for CondBackward {
    fn name(&self) -> &str {
        "CondGrad"
    }
    fn infer(&self, _: &[&TensorType]) -> std::result::Result<TensorType, String> {
        Err(not_an_op(self.name()))
    }
    fn eval(&self, _: &[&Tensor]) -> std::result::Result<Tensor, String> {
        Err(not_an_op(self.name()))
    }
    fn vjp(&self, inputs: &[Tensor], _out: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let (pred, operands) = (&inputs[0], &inputs[1..]);
        let nt = self.then_inputs;
        let cotangents = |g: &Tensor, outputs: usize| {
            let mut c = vec![None; outputs];
            c[self.output] = Some(g.clone());
            c
        };
        let all: Vec<Tensor> = operands.iter().cloned().chain([grad.clone()]).collect();
        let grads = super::cond(
            pred,
            &all,
            |a| {
                let (t, rest) = a.split_at(nt);
                let (e, g) = rest.split_at(rest.len() - 1);
                let c = cotangents(&g[0], self.then_branch.outputs.len());
                let mut out = graph_vjp(&self.then_branch, t, &c)?;
                out.extend(e.iter().map(Tensor::zeros_like));
                Ok(out)
            },
            |a| {
                let (t, rest) = a.split_at(nt);
                let (e, g) = rest.split_at(rest.len() - 1);
                let c = cotangents(&g[0], self.else_branch.outputs.len());
                let mut out: Vec<Tensor> = t.iter().map(Tensor::zeros_like).collect();
                out.extend(graph_vjp(&self.else_branch, e, &c)?);
                Ok(out)
            },
        )?;
        let mut result = vec![None];
        result.extend(per_input(operands, grads));
        Ok(result)
    }
}

/// The sizes of a scan: `carries` carried values, `sequences` sequences read row by row,
/// `captures` outer values the step read, `steps` rows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScanShape {
    pub carries: usize,
    pub sequences: usize,
    pub captures: usize,
    pub steps: usize,
}

/// The gradient of output `output` (a final carry, or a stacked `y`) of a scan whose
/// inputs are `[init..., xs..., captures..., tapes...]`, `tapes` holding each step's
/// carries before it ran.
#[derive(Debug)]
pub(crate) struct ScanBackward {
    pub step: Arc<Graph>,
    pub shape: ScanShape,
    pub output: usize,
}

fn row(x: &Tensor, i: &Tensor) -> Result<Tensor> {
    x.gather(&i.reshape(&[1])?, 0)?.squeeze(&[0])
}

impl CustomPrimitive for ScanBackward {
    fn name(&self) -> &str {
        "ScanGrad"
    }
    fn infer(&self, _: &[&TensorType]) -> std::result::Result<TensorType, String> {
        Err(not_an_op(self.name()))
    }
    fn eval(&self, _: &[&Tensor]) -> std::result::Result<Tensor, String> {
        Err(not_an_op(self.name()))
    }
    fn vjp(&self, inputs: &[Tensor], _out: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let ScanShape {
            carries: nc,
            sequences: nx,
            captures: ncap,
            steps: n,
        } = self.shape;
        let (init, rest) = inputs.split_at(nc);
        let (xs, rest) = rest.split_at(nx);
        let (caps, tapes) = rest.split_at(ncap);
        let outputs = self.step.outputs.len();
        // State of the reverse loop: the carries' gradients, the sequences' gradients
        // (filled row by row), and the captures' (summed over the steps).
        let mut state: Vec<Tensor> = init.iter().map(Tensor::zeros_like).collect();
        if self.output < nc {
            state[self.output] = grad.clone();
        }
        state.extend(xs.iter().map(Tensor::zeros_like));
        state.extend(caps.iter().map(Tensor::zeros_like));
        let last = Tensor::scalar(n as i64 - 1);
        let reversed = super::fori_loop(
            0,
            n as i64,
            |r, s| {
                let i = last.sub(r)?;
                // Each carry as the step took it (a Bool carry's tape holds Int32).
                let mut args = Vec::with_capacity(self.step.inputs.len());
                for (t, &v) in tapes.iter().zip(&self.step.inputs) {
                    args.push(row(t, &i)?.cast(self.step.nodes[v].ty().dtype)?);
                }
                for x in xs {
                    args.push(row(x, &i)?);
                }
                args.extend(caps.iter().cloned());
                let mut cot: Vec<Option<Tensor>> = s[..nc].iter().cloned().map(Some).collect();
                cot.resize(outputs, None);
                if self.output >= nc {
                    cot[self.output] = Some(row(grad, &i)?);
                }
                let g = graph_vjp(&self.step, &args, &cot)?;
                let mut next: Vec<Tensor> = g[..nc].to_vec();
                let at = i.reshape(&[1])?;
                for (buf, gx) in s[nc..nc + nx].iter().zip(&g[nc..nc + nx]) {
                    next.push(buf.scatter_add(&at, &gx.unsqueeze(0)?, 0)?);
                }
                for (acc, gc) in s[nc + nx..].iter().zip(&g[nc + nx..]) {
                    next.push(acc.add(gc)?);
                }
                Ok(next)
            },
            &state,
        )?;
        let mut result = per_input(&inputs[..nc + nx + ncap], reversed);
        result.extend(tapes.iter().map(|_| None));
        Ok(result)
    }
}
