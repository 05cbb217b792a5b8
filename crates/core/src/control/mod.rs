//! Control flow that survives tracing: [`cond`], [`while_loop`], [`while_loop_bounded`],
//! [`fori_loop`] and [`scan`]. In PyNative mode they simply run; inside a trace, a
//! predicate that is not known yet turns the branches or the loop body into sub-graphs of
//! one `Cond`/`While` node, instead of baking in whichever branch the tracing run happened
//! to take. Gradients flow through all of them in both modes ([`grad`]), except through
//! a traced `while_loop` without a bound on its trips, which is refused.
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

mod grad;
mod replay;

use std::sync::Arc;

use crate::depth::is_grad_enabled;
use crate::error::{Error, Result, SourceLocation};
use crate::ir::NodeKind;
use crate::tensor::{Tensor, TensorType};
use crate::trace::{self, record_multi, trace_subgraph, values_of};
use grad::{CondBackward, ScanBackward, ScanShape, link_outputs};

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

/// Whether a gradient may flow from `ts` (recording on, some of them watched).
fn needs_gradient(ts: &[Tensor]) -> bool {
    is_grad_enabled() && ts.iter().any(|t| t.requires_grad())
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
    let differentiable = needs_gradient(&[then_all.clone(), else_all.clone()].concat());
    let branches = differentiable.then(|| (Arc::new(then_g.clone()), Arc::new(else_g.clone())));
    let pred_v = values_of(std::slice::from_ref(pred), loc)?[0];
    let kind = NodeKind::Cond {
        pred: pred_v,
        then_args: values_of(&then_all, loc)?,
        else_args: values_of(&else_all, loc)?,
        then_branch: Box::new(then_g),
        else_branch: Box::new(else_g),
    };
    let outputs = record_multi(kind, then_out, "Cond", loc)?;
    let Some((then_branch, else_branch)) = branches else {
        return Ok(outputs);
    };
    let inputs: Vec<Tensor> = [vec![pred.clone()], then_all.clone(), else_all].concat();
    Ok(link_outputs(outputs, &inputs, |output| {
        Arc::new(CondBackward {
            then_branch: then_branch.clone(),
            else_branch: else_branch.clone(),
            then_inputs: then_all.len(),
            output,
        })
    }))
}

/// `state = init; while cond_fn(state) { state = body_fn(state) }`. Inside a trace the
/// loop is staged as one `While` node; `body_fn` must keep the state's types. Gradients
/// flow through it in PyNative mode; traced, its trip count is unknown, so they are
/// refused: [`while_loop_bounded`] takes a bound and is differentiable in both modes.
#[track_caller]
pub fn while_loop<C, B>(cond_fn: C, body_fn: B, init: &[Tensor]) -> Result<Vec<Tensor>>
where
    C: Fn(&[Tensor]) -> Result<Tensor>,
    B: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    staged_while(cond_fn, body_fn, init, Location::caller(), true)
}

/// The loop, run or staged. With `refuse`, a staged loop through which a gradient could
/// flow is an error (a loop that carries its own gradient rule passes `false`).
fn staged_while<C, B>(
    cond_fn: C,
    body_fn: B,
    init: &[Tensor],
    loc: SourceLocation,
    refuse: bool,
) -> Result<Vec<Tensor>>
where
    C: Fn(&[Tensor]) -> Result<Tensor>,
    B: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
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
    if refuse && needs_gradient(&[init.to_vec(), cond_caps.clone(), body_caps.clone()].concat()) {
        return Err(Error::Invalid {
            message: "while_loop: a traced while_loop has no known trip count, so gradients cannot flow through it; give a bound with while_loop_bounded, or use fori_loop or scan".into(),
            location: Some(loc),
        });
    }
    let kind = NodeKind::While {
        init: values_of(init, loc)?,
        cond_args: values_of(&cond_caps, loc)?,
        body_args: values_of(&body_caps, loc)?,
        cond: Box::new(cond_g),
        body: Box::new(body_g),
    };
    record_multi(kind, types, "While", loc)
}

