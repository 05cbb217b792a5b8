//! Reverse-mode autodiff over the graph that eager ops record: MindSpore's functional
//! `grad` / `value_and_grad`, and PyTorch's `Tensor::backward`.
//!
//! Gradient rules are ordinary tensor code, so the gradients computed by [`grad`] are
//! themselves recorded and can be differentiated again (higher-order derivatives).
//!
//! ```
//! use spore_core::{autodiff::grad, Tensor};
//! // d/dx x^3 = 3x^2; d2/dx2 = 6x.
//! let f = |x: &[Tensor]| x[0].mul(&x[0])?.mul(&x[0]);
//! let df = grad(f, &[0]);
//! let d2f = grad(move |x: &[Tensor]| Ok(df(x)?.remove(0)), &[0]);
//! let x = Tensor::from_vec(vec![2.0f64], &[1]).unwrap();
//! assert_eq!(d2f(&[x]).unwrap()[0].item().unwrap(), 12.0);
//! ```

use std::collections::{HashMap, HashSet};

use crate::apply::{no_grad, with_grad_enabled};
use crate::depth::{depth, within};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Tensors reachable backwards from `roots` through recorded nodes, inputs before users.
fn topological_order(roots: &[Tensor]) -> Vec<Tensor> {
    let mut order = Vec::new();
    let mut visited = HashSet::new();
    // Iterative post-order DFS: deep networks must not overflow the stack.
    let mut stack: Vec<(Tensor, bool)> = roots.iter().map(|t| (t.clone(), false)).collect();
    while let Some((t, expanded)) = stack.pop() {
        if expanded {
            order.push(t);
            continue;
        }
        if !visited.insert(t.id()) {
            continue;
        }
        stack.push((t.clone(), true));
        if let Some(node) = t.grad_fn() {
            for input in &node.inputs {
                if input.requires_grad() && !visited.contains(&input.id()) {
                    stack.push((input.clone(), false));
                }
            }
        }
    }
    order
}

/// Gradients of `sum_i <seeds[i], outputs[i]>` with respect to each of `targets`
/// (`None` where no path connects them).
pub fn gradients(
    outputs: &[Tensor],
    seeds: &[Tensor],
    targets: &[Tensor],
) -> Result<Vec<Option<Tensor>>> {
    gradients_reporting(outputs, seeds, targets, None)
}

/// Called with a target's id and gradient as soon as that gradient is complete.
type OnComplete<'a> = Option<&'a mut dyn FnMut(u64, &Tensor) -> Result<()>>;

fn gradients_reporting(
    outputs: &[Tensor],
    seeds: &[Tensor],
    targets: &[Tensor],
    on_complete: OnComplete<'_>,
) -> Result<Vec<Option<Tensor>>> {
    let mut grads: HashMap<u64, Tensor> = HashMap::new();
    for (o, s) in outputs.iter().zip(seeds) {
        accumulate(&mut grads, o, s.clone())?;
    }
    let keep: HashSet<u64> = targets.iter().map(|t| t.id()).collect();
    crate::trace::with_gradient_scope(|| backward_pass(outputs, &keep, &mut grads, on_complete))?;
    Ok(targets
        .iter()
        .map(|t| grads.get(&t.id()).cloned())
        .collect())
}

/// Walks the recorded nodes from `outputs` backwards, accumulating into `grads`. With
/// `on_complete`, a kept tensor is reported once the last node reading it has run its
/// rule: from then on nothing adds to its gradient (data parallelism starts reducing it
/// there, while the rest of the backward pass runs).
fn backward_pass(
    outputs: &[Tensor],
    keep: &HashSet<u64>,
    grads: &mut HashMap<u64, Tensor>,
    mut on_complete: OnComplete<'_>,
) -> Result<()> {
    let order = topological_order(outputs);
    let mut readers_left: HashMap<u64, usize> = HashMap::new();
    if on_complete.is_some() {
        for t in &order {
            for input in t.grad_fn().map_or(&[][..], |n| &n.inputs[..]) {
                if input.requires_grad() && keep.contains(&input.id()) {
                    *readers_left.entry(input.id()).or_default() += 1;
                }
            }
        }
    }
    for t in order.iter().rev() {
        let Some(node) = t.grad_fn() else { continue };
        let g = if keep.contains(&t.id()) {
            grads.get(&t.id()).cloned()
        } else {
            grads.remove(&t.id())
        };
        if let Some(g) = g {
            let input_grads = node.op.vjp(&node.inputs, t, &g)?;
            for (input, ig) in node.inputs.iter().zip(input_grads) {
                if let (Some(ig), true) = (ig, input.requires_grad()) {
                    if ig.shape() != input.shape() {
                        return Err(Error::invalid(format!(
                            "{}: gradient rule returned shape {:?} for an input of shape {:?}",
                            node.op.name(),
                            ig.shape(),
                            input.shape()
                        )));
                    }
                    accumulate(grads, input, ig)?;
                }
            }
        }
        if let Some(report) = on_complete.as_deref_mut() {
            for input in &node.inputs {
                let Some(left) = readers_left.get_mut(&input.id()) else {
                    continue;
                };
                *left -= 1;
                if *left == 0
                    && let Some(g) = grads.get(&input.id())
                {
                    report(input.id(), g)?;
                }
            }
        }
    }
    Ok(())
}

