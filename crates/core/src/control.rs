//! Control flow that survives tracing: [`cond`], [`while_loop`], [`fori_loop`] and
//! [`scan`]. In PyNative mode they simply run; inside a trace, a predicate that is not
//! known yet turns the branches or the loop body into sub-graphs of one `Cond`/`While`
//! node, instead of baking in whichever branch the tracing run happened to take.
//!
//! ```
//! use spore_core::{control::cond, Tensor};
//! let x = Tensor::from_vec(vec![-2.0f32], &[1]).unwrap();
//! let pred = x.sum(&[], false).unwrap().greater(&Tensor::scalar(0.0f32)).unwrap();
//! let y = cond(&pred, &[x], |v| Ok(vec![v[0].clone()]), |v| Ok(vec![v[0].neg()?])).unwrap();
//! assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![2.0]);
//! ```

use std::panic::Location;

use spore_kernels::DType;

use crate::apply::is_grad_enabled;
use crate::error::{Error, Result, SourceLocation};
use crate::ir::NodeKind;
use crate::tensor::{Tensor, TensorType};
use crate::trace::{self, record_multi, trace_subgraph, values_of};

fn types_of(ts: &[Tensor]) -> Vec<TensorType> {
    ts.iter().map(|t| t.tensor_type().clone()).collect()
}

fn output_types(g: &crate::ir::Graph) -> Vec<TensorType> {
    g.outputs.iter().map(|&o| g.nodes[o].ty().clone()).collect()
}

fn check_scalar(t: &Tensor, what: &str, loc: SourceLocation) -> Result<()> {
    if t.numel() != 1 {
        return Err(Error::Invalid {
            message: format!(
                "{what}: the predicate must have exactly one element, got shape {:?}",
                t.shape()
            ),
            location: Some(loc),
        });
    }
    Ok(())
}

/// Differentiating through a traced branch or loop is not implemented; refuse rather than
/// return silently wrong (zero) gradients.
fn refuse_gradients(what: &str, ts: &[Tensor], loc: SourceLocation) -> Result<()> {
    if is_grad_enabled() && ts.iter().any(|t| t.requires_grad()) {
        return Err(Error::Invalid {
            message: format!(
                "{what}: gradients through a traced {what} are not supported yet; differentiate in PyNative mode, or move the {what} outside the differentiated function"
            ),
            location: Some(loc),
        });
    }
    Ok(())
}

/// `then_fn(operands)` if `pred` (one element, non-zero) else `else_fn(operands)`. Both
/// branches must return the same number of tensors with the same types.
#[track_caller]
pub fn cond<F, G>(pred: &Tensor, operands: &[Tensor], then_fn: F, else_fn: G) -> Result<Vec<Tensor>>
where
    F: FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
    G: FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
{
    let loc = Location::caller();
    check_scalar(pred, "cond", loc)?;
    if !pred.is_symbolic() {
        return if pred.item()? != 0.0 {
            then_fn(operands)
        } else {
            else_fn(operands)
        };
    }
    let types = types_of(operands);
    let (then_g, then_caps) = trace_subgraph("cond_then", &types, then_fn)?;
    let (else_g, else_caps) = trace_subgraph("cond_else", &types, else_fn)?;
    let (then_out, else_out) = (output_types(&then_g), output_types(&else_g));
    if then_out != else_out {
        return Err(Error::Invalid {
            message: format!(
                "cond: the branches return different types: then {then_out:?}, else {else_out:?}"
            ),
            location: Some(loc),
        });
    }
    let then_all: Vec<Tensor> = operands.iter().chain(&then_caps).cloned().collect();
    let else_all: Vec<Tensor> = operands.iter().chain(&else_caps).cloned().collect();
    refuse_gradients("cond", &[then_all.clone(), else_all.clone()].concat(), loc)?;
    let pred_v = values_of(std::slice::from_ref(pred), loc)?[0];
    let kind = NodeKind::Cond {
        pred: pred_v,
        then_args: values_of(&then_all, loc)?,
        else_args: values_of(&else_all, loc)?,
        then_branch: Box::new(then_g),
        else_branch: Box::new(else_g),
    };
    record_multi(kind, then_out, "Cond", loc)
}

