//! [`Cell`]: MindSpore's network building block. A cell owns parameters and child cells,
//! and its [`Cell::construct`] says how inputs become outputs. The same `construct` runs op
//! by op (PyNative), or is traced and compiled once per input signature (Graph mode, or a
//! cell marked with [`CellExt::set_jit`], MindSpore's `@jit` on `construct`).
//!
//! Calling goes through [`CellCall::call`] on an `Arc` of the cell:
//! - inside a trace (a parent being compiled), `construct` runs inline under the child's
//!   scope name, so IR nodes read `Default/conv1/Conv2D-op3`;
//! - otherwise, in Graph mode or with `set_jit(true)`, through the cell's own cached
//!   [`Jit`], one per training flag (train and eval graphs differ), except where a
//!   gradient may flow through a graph that draws random numbers or updates state, which
//!   a compiled call cannot differentiate (then eagerly; see `compiled.rs`);
//! - otherwise eagerly.
//!
//! ```
//! use std::sync::Arc;
//! use spore_core::{DType, Result, Tensor};
//! use spore_nn::prelude::*;
//!
//! struct Net { base: CellBase, fc: Arc<Dense>, relu: Arc<ReLU> }
//! impl Cell for Net {
//!     fn construct(&self, x: &[Tensor]) -> Result<Vec<Tensor>> {
//!         Ok(vec![self.relu.call1(&self.fc.call1(&x[0])?)?])
//!     }
//!     fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
//!         vec![child("fc", &self.fc), child("relu", &self.relu)]
//!     }
//!     fn base(&self) -> &CellBase { &self.base }
//!     fn class_name(&self) -> &'static str { "Net" }
//! }
//! let net = Arc::new(Net { base: CellBase::new(), fc: Dense::new(4, 2).unwrap(), relu: ReLU::new() });
//! let names: Vec<String> = net.parameters_and_names().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["fc.weight", "fc.bias"]);
//! let y = net.call1(&Tensor::ones(&[3, 4], DType::F32).unwrap()).unwrap();
//! assert_eq!(y.shape(), &[3, 2]);
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use spore_compile::Jit;
use spore_core::{DType, Error, Parameter, Result, Tensor, TensorType};

/// A network component: parameters, children and a `construct` computation.
pub trait Cell: Send + Sync + 'static {
    /// The computation (MindSpore's `construct`): inputs to outputs.
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>>;
    /// Child cells with their attribute names, in registration order.
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![]
    }
    /// The cell's own parameters with their local names (`weight`, `bias`).
    fn params(&self) -> Vec<(String, Parameter)> {
        vec![]
    }
    /// The per-cell state every cell embeds (training flag, compiled graphs, scope name).
    fn base(&self) -> &CellBase;
    /// The class name (`Conv2d`, `LeNet5`): names compiled graphs and error messages.
    fn class_name(&self) -> &'static str;
    /// The concrete cell, for code that must recognise a layer by type (the ONNX exporter
    /// writes a `BatchNorm2d` as one `BatchNormalization` node); `None` unless a layer
    /// opts in.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
    /// MindSpore's `auto_prefix`: whether the children's parameter names get the child's
    /// attribute name as a prefix. Wrappers (`WithLossCell`, `TrainOneStepCell`) answer
    /// false so that a wrapped network keeps the names `conv1.weight`.
    fn auto_prefix(&self) -> bool {
        true
    }
    /// Whether the cell's `construct` compiles in Graph mode (or under `set_jit`); a
    /// cell that reads values on the host between its parts says no, and its children
    /// compile on their own.
    fn compiles(&self) -> bool {
        true
    }
    /// Runs once, before the cell's first call from outside any other cell (before any
    /// compile); until it succeeds, each such call runs it again. `TrainOneStepCell`
    /// synchronises a distributed job's parameters here.
    fn before_first_call(&self) -> Result<()> {
        Ok(())
    }
}

/// What a traced `construct` does besides computing its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purity {
    /// Nothing: compiled calls are differentiable.
    Pure,
    /// Assigns trainable parameters: a training step, never differentiated.
    OptimizerStep,
    /// Draws random keys or updates non-trainable state: not differentiable compiled.
    /// `reads_trainable`: whether it reads parameters that require gradients.
    Stateful { reads_trainable: bool },
}

/// State shared by every cell: the training flag, the jit marker, the scope name given by
/// the parent, and the compiled `construct` per training flag.
pub struct CellBase {
    training: AtomicBool,
    jit: AtomicBool,
    pub(crate) named: AtomicBool,
    pub(crate) prepared: AtomicBool,
    scope: RwLock<Option<String>>,
    pub(crate) compiled: [OnceLock<Jit>; 2],
    /// What each (training flag, input signature) graph does besides computing outputs.
    /// By input types, then by training flag (a lookup by borrowed types allocates nothing).
    pub(crate) purity: Mutex<HashMap<Vec<TensorType>, [Option<Purity>; 2]>>,
    /// Observers of this cell's outputs (MindSpore's `register_forward_hook`).
    hooks: Mutex<Vec<(u64, ForwardHook)>>,
    /// Whether `hooks` is non-empty: calls check this instead of locking.
    hooked: AtomicBool,
    /// The float dtype `to_float` gave this cell, as 1 + its index in `DType::ALL` (0:
    /// none, the enclosing cell's applies).
    compute_dtype: AtomicU8,
    /// MindSpore's `pipeline_stage` attribute, as 1 + the stage (0: not set).
    pipeline_stage: AtomicUsize,
}