fn accumulate(grads: &mut HashMap<u64, Tensor>, t: &Tensor, g: Tensor) -> Result<()> {
    let g = if g.dtype() != t.dtype() {
        g.cast(t.dtype())?
    } else {
        g
    };
    let sum = match grads.remove(&t.id()) {
        Some(prev) => prev.add(&g)?,
        None => g,
    };
    grads.insert(t.id(), sum);
    Ok(())
}

/// A handle on `x` that gradients can be asked for: an `Identity` node when `x` is itself
/// tracked (so outer derivatives still see through), else a new leaf.
fn watch(x: &Tensor) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return Err(Error::invalid(format!(
            "grad: cannot differentiate with respect to a {} tensor; only Float32/Float64 inputs have gradients",
            x.dtype()
        )));
    }
    if x.requires_grad() {
        with_grad_enabled(true, || x.identity())
    } else {
        Ok(x.with_requires_grad(true))
    }
}

/// What a differentiated function may return: one tensor or several.
pub trait Outputs {
    fn into_outputs(self) -> Vec<Tensor>;
}
impl Outputs for Tensor {
    fn into_outputs(self) -> Vec<Tensor> {
        vec![self]
    }
}
impl Outputs for Vec<Tensor> {
    fn into_outputs(self) -> Vec<Tensor> {
        self
    }
}
impl Outputs for (Tensor, Tensor) {
    fn into_outputs(self) -> Vec<Tensor> {
        vec![self.0, self.1]
    }
}
impl Outputs for (Tensor, Tensor, Tensor) {
    fn into_outputs(self) -> Vec<Tensor> {
        vec![self.0, self.1, self.2]
    }
}

/// Result of a [`value_and_grad`] call.
#[derive(Clone, Debug)]
pub struct ValueAndGrad {
    /// The function's (first) output.
    pub value: Tensor,
    /// With `has_aux`, the function's other outputs (not differentiated).
    pub aux: Vec<Tensor>,
    /// Gradients for the inputs at `grad_position`, in that order.
    pub input_grads: Vec<Tensor>,
    /// Gradients for `weights`, in that order.
    pub weight_grads: Vec<Tensor>,
}

/// MindSpore's `ops.value_and_grad(fn, grad_position, weights, has_aux)`.
///
/// Differentiates the first output (with `has_aux`) or the sum of all outputs (without),
/// each seeded with ones. `grad_position` selects inputs (`None`: no input gradients);
/// `weights` are tensors the function uses that were created with `requires_grad`
/// (parameters). Unused inputs and weights get zero gradients.
pub fn value_and_grad<F, O>(
    f: F,
    grad_position: Option<&[usize]>,
    weights: &[Tensor],
    has_aux: bool,
) -> impl Fn(&[Tensor]) -> Result<ValueAndGrad> + use<F, O>
where
    F: Fn(&[Tensor]) -> Result<O>,
    O: Outputs,
{
    let positions: Vec<usize> = grad_position.map(|p| p.to_vec()).unwrap_or_default();
    let weights: Vec<Tensor> = weights.to_vec();
    move |inputs: &[Tensor]| {
        value_and_grad_reporting(
            &f,
            Some(&positions),
            &weights,
            has_aux,
            inputs,
            &mut |_, _| Ok(()),
        )
    }
}