/// `state = init; while cond_fn(state) { state = body_fn(state) }`. Inside a trace the
/// loop is staged as one `While` node; `body_fn` must keep the state's types.
#[track_caller]
pub fn while_loop<C, B>(cond_fn: C, body_fn: B, init: &[Tensor]) -> Result<Vec<Tensor>>
where
    C: Fn(&[Tensor]) -> Result<Tensor>,
    B: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    let loc = Location::caller();
    if !trace::is_tracing() {
        let mut state = init.to_vec();
        loop {
            let c = cond_fn(&state)?;
            check_scalar(&c, "while_loop", loc)?;
            if c.item()? == 0.0 {
                return Ok(state);
            }
            let next = body_fn(&state)?;
            if types_of(&next) != types_of(&state) {
                return Err(Error::Invalid {
                    message: format!(
                        "while_loop: the body changed the state from {:?} to {:?}",
                        types_of(&state),
                        types_of(&next)
                    ),
                    location: Some(loc),
                });
            }
            state = next;
        }
    }
    let types = types_of(init);
    let (cond_g, cond_caps) = trace_subgraph("while_cond", &types, |s| Ok(vec![cond_fn(s)?]))?;
    let (body_g, body_caps) = trace_subgraph("while_body", &types, |s| body_fn(s))?;
    let cond_out = output_types(&cond_g);
    if cond_out.len() != 1 || cond_out[0].numel() != 1 {
        return Err(Error::Invalid {
            message: format!(
                "while_loop: the condition must return one single-element tensor, got {cond_out:?}"
            ),
            location: Some(loc),
        });
    }
    if output_types(&body_g) != types {
        return Err(Error::Invalid {
            message: format!(
                "while_loop: the body returns {:?} but the state is {types:?}",
                output_types(&body_g)
            ),
            location: Some(loc),
        });
    }
    refuse_gradients(
        "while_loop",
        &[init.to_vec(), cond_caps.clone(), body_caps.clone()].concat(),
        loc,
    )?;
    let kind = NodeKind::While {
        init: values_of(init, loc)?,
        cond_args: values_of(&cond_caps, loc)?,
        body_args: values_of(&body_caps, loc)?,
        cond: Box::new(cond_g),
        body: Box::new(body_g),
    };
    record_multi(kind, types, "While", loc)
}

/// `for i in lower..upper { state = body_fn(i, state) }`, with `i` an Int64 scalar tensor.
#[track_caller]
pub fn fori_loop<B>(lower: i64, upper: i64, body_fn: B, init: &[Tensor]) -> Result<Vec<Tensor>>
where
    B: Fn(&Tensor, &[Tensor]) -> Result<Vec<Tensor>>,
{
    let loc = Location::caller();
    if !trace::is_tracing() {
        let mut state = init.to_vec();
        for i in lower..upper {
            state = body_fn(&Tensor::scalar(i), &state)?;
        }
        return Ok(state);
    }
    let upper_t = Tensor::scalar(upper);
    let mut full = vec![Tensor::scalar(lower)];
    full.extend_from_slice(init);
    let out = while_loop_at(
        |s| s[0].less(&upper_t),
        |s| {
            let mut next = vec![s[0].add(&Tensor::scalar(1i64))?];
            next.extend(body_fn(&s[0], &s[1..])?);
            Ok(next)
        },
        &full,
        loc,
    )?;
    Ok(out[1..].to_vec())
}