/// A forward hook: called with a cell's outputs each time it runs eagerly.
pub type ForwardHook = Arc<dyn Fn(&[Tensor]) + Send + Sync>;

impl Default for CellBase {
    fn default() -> Self {
        CellBase::new()
    }
}

impl CellBase {
    /// A cell in evaluation mode (MindSpore's default: `training` is False until
    /// `set_train`), not jit-decorated.
    pub fn new() -> CellBase {
        CellBase {
            training: AtomicBool::new(false),
            jit: AtomicBool::new(false),
            named: AtomicBool::new(false),
            prepared: AtomicBool::new(false),
            scope: RwLock::new(None),
            compiled: [OnceLock::new(), OnceLock::new()],
            purity: Mutex::new(HashMap::new()),
            hooks: Mutex::new(Vec::new()),
            hooked: AtomicBool::new(false),
            compute_dtype: AtomicU8::new(0),
            pipeline_stage: AtomicUsize::new(0),
        }
    }

    /// MindSpore's `cell.pipeline_stage = stage`: which pipeline stage runs this cell
    /// (`spore_parallel::pipeline::PipelineCell` reads it from the backbone's children).
    pub fn set_pipeline_stage(&self, stage: usize) {
        self.pipeline_stage
            .store(stage.saturating_add(1), Ordering::Relaxed);
    }

    /// The stage [`CellBase::set_pipeline_stage`] gave, if any.
    pub fn pipeline_stage(&self) -> Option<usize> {
        self.pipeline_stage.load(Ordering::Relaxed).checked_sub(1)
    }

    /// MindSpore's `Cell.to_float`: this cell's ops, and those of the children that set
    /// none of their own, compute in `dtype` (float inputs of another float type are
    /// cast to it; see `spore_core::autocast`). Parameters stay as they are (the float32
    /// master weights of mixed precision) and receive gradients of their own type.
    /// An error once the cell has compiled a graph (the graph holds the old casts): call
    /// it before the first call. A child's `to_float` after its parent compiled is not
    /// seen by the parent's graph: set the whole tree first (`amp::auto_mixed_precision`).
    pub fn to_float(&self, dtype: DType) -> Result<()> {
        if !dtype.is_float() {
            return Err(Error::invalid(format!(
                "to_float: {dtype} is not a float type (Float16, BFloat16, Float32 or Float64)"
            )));
        }
        if self.compiled.iter().any(|c| c.get().is_some()) {
            return Err(Error::invalid(format!(
                "to_float({dtype}): the cell has already compiled its graph in Graph mode; call to_float before its first call"
            )));
        }
        let index = DType::ALL.iter().position(|&d| d == dtype).unwrap_or(0);
        self.compute_dtype.store(index as u8 + 1, Ordering::Relaxed);
        Ok(())
    }

    /// The dtype [`CellBase::to_float`] set, if any.
    pub fn float_type(&self) -> Option<DType> {
        match self.compute_dtype.load(Ordering::Relaxed) {
            0 => None,
            k => DType::ALL.get(k as usize - 1).copied(),
        }
    }

    /// Calls `hook` with this cell's outputs each time it runs (MindSpore's
    /// `register_forward_hook`); returns the id [`CellBase::remove_forward_hook`] takes. A
    /// hooked cell runs eagerly even in Graph mode, so that the hook sees values (inside a
    /// compiled ancestor it is traced, and the hook sees the traced, symbolic outputs).
    pub fn register_forward_hook(&self, hook: ForwardHook) -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut h) = self.hooks.lock() {
            h.push((id, hook));
            self.hooked.store(true, Ordering::Release);
        }
        id
    }

    /// Removes a hook; false when no hook has that id.
    pub fn remove_forward_hook(&self, id: u64) -> bool {
        match self.hooks.lock() {
            Ok(mut h) => {
                let before = h.len();
                h.retain(|(i, _)| *i != id);
                self.hooked.store(!h.is_empty(), Ordering::Release);
                h.len() != before
            }
            Err(_) => false,
        }
    }

    /// The hooks, when there are any (a cheap check for the call path).
    pub(crate) fn forward_hooks(&self) -> Vec<ForwardHook> {
        if !self.hooked.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.hooks
            .lock()
            .map(|h| h.iter().map(|(_, f)| f.clone()).collect())
            .unwrap_or_default()
    }
    pub fn training(&self) -> bool {
        self.training.load(Ordering::Relaxed)
    }
    /// Sets this cell's own training flag, leaving its children as they are (`set_train`
    /// sets the whole tree).
    pub fn set_training_flag(&self, training: bool) {
        self.training.store(training, Ordering::Relaxed);
    }
    pub fn is_jit(&self) -> bool {
        self.jit.load(Ordering::Relaxed)
    }
    /// The attribute name the parent registered this cell under, if any.
    pub fn scope_name(&self) -> Option<String> {
        self.scope.read().ok().and_then(|s| s.clone())
    }
    fn set_scope_name(&self, name: &str) {
        if let Ok(mut s) = self.scope.write() {
            *s = Some(name.to_string());
        }
    }
    /// The compiled `construct` for the given training flag, if it was compiled.
    pub fn compiled(&self, training: bool) -> Option<&Jit> {
        self.compiled[training as usize].get()
    }
}