/// [`value_and_grad`] called at once on `inputs`, reporting each weight's gradient to
/// `on_weight_grad(index into weights, gradient)` as soon as the backward pass has
/// finished adding to it, while the rest of the pass still runs. Every weight is
/// reported exactly once, in the same order on every run of the same function; weights
/// no rule reached are reported last, with their zero gradients.
///
/// ```
/// use spore_core::{autodiff::value_and_grad_reporting, Tensor};
/// let w = Tensor::from_vec(vec![3.0f64], &[1]).unwrap().with_requires_grad(true);
/// let f = |x: &[Tensor]| x[0].mul(&x[1]);
/// let mut seen = vec![];
/// let out = value_and_grad_reporting(
///     &|x: &[Tensor]| f(&[x[0].clone(), w.clone()]), None, &[w.clone()], false,
///     &[Tensor::from_vec(vec![2.0f64], &[1]).unwrap()],
///     &mut |i, g| { seen.push((i, g.item()?)); Ok(()) },
/// ).unwrap();
/// assert_eq!(seen, [(0, 2.0)]);
/// assert_eq!(out.weight_grads[0].item().unwrap(), 2.0);
/// ```
pub fn value_and_grad_reporting<F, O>(
    f: &F,
    grad_position: Option<&[usize]>,
    weights: &[Tensor],
    has_aux: bool,
    inputs: &[Tensor],
    on_weight_grad: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
) -> Result<ValueAndGrad>
where
    F: Fn(&[Tensor]) -> Result<O>,
    O: Outputs,
{
    let positions = grad_position.unwrap_or_default();
    for (i, w) in weights.iter().enumerate() {
        if !w.requires_grad() {
            return Err(Error::invalid(format!(
                "value_and_grad: weight #{i} ({}) does not require grad; create it with requires_grad (a Parameter)",
                w.tensor_type()
            )));
        }
    }
    let mut watched = inputs.to_vec();
    for &p in positions {
        let Some(x) = inputs.get(p) else {
            return Err(Error::invalid(format!(
                "value_and_grad: grad_position {p} is out of range for {} inputs",
                inputs.len()
            )));
        };
        watched[p] = watch(x)?;
    }
    let outputs = with_grad_enabled(true, || {
        within(&crate::depth::DIFFERENTIATING, || f(&watched))
    })?
    .into_outputs();
    let Some(value) = outputs.first().cloned() else {
        return Err(Error::invalid(
            "value_and_grad: the function returned no outputs",
        ));
    };
    let (diff, aux): (Vec<Tensor>, Vec<Tensor>) = if has_aux {
        (vec![value.clone()], outputs[1..].to_vec())
    } else {
        (outputs.clone(), vec![])
    };
    let seeds: Vec<Tensor> = diff.iter().map(|o| o.ones_like()).collect();
    let mut targets: Vec<Tensor> = positions.iter().map(|&p| watched[p].clone()).collect();
    targets.extend(weights.iter().cloned());
    // Weights by tensor id (one tensor may be passed as several weights).
    let mut weight_slots: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, w) in weights.iter().enumerate() {
        weight_slots.entry(w.id()).or_default().push(i);
    }
    let mut reported = vec![false; weights.len()];
    let mut report = |id: u64, g: &Tensor| -> Result<()> {
        for &i in weight_slots.get(&id).map_or(&[][..], |v| &v[..]) {
            reported[i] = true;
            on_weight_grad(i, g)?;
        }
        Ok(())
    };
    // The backward pass is recorded only inside an outer differentiation (a higher
    // derivative needs it); at top level, recording it would keep every intermediate
    // gradient alive through the returned gradients' autodiff links (PyTorch's
    // `create_graph=False`; it was 300 MB of a ResNet-18 step).
    let record = depth(&crate::depth::DIFFERENTIATING) > 0;
    let grads = with_grad_enabled(record, || {
        gradients_reporting(&diff, &seeds, &targets, Some(&mut report))
    })?;
    let mut filled: Vec<Tensor> = grads
        .into_iter()
        .zip(&targets)
        .map(|(g, t)| g.unwrap_or_else(|| t.zeros_like()))
        .collect();
    let weight_grads = filled.split_off(positions.len());
    for (i, g) in weight_grads.iter().enumerate() {
        if !reported[i] {
            on_weight_grad(i, g)?;
        }
    }
    Ok(ValueAndGrad {
        value,
        aux,
        input_grads: filled,
        weight_grads,
    })
}

/// MindSpore's `ops.grad(fn, grad_position)`: the gradients of `f` (sum of its outputs)
/// with respect to the inputs at `grad_position`.
pub fn grad<F, O>(
    f: F,
    grad_position: &[usize],
) -> impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + use<F, O>
where
    F: Fn(&[Tensor]) -> Result<O>,
    O: Outputs,
{
    let vg = value_and_grad(f, Some(grad_position), &[], false);
    move |inputs: &[Tensor]| Ok(vg(inputs)?.input_grads)
}

impl Tensor {
    /// PyTorch-style backward pass: accumulates `d self / d leaf` into the `.grad()` of
    /// every leaf that requires grad. `self` must hold one element (a loss).
    #[track_caller]
    pub fn backward(&self) -> Result<()> {
        if self.numel() != 1 {
            return Err(Error::invalid_here(format!(
                "backward: expected a scalar (one-element) tensor, got shape {:?}; reduce it first (e.g. .sum())",
                self.shape()
            )));
        }
        if !self.requires_grad() {
            return Err(Error::invalid_here(
                "backward: this tensor does not require grad (no input was created with requires_grad)",
            ));
        }
        let order = topological_order(std::slice::from_ref(self));
        let leaves: Vec<Tensor> = order
            .into_iter()
            .filter(|t| t.grad_fn().is_none())
            .collect();
        // Like PyTorch without create_graph: the backward pass itself is not recorded.
        let grads =
            no_grad(|| gradients(std::slice::from_ref(self), &[self.ones_like()], &leaves))?;
        for (leaf, g) in leaves.iter().zip(grads) {
            if let Some(g) = g {
                let mut slot = leaf
                    .0
                    .grad
                    .lock()
                    .map_err(|_| Error::invalid("backward: gradient slot poisoned"))?;
                *slot = Some(match slot.take() {
                    Some(prev) => no_grad(|| prev.add(&g))?,
                    None => g,
                });
            }
        }
        Ok(())
    }
}
