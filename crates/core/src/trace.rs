//! Tracing: running ordinary tensor code on symbolic tensors to record a [`Graph`].
//!
//! While a trace is active on a thread, an operation with a symbolic input appends a node
//! to the graph instead of computing; operations on concrete tensors still compute (that
//! is constant folding at trace time). Parameters read inside the trace become graph
//! inputs, assignments to them graph updates, and random ops take fresh keys per run.
//! Cells push scope names ([`with_scope`]) so that nodes get MindSpore's full names.
//!
//! ```
//! use spore_core::{trace::{trace, with_scope}, DType, TensorType};
//! let g = trace("f", &[TensorType::new(&[3], DType::F32)], |x| {
//!     with_scope("network", || Ok(vec![x[0].exp()?.add(&x[0])?]))
//! }).unwrap();
//! assert_eq!(g.nodes[1].name, "Default/network/Exp-op0");
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::depth::with_grad_enabled;
use crate::error::{Error, Result, SourceLocation};
use crate::ir::{Graph, NodeKind, ValueId};
use crate::op::Op;
use crate::parameter::Parameter;
pub use crate::scope::{current_scope, eager_op_name, with_gradient_scope, with_scope};
use crate::tensor::{Data, Tensor, TensorType};
use spore_kernels::DType;

struct TraceState {
    id: u64,
    graph: Graph,
    /// Concrete tensors already captured as constants (by tensor id).
    constants: HashMap<u64, ValueId>,
    /// Parameter id -> (index in graph.params, current value inside the trace, assigned?).
    params: HashMap<u64, (usize, Option<Tensor>, bool)>,
    op_counter: usize,
    /// For a sub-graph (control-flow branch or body): outer tensors it read, in the order
    /// of the extra inputs they became, and their ids by (trace, value).
    captures: Vec<Tensor>,
    captured: HashMap<(u64, usize), ValueId>,
}

thread_local! {
    /// The active traces, innermost last (sub-graphs of control flow nest).
    static TRACE: RefCell<Vec<TraceState>> = const { RefCell::new(Vec::new()) };
}

static NEXT_TRACE: AtomicU64 = AtomicU64::new(1);

/// Whether a trace is being recorded on this thread.
pub fn is_tracing() -> bool {
    TRACE.with(|t| !t.borrow().is_empty())
}

/// Runs `f` on the innermost trace and the ids of the traces around it.
fn with_state<R>(f: impl FnOnce(&mut TraceState, &[u64]) -> R) -> Option<R> {
    TRACE.with(|t| {
        let mut stack = t.borrow_mut();
        let outer: Vec<u64> = stack.iter().rev().skip(1).map(|s| s.id).collect();
        stack.last_mut().map(|st| f(st, &outer))
    })
}

fn escaped(loc: Option<SourceLocation>) -> Error {
    Error::Invalid {
        message: "a tensor produced while tracing was used outside its traced function; return it from the function instead".into(),
        location: loc,
    }
}

/// The graph value for `t` in the active trace (captured concrete tensors become constants).
fn value_of(
    st: &mut TraceState,
    outer: &[u64],
    t: &Tensor,
    loc: Option<SourceLocation>,
) -> Result<ValueId> {
    match t.data() {
        Data::Symbolic { trace, value } if *trace == st.id => Ok(*value),
        // A value of an enclosing trace: becomes an extra input of this sub-graph.
        Data::Symbolic { trace, value } if outer.contains(trace) => {
            if let Some(&v) = st.captured.get(&(*trace, *value)) {
                return Ok(v);
            }
            let i = st.graph.inputs.len();
            let v = st.graph.push(
                NodeKind::Input(i),
                vec![t.tensor_type().clone()],
                format!("capture{}", st.captures.len()),
                loc,
            );
            st.graph.inputs.push(v);
            st.captures.push(t.clone());
            st.captured.insert((*trace, *value), v);
            Ok(v)
        }
        Data::Symbolic { .. } => Err(escaped(loc)),
        Data::Concrete(_) => {
            if let Some(&v) = st.constants.get(&t.id()) {
                return Ok(v);
            }
            let name = format!("{}/Constant-c{}", current_scope(), st.constants.len());
            let v = st.graph.push(
                NodeKind::Constant(t.detach()),
                vec![t.tensor_type().clone()],
                name,
                loc,
            );
            // Keep the original alive through the node so its id cannot be reused.
            st.constants.insert(t.id(), v);
            Ok(v)
        }
    }
}

fn symbolic(st: &TraceState, ty: TensorType, value: ValueId, requires_grad: bool) -> Tensor {
    Tensor::from_data(
        ty,
        Data::Symbolic {
            trace: st.id,
            value,
        },
        None,
        requires_grad,
    )
}