fn while_loop_at<C, B>(
    cond_fn: C,
    body_fn: B,
    init: &[Tensor],
    loc: SourceLocation,
) -> Result<Vec<Tensor>>
where
    C: Fn(&[Tensor]) -> Result<Tensor>,
    B: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    // Keep the user's call site in errors and IR by re-entering with it.
    let _ = loc;
    while_loop(cond_fn, body_fn, init)
}

/// `carry, y_i = f(carry, xs[i])` over the first axis of every tensor in `xs`; returns the
/// final carry followed by the `y`s stacked along a new first axis.
#[track_caller]
pub fn scan<F>(f: F, init: &[Tensor], xs: &[Tensor]) -> Result<Vec<Tensor>>
where
    F: Fn(&[Tensor], &[Tensor]) -> Result<(Vec<Tensor>, Vec<Tensor>)>,
{
    let loc = Location::caller();
    let n = match xs.first() {
        Some(x) if x.rank() > 0 => x.shape()[0],
        _ => {
            return Err(Error::Invalid {
                message: "scan: expected at least one sequence with a leading axis".into(),
                location: Some(loc),
            });
        }
    };
    if let Some(bad) = xs.iter().find(|x| x.rank() == 0 || x.shape()[0] != n) {
        return Err(Error::Invalid {
            message: format!(
                "scan: every sequence needs leading length {n}, got shape {:?}",
                bad.shape()
            ),
            location: Some(loc),
        });
    }
    let slice = |x: &Tensor, i: &Tensor| -> Result<Tensor> {
        x.gather(&i.reshape(&[1])?, 0)?.squeeze(&[0])
    };
    if !trace::is_tracing() {
        let mut carry = init.to_vec();
        let mut ys: Vec<Vec<Tensor>> = vec![];
        for i in 0..n {
            let xi: Vec<Tensor> = xs
                .iter()
                .map(|x| slice(x, &Tensor::scalar(i as i64)))
                .collect::<Result<_>>()?;
            let (c, y) = f(&carry, &xi)?;
            carry = c;
            ys.push(y);
        }
        let k = ys.first().map(|y| y.len()).unwrap_or(0);
        let mut out = carry;
        for j in 0..k {
            let col: Vec<&Tensor> = ys.iter().map(|y| &y[j]).collect();
            out.push(Tensor::stack(&col, 0)?);
        }
        return Ok(out);
    }
    // Staged: trace one step to learn the output types, then accumulate the ys into
    // zero-initialised buffers with ScatterAdd at row i.
    let probe_x: Vec<TensorType> = xs
        .iter()
        .map(|x| TensorType::new(&x.shape()[1..], x.dtype()))
        .collect();
    let carry_types = types_of(init);
    let (probe, _) = trace_subgraph(
        "scan_probe",
        &[carry_types.clone(), probe_x].concat(),
        |a| {
            let (c, y) = f(&a[..init.len()], &a[init.len()..])?;
            Ok([c, y].concat())
        },
    )?;
    let y_types: Vec<TensorType> = output_types(&probe)[init.len()..].to_vec();
    let buffers: Vec<Tensor> = y_types
        .iter()
        .map(|t| Tensor::zeros(&[&[n][..], &t.shape[..]].concat(), t.dtype))
        .collect::<Result<_>>()?;
    let (nc, ny) = (init.len(), buffers.len());
    let state: Vec<Tensor> = init.iter().chain(&buffers).cloned().collect();
    let out = fori_loop(
        0,
        n as i64,
        |i, s| {
            let xi: Vec<Tensor> = xs.iter().map(|x| slice(x, i)).collect::<Result<_>>()?;
            let (c, y) = f(&s[..nc], &xi)?;
            let idx = i.reshape(&[1])?.cast(DType::I64)?;
            let mut next = c;
            for (buf, yv) in s[nc..nc + ny].iter().zip(&y) {
                next.push(buf.scatter_add(&idx, &yv.unsqueeze(0)?, 0)?);
            }
            Ok(next)
        },
        &state,
    )?;
    Ok(out)
}