/// `(name, child)` for [`Cell::cells`]: erases the child's type.
pub fn child<C: Cell>(name: &str, cell: &Arc<C>) -> (String, Arc<dyn Cell>) {
    (name.to_string(), cell.clone() as Arc<dyn Cell>)
}

/// `(name, parameter)` for [`Cell::params`].
pub fn param(name: &str, p: &Parameter) -> (String, Parameter) {
    (name.to_string(), p.clone())
}

/// Tree-wide operations, available on every cell (`net.set_train(true)`).
pub trait CellExt {
    /// Every parameter of the tree with its dotted name relative to this cell
    /// (`conv1.weight`), own parameters first, then children in registration order; each
    /// parameter once. Parameters whose current name is a suffix of the new one are renamed
    /// (a parent prefixes its children's names, as MindSpore does on registration).
    fn parameters_and_names(&self) -> Vec<(String, Parameter)>;
    /// The parameters that require gradients, in `parameters_and_names` order.
    fn trainable_params(&self) -> Vec<Parameter>;
    /// The parameters that do not (BatchNorm's moving statistics, ...).
    fn untrainable_params(&self) -> Vec<Parameter>;
    /// This cell and every descendant with dotted names (`""` for this cell).
    fn cells_and_names(&self) -> Vec<(String, Arc<dyn Cell>)>;
    /// Switches this cell and all descendants to training (`true`) or evaluation mode.
    fn set_train(&self, training: bool);
    /// Marks `construct` as jit-compiled (MindSpore's `@jit` on `construct`).
    fn set_jit(&self, on: bool);
    fn is_training(&self) -> bool;
}

impl<C: Cell + ?Sized> CellExt for C {
    fn parameters_and_names(&self) -> Vec<(String, Parameter)> {
        let mut out = Vec::new();
        walk_params(self, "", &mut out, &mut HashSet::new());
        out
    }
    fn trainable_params(&self) -> Vec<Parameter> {
        self.parameters_and_names()
            .into_iter()
            .map(|(_, p)| p)
            .filter(|p| p.requires_grad())
            .collect()
    }
    fn untrainable_params(&self) -> Vec<Parameter> {
        self.parameters_and_names()
            .into_iter()
            .map(|(_, p)| p)
            .filter(|p| !p.requires_grad())
            .collect()
    }
    fn cells_and_names(&self) -> Vec<(String, Arc<dyn Cell>)> {
        let mut out = Vec::new();
        for (n, c) in self.cells() {
            walk_cells(c, n, &mut out);
        }
        out
    }
    fn set_train(&self, training: bool) {
        self.base().training.store(training, Ordering::Relaxed);
        for (_, c) in self.cells() {
            c.set_train(training);
        }
    }
    fn set_jit(&self, on: bool) {
        self.base().jit.store(on, Ordering::Relaxed);
    }
    fn is_training(&self) -> bool {
        self.base().training()
    }
}

fn walk_cells(c: Arc<dyn Cell>, name: String, out: &mut Vec<(String, Arc<dyn Cell>)>) {
    let children = c.cells();
    out.push((name.clone(), c));
    for (n, child) in children {
        walk_cells(child, format!("{name}.{n}"), out);
    }
}

fn walk_params<C: Cell + ?Sized>(
    c: &C,
    prefix: &str,
    out: &mut Vec<(String, Parameter)>,
    seen: &mut HashSet<u64>,
) {
    for (n, p) in c.params() {
        if !seen.insert(p.id()) {
            continue;
        }
        let full = format!("{prefix}{n}");
        let current = p.name();
        // Only lengthen names: walking a sub-cell must not strip the prefix a parent gave.
        if full != current && (current.is_empty() || full.ends_with(&format!(".{current}"))) {
            p.set_name(&full);
        }
        out.push((full, p));
    }
    for (n, child) in c.cells() {
        child.base().set_scope_name(&n);
        let next = if c.auto_prefix() {
            format!("{prefix}{n}.")
        } else {
            prefix.to_string()
        };
        walk_params(&*child, &next, out, seen);
    }
}

/// Calling a cell (MindSpore's `cell(x)`), on an `Arc` of it.
pub trait CellCall {
    /// Runs the cell: inline when tracing, compiled in Graph mode or when jit-decorated,
    /// else eagerly.
    fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>>;
    /// [`CellCall::call`] returning only the first output (an error when there is none).
    /// A compiled call then allocates nothing in steady state (no output vector).
    fn call_first(&self, inputs: &[Tensor]) -> Result<Tensor>;
    /// One input, one output.
    fn call1(&self, x: &Tensor) -> Result<Tensor>;
}