/// Records `op` applied to `inputs` (result type `ty`) and returns the symbolic data of
/// the result. Errors if no trace is active (a traced tensor escaped).
pub(crate) fn record(
    op: &Op,
    inputs: &[&Tensor],
    ty: &TensorType,
    loc: SourceLocation,
) -> Result<Data> {
    with_state(|st, outer| {
        let args = inputs
            .iter()
            .map(|t| value_of(st, outer, t, Some(loc)))
            .collect::<Result<Vec<_>>>()?;
        let name = format!("{}/{}-op{}", current_scope(), op.name(), st.op_counter);
        st.op_counter += 1;
        let v = st.graph.push(
            NodeKind::Op {
                op: op.clone(),
                args,
            },
            vec![ty.clone()],
            name,
            Some(loc),
        );
        Ok(Data::Symbolic {
            trace: st.id,
            value: v,
        })
    })
    .unwrap_or_else(|| Err(escaped(Some(loc))))
}

/// A parameter's reads and writes: plain storage outside a trace, graph values and
/// updates inside one. Defined here, beside the trace they consult, so that the
/// parameter type itself (which graphs hold) does not depend on tracing.
impl Parameter {
    /// The current value: the stored tensor, or inside a trace the graph value standing
    /// for it.
    pub fn value(&self) -> Tensor {
        if is_tracing() {
            return read_parameter(self);
        }
        self.stored()
    }

    /// Replaces the value; the new value must have the same shape and dtype.
    #[track_caller]
    pub fn assign(&self, value: &Tensor) -> Result<()> {
        let current = self.tensor_type();
        if value.tensor_type() != &current {
            return Err(Error::invalid_here(format!(
                "Parameter {}: cannot assign a {} value to a {} parameter",
                self.name(),
                value.tensor_type(),
                current
            )));
        }
        let value = &crate::conditional_assign::guarded(value, || self.value())?;
        if is_tracing() {
            return assign_parameter(self, value);
        }
        if value.is_symbolic() {
            return Err(Error::invalid_here(format!(
                "Parameter {}: cannot store a traced tensor outside its trace",
                self.name()
            )));
        }
        self.store(value.clone());
        Ok(())
    }
}

/// The value of `p` inside the active trace (registering it as a graph input of the
/// outermost trace; sub-graphs capture it from there).
pub(crate) fn read_parameter(p: &Parameter) -> Tensor {
    TRACE.with(|t| {
        let mut stack = t.borrow_mut();
        match stack.first_mut() {
            Some(root) => read_parameter_in(root, p),
            None => p.stored(),
        }
    })
}

fn read_parameter_in(st: &mut TraceState, p: &Parameter) -> Tensor {
    if let Some((_, Some(current), _)) = st.params.get(&p.id()) {
        return current.clone();
    }
    let index = match st.params.get(&p.id()) {
        Some((i, _, _)) => *i,
        None => {
            st.graph.params.push(p.clone());
            st.graph.params.len() - 1
        }
    };
    let ty = p.tensor_type();
    let v = st
        .graph
        .push(NodeKind::Parameter(index), vec![ty.clone()], p.name(), None);
    let t = symbolic(st, ty, v, p.requires_grad());
    st.params.insert(p.id(), (index, Some(t.clone()), false));
    t
}

/// Records `p = value` inside the active trace: later reads see `value`, and the graph
/// stores it back into `p` after each run.
pub(crate) fn assign_parameter(p: &Parameter, value: &Tensor) -> Result<()> {
    if TRACE.with(|t| t.borrow().len() > 1) {
        return Err(Error::invalid(format!(
            "Parameter {}: assigning inside a cond/while_loop branch is not supported; return the new value and assign it after the loop",
            p.name()
        )));
    }
    with_state(|st, _| {
        let index = match st.params.get(&p.id()) {
            Some((i, _, _)) => *i,
            None => {
                st.graph.params.push(p.clone());
                st.graph.params.len() - 1
            }
        };
        st.params.insert(p.id(), (index, Some(value.clone()), true));
    })
    .ok_or_else(|| Error::invalid("internal: assign_parameter outside a trace"))
}

/// A fresh random key: a new graph input inside a trace (fed anew at every run), else a
/// concrete key from the global generator.
pub fn random_key() -> Tensor {
    // Keys are inputs of the outermost graph, so that one run feeds them all.
    let root = TRACE.with(|t| {
        let mut stack = t.borrow_mut();
        stack.first_mut().map(|st| {
            let k = st.graph.num_keys;
            st.graph.num_keys += 1;
            let ty = TensorType::new(&[], DType::I64);
            let v = st.graph.push(
                NodeKind::RandomKey(k),
                vec![ty.clone()],
                format!("{}/RandomKey-k{k}", current_scope()),
                None,
            );
            symbolic(st, ty, v, false)
        })
    });
    root.unwrap_or_else(|| Tensor::scalar(crate::rng::next_key() as i64))
}