/// [`while_loop`] that stops after at most `max_trips` trips of the body. With the bound,
/// gradients flow through it in Graph mode too: traced, it runs `max_trips` steps, each
/// keeping the state once the condition is false (so the body also runs on the final
/// state, and must stay finite there). Running longer than the bound is an error.
#[track_caller]
pub fn while_loop_bounded<C, B>(
    cond_fn: C,
    body_fn: B,
    init: &[Tensor],
    max_trips: usize,
) -> Result<Vec<Tensor>>
where
    C: Fn(&[Tensor]) -> Result<Tensor>,
    B: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    let loc = Location::caller();
    if !trace::is_tracing() {
        let trips = std::cell::Cell::new(0usize);
        return staged_while(
            |s| {
                let c = cond_fn(s)?;
                if trips.get() >= max_trips && c.numel() == 1 && c.item()? != 0.0 {
                    return Err(Error::Invalid {
                        message: format!(
                            "while_loop_bounded: the loop still runs after its bound of {max_trips} trips"
                        ),
                        location: Some(loc),
                    });
                }
                Ok(c)
            },
            |s| {
                trips.set(trips.get() + 1);
                body_fn(s)
            },
            init,
            loc,
            false,
        );
    }
    // A fixed number of steps: `go` becomes false once the condition is; from then on
    // every step keeps the state it was given.
    let mut state = vec![Tensor::scalar(true)];
    state.extend_from_slice(init);
    let out = fori_loop(
        0,
        max_trips as i64,
        |_, s| {
            let c = cond_fn(&s[1..])?;
            check_scalar(&c, "while_loop_bounded", loc)?;
            let c = c.reshape(&[])?.cast(DType::Bool)?;
            // go = running and the condition holds
            let go = Tensor::select(&s[0], &c, &Tensor::scalar(false))?;
            let next = body_fn(&s[1..])?;
            let mut kept = vec![go.clone()];
            for (n, old) in next.iter().zip(&s[1..]) {
                kept.push(Tensor::select(&go, n, old)?);
            }
            Ok(kept)
        },
        &state,
    )?;
    Ok(out[1..].to_vec())
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
    if is_grad_enabled() {
        // What the body reads from outside decides whether a gradient flows: trace it
        // once to find out; if one does, run it as a scan over the indices, which carries
        // its gradient rule.
        let index = TensorType::new(&[], DType::I64);
        let types = [vec![index], types_of(init)].concat();
        let (_, caps) = trace_subgraph("fori_probe", &types, |a| body_fn(&a[0], &a[1..]))?;
        if needs_gradient(&[init.to_vec(), caps].concat()) {
            let steps = Tensor::arange(lower as f64, upper as f64, 1.0, DType::I64)?;
            return scan(|c, i| Ok((body_fn(&i[0], c)?, vec![])), init, &[steps]);
        }
    }
    staged_fori(lower, upper, body_fn, init, loc)
}

/// The loop staged as a `While` over `(i, state)`, without a gradient rule.
fn staged_fori<B>(
    lower: i64,
    upper: i64,
    body_fn: B,
    init: &[Tensor],
    loc: SourceLocation,
) -> Result<Vec<Tensor>>
where
    B: Fn(&Tensor, &[Tensor]) -> Result<Vec<Tensor>>,
{
    let upper_t = Tensor::scalar(upper);
    let mut full = vec![Tensor::scalar(lower)];
    full.extend_from_slice(init);
    let out = staged_while(
        |s| s[0].less(&upper_t),
        |s| {
            let mut next = vec![s[0].add(&Tensor::scalar(1i64))?];
            next.extend(body_fn(&s[0], &s[1..])?);
            Ok(next)
        },
        &full,
        loc,
        false,
    )?;
    Ok(out[1..].to_vec())
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
    // Staged: trace one step to learn the output types (and what the step reads from
    // outside), then accumulate the ys into zero-initialised buffers with ScatterAdd at
    // row i. Where a gradient flows, each step's carries are kept too (the tape the
    // gradient rule reads).
    let probe_x: Vec<TensorType> = xs
        .iter()
        .map(|x| TensorType::new(&x.shape()[1..], x.dtype()))
        .collect();
    let carry_types = types_of(init);
    let (probe, caps) =
        trace_subgraph("scan_step", &[carry_types.clone(), probe_x].concat(), |a| {
            let (c, y) = f(&a[..init.len()], &a[init.len()..])?;
            Ok([c, y].concat())
        })?;
    let y_types: Vec<TensorType> = output_types(&probe)[init.len()..].to_vec();
    let differentiable = needs_gradient(&[init, xs, &caps[..]].concat());
    let rows = |t: &TensorType| Tensor::zeros(&[&[n][..], &t.shape[..]].concat(), t.dtype);
    let buffers: Vec<Tensor> = y_types.iter().map(rows).collect::<Result<_>>()?;
    // Bool carries (flags) are kept as Int32: ScatterAdd adds numbers.
    let tape_type = |t: &TensorType| match t.dtype {
        DType::Bool => TensorType::new(&t.shape, DType::I32),
        _ => t.clone(),
    };
    let tapes: Vec<Tensor> = if differentiable {
        carry_types
            .iter()
            .map(|t| rows(&tape_type(t)))
            .collect::<Result<_>>()?
    } else {
        vec![]
    };
    let (nc, ny) = (init.len(), buffers.len());
    let state: Vec<Tensor> = init.iter().chain(&buffers).chain(&tapes).cloned().collect();
    let out = staged_fori(
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
            for (tape, carry) in s[nc + ny..].iter().zip(&s[..nc]) {
                let kept = carry.cast(tape.dtype())?.unsqueeze(0)?;
                next.push(tape.scatter_add(&idx, &kept, 0)?);
            }
            Ok(next)
        },
        &state,
        loc,
    )?;
    let (results, kept) = out.split_at(nc + ny);
    if !differentiable {
        return Ok(results.to_vec());
    }
    let step = Arc::new(probe);
    let shape = ScanShape {
        carries: nc,
        sequences: xs.len(),
        captures: caps.len(),
        steps: n,
    };
    let inputs: Vec<Tensor> = [init, xs, &caps[..], kept].concat();
    Ok(link_outputs(results.to_vec(), &inputs, |output| {
        Arc::new(ScanBackward {
            step: step.clone(),
            shape,
            output,
        })
    }))
}