/// Traces `f` on symbolic inputs of `inputs`' types and returns the recorded graph.
///
/// `f` runs once, with gradient recording on, so `grad`/`value_and_grad` inside it emit
/// their backward computation into the same graph. Traces do not nest: code that may run
/// inside a trace (such as `jit`) should check [`is_tracing`] and call through directly
/// (control-flow combinators use [`trace_subgraph`]).
pub fn trace<F>(name: &str, inputs: &[TensorType], f: F) -> Result<Graph>
where
    F: FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
{
    if is_tracing() {
        return Err(Error::invalid(format!(
            "trace({name}): a trace is already active on this thread"
        )));
    }
    Ok(run_trace(name, inputs, f)?.0)
}

/// Traces `f` as a sub-graph of the active trace. Outer values it reads become extra
/// inputs after the declared ones; they are returned (as outer tensors) to pass at the
/// call site.
pub fn trace_subgraph<F>(name: &str, inputs: &[TensorType], f: F) -> Result<(Graph, Vec<Tensor>)>
where
    F: FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
{
    if !is_tracing() {
        return Err(Error::invalid(format!(
            "trace_subgraph({name}): no trace is active"
        )));
    }
    run_trace(name, inputs, f)
}

fn run_trace<F>(name: &str, inputs: &[TensorType], f: F) -> Result<(Graph, Vec<Tensor>)>
where
    F: FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
{
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            TRACE.with(|t| t.borrow_mut().pop());
        }
    }
    let id = NEXT_TRACE.fetch_add(1, Ordering::Relaxed);
    let mut state = TraceState {
        id,
        graph: Graph {
            name: name.to_string(),
            ..Graph::default()
        },
        constants: HashMap::new(),
        params: HashMap::new(),
        op_counter: 0,
        captures: Vec::new(),
        captured: HashMap::new(),
    };
    let mut symbols = Vec::with_capacity(inputs.len());
    for (i, ty) in inputs.iter().enumerate() {
        let v = state
            .graph
            .push(NodeKind::Input(i), vec![ty.clone()], format!("x{i}"), None);
        state.graph.inputs.push(v);
        symbols.push(symbolic(&state, ty.clone(), v, false));
    }
    TRACE.with(|t| t.borrow_mut().push(state));
    let _pop = Pop;
    let outputs = with_grad_enabled(true, || f(&symbols))?;
    with_state(|st, outer| {
        for o in &outputs {
            let v = value_of(st, outer, o, None)?;
            st.graph.outputs.push(v);
        }
        let mut assigned: Vec<(usize, Tensor)> = st
            .params
            .values()
            .filter(|(_, _, a)| *a)
            .filter_map(|(i, t, _)| t.clone().map(|t| (*i, t)))
            .collect();
        assigned.sort_by_key(|(i, _)| *i);
        for (i, t) in assigned {
            let v = value_of(st, outer, &t, None)?;
            st.graph.updates.push((i, v));
        }
        Ok((
            std::mem::take(&mut st.graph),
            std::mem::take(&mut st.captures),
        ))
    })
    .unwrap_or_else(|| Err(Error::invalid("internal: trace state vanished")))
}

/// Records a control-flow node (`Cond`/`While`) with `types` outputs in the active trace
/// and returns one symbolic tensor per output.
pub fn record_multi(
    kind: NodeKind,
    types: Vec<TensorType>,
    op_name: &str,
    loc: SourceLocation,
) -> Result<Vec<Tensor>> {
    with_state(|st, _| {
        let name = format!("{}/{op_name}-op{}", current_scope(), st.op_counter);
        st.op_counter += 1;
        let node = st.graph.push(kind, types.clone(), name.clone(), Some(loc));
        let mut outs = Vec::with_capacity(types.len());
        for (index, ty) in types.into_iter().enumerate() {
            let v = st.graph.push(
                NodeKind::GetItem { of: node, index },
                vec![ty.clone()],
                format!("{name}/TupleGetItem-{index}"),
                Some(loc),
            );
            outs.push(symbolic(st, ty, v, false));
        }
        Ok(outs)
    })
    .unwrap_or_else(|| Err(escaped(Some(loc))))
}

/// The value ids of `tensors` in the active trace (capturing outer values, adding
/// constants for concrete tensors).
pub fn values_of(tensors: &[Tensor], loc: SourceLocation) -> Result<Vec<ValueId>> {
    with_state(|st, outer| {
        tensors
            .iter()
            .map(|t| value_of(st, outer, t, Some(loc)))
            .collect()
    })
    .unwrap_or_else(|| Err(escaped(Some(loc))))
}
