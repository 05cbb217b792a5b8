//! `jit`: compile a function on its first call and cache the result by input types
//! (shapes and dtypes). Later calls with the same types run the cached executable; new
//! parameter values never recompile, new input types do.
//!
//! ```
//! use spore_compile::jit::jit;
//! use spore_core::{Tensor, DType};
//! let f = jit("double", |x: &[Tensor]| Ok(vec![x[0].add(&x[0])?]));
//! let a = f.call(&[Tensor::ones(&[3], DType::F32).unwrap()]).unwrap();
//! let b = f.call(&[Tensor::full(&[3], 2.0, DType::F32).unwrap()]).unwrap();
//! assert_eq!(b[0].to_vec::<f32>().unwrap(), vec![4.0; 3]);
//! assert_eq!(f.compile_count(), 1);
//! f.call(&[Tensor::ones(&[4], DType::F32).unwrap()]).unwrap(); // new shape: compiles again
//! assert_eq!(f.compile_count(), 2);
//! # let _ = a;
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use smallvec::SmallVec;
use spore_core::autodiff::gradients;
use spore_core::context::get_context;
use spore_core::ir::Graph;
use spore_core::op::Op;
use spore_core::prims::custom::{CustomOp, CustomPrimitive};
use spore_core::{Error, Result, Tensor, TensorType, is_grad_enabled, trace, with_grad_enabled};

use crate::executor::Executable;
use crate::pass::{default_passes, dump_passes, run_passes, save_graph};

/// The function type `jit` compiles: tensors in, tensors out.
pub type TensorFn = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;

/// A function compiled per input signature.
pub struct Jit {
    name: String,
    f: Arc<TensorFn>,
    cache: Mutex<HashMap<Vec<TensorType>, Arc<Mutex<Executable>>>>,
    compiles: AtomicUsize,
    last_compile_ms: Mutex<f64>,
}

/// Wraps `f` for compilation (MindSpore's `@jit`).
pub fn jit<F>(name: &str, f: F) -> Jit
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    Jit {
        name: name.to_string(),
        f: Arc::new(f),
        cache: Mutex::new(HashMap::new()),
        compiles: AtomicUsize::new(0),
        last_compile_ms: Mutex::new(0.0),
    }
}

impl Jit {
    /// How many times the function was traced and compiled.
    pub fn compile_count(&self) -> usize {
        self.compiles.load(Ordering::Relaxed)
    }

    /// Milliseconds the latest compilation took (trace, passes and planning).
    pub fn last_compile_ms(&self) -> f64 {
        self.last_compile_ms.lock().map(|v| *v).unwrap_or(0.0)
    }

    /// The optimised graph compiled for these input types, if any.
    pub fn graph_for(&self, types: &[TensorType]) -> Option<Graph> {
        let cache = self.cache.lock().ok()?;
        let exe = cache.get(types)?.lock().ok()?;
        Some(exe.graph.clone())
    }

    /// How the buffer pool of the executable compiled for these input types has served
    /// its kernels, if one was compiled.
    pub fn pool_stats_for(&self, types: &[TensorType]) -> Option<spore_kernels::arena::PoolStats> {
        // Release the cache before waiting for the executable (it may be running).
        let exe = self.cache.lock().ok()?.get(types)?.clone();
        let stats = exe.lock().ok()?.pool_stats();
        Some(stats)
    }

    /// How many parameter updates the executable compiled for these input types wrote
    /// over the parameter's current value (see [`crate::in_place`]), if one was compiled.
    pub fn in_place_updates_for(&self, types: &[TensorType]) -> Option<usize> {
        let exe = self.cache.lock().ok()?.get(types)?.clone();
        let updates = exe.lock().ok()?.in_place_updates();
        Some(updates)
    }

    /// Runs the function: inline when already tracing (nested jit), else compiled.
    pub fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if trace::is_tracing() {
            return (self.f)(inputs);
        }
        self.with_executable(inputs, |exe| {
            let outputs = exe.run(inputs)?;
            Ok(self.attach_gradients(&exe.graph, inputs, outputs))
        })
    }

    /// Runs `f` on the executable compiled for `inputs`' types (compiling it first if
    /// needed), locked.
    fn with_executable<R>(
        &self,
        inputs: &[Tensor],
        f: impl FnOnce(&mut Executable) -> Result<R>,
    ) -> Result<R> {
        // Inline: a steady-state call allocates nothing to find its executable.
        let types: SmallVec<[TensorType; 4]> =
            inputs.iter().map(|t| t.tensor_type().clone()).collect();
        let exe = self.executable(&types)?;
        let mut exe = exe
            .lock()
            .map_err(|_| Error::invalid(format!("jit {}: a previous run panicked", self.name)))?;
        f(&mut exe)
    }

    /// [`Jit::call`] returning the first output (an error when there is none). In steady
    /// state a call that needs no gradient link allocates nothing (no output vector).
    pub fn call_first(&self, inputs: &[Tensor]) -> Result<Tensor> {
        self.call_one(inputs, false)
    }

    /// [`Jit::call`] of a function with exactly one output (an error otherwise).
    pub fn call_single(&self, inputs: &[Tensor]) -> Result<Tensor> {
        self.call_one(inputs, true)
    }

    fn call_one(&self, inputs: &[Tensor], exactly_one: bool) -> Result<Tensor> {
        let fits = |n: usize| if exactly_one { n == 1 } else { n >= 1 };
        let count_error = |n: usize| {
            Error::invalid(format!(
                "jit {}: expected {} output, the function returned {n}",
                self.name,
                if exactly_one {
                    "exactly one"
                } else {
                    "at least one"
                }
            ))
        };
        if !trace::is_tracing() {
            let direct = self.with_executable(inputs, |exe| {
                let n = exe.graph.outputs.len();
                if !fits(n) {
                    return Err(count_error(n));
                }
                // Outputs that need a backward rule take the general path below.
                if self.needs_gradient_links(&exe.graph, inputs) {
                    return Ok(None);
                }
                exe.run_first(inputs).map(Some)
            })?;
            if let Some(first) = direct {
                return Ok(first);
            }
        }
        let outputs = self.call(inputs)?;
        if !fits(outputs.len()) {
            return Err(count_error(outputs.len()));
        }
        outputs.into_iter().next().ok_or_else(|| count_error(0))
    }

    fn executable(&self, types: &[TensorType]) -> Result<Arc<Mutex<Executable>>> {
        if let Some(e) = self
            .cache
            .lock()
            .map_err(|_| Error::invalid("jit cache poisoned"))?
            .get(types)
        {
            return Ok(e.clone());
        }
        let started = Instant::now();
        let f = self.f.clone();
        // Whole softmax, GELU, LayerNorm and training BatchNorm operators in the graph (see
        // `spore_core::eager`).
        let mut graph =
            spore_core::eager::in_traces(|| trace::trace(&self.name, types, move |x| f(x)))?;
        let ctx = get_context();
        let n = self.compiles.fetch_add(1, Ordering::Relaxed);
        let save_dir: Option<PathBuf> =
            (ctx.save_graphs > 0).then(|| ctx.save_graphs_path.join(format!("{}_{n}", self.name)));
        spore_core::debug::check_env()?;
        let passes = if spore_core::debug::dump::current().is_some() {
            dump_passes()
        } else {
            default_passes()
        };
        run_passes(&mut graph, &passes, save_dir.as_deref())?;
        let exe = Executable::new(graph)?;
        if let Some(dir) = &save_dir {
            let mut planned = exe.graph.clone();
            planned.name = format!("{}_planned", planned.name);
            save_graph(&planned, dir, passes.len() + 1, "plan")?;
            let path = dir.join(format!("{:02}_plan.ir", passes.len() + 1));
            let text = format!("{}{}", planned.to_ir(), exe.plan.describe(&exe.graph));
            std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        }
        let ms = started.elapsed().as_secs_f64() * 1e3;
        if let Ok(mut v) = self.last_compile_ms.lock() {
            *v = ms;
        }
        log::info!(
            "jit {}: compiled {} ops in {ms:.1} ms",
            self.name,
            exe.graph.op_count()
        );
        let exe = Arc::new(Mutex::new(exe));
        self.cache
            .lock()
            .map_err(|_| Error::invalid("jit cache poisoned"))?
            .insert(types.to_vec(), exe.clone());
        Ok(exe)
    }

    /// Outputs of a side-effect-free graph stay differentiable in PyNative mode: each
    /// gets a gradient rule that recomputes the function eagerly (rematerialisation).
    /// Whether outputs of `g` get a backward rule: gradients are recorded and an input or
    /// parameter requires one. A training step (it updates parameters) is never
    /// differentiated, which is checked first so its calls inspect nothing.
    fn needs_gradient_links(&self, g: &Graph, inputs: &[Tensor]) -> bool {
        g.updates.is_empty()
            && is_grad_enabled()
            && (inputs.iter().any(Tensor::requires_grad)
                || g.params.iter().any(|p| p.stored().requires_grad()))
    }

    fn attach_gradients(&self, g: &Graph, inputs: &[Tensor], outputs: Vec<Tensor>) -> Vec<Tensor> {
        if !self.needs_gradient_links(g, inputs) {
            return outputs;
        }
        let params: Vec<Tensor> = g.params.iter().map(|p| p.stored()).collect();
        let all: Vec<Tensor> = inputs.iter().chain(&params).cloned().collect();
        outputs
            .into_iter()
            .enumerate()
            .map(|(index, out)| {
                let rule = Recompute {
                    name: self.name.clone(),
                    f: self.f.clone(),
                    index,
                    num_inputs: inputs.len(),
                    compute_dtype: spore_core::autocast::compute_dtype(),
                };
                out.with_grad_fn(Op::Custom(CustomOp::new(Arc::new(rule))), all.clone())
            })
            .collect()
    }
}

/// The backward rule of a compiled call: run the function again with autodiff on.
struct Recompute {
    name: String,
    f: Arc<TensorFn>,
    index: usize,
    num_inputs: usize,
    /// The mixed-precision compute dtype in force at the call: the backward pass runs
    /// later, outside the caller's `with_compute_dtype`, and must recompute the same ops.
    compute_dtype: Option<spore_core::DType>,
}

impl std::fmt::Debug for Recompute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JitRecompute({}, output {})", self.name, self.index)
    }
}

impl CustomPrimitive for Recompute {
    fn name(&self) -> &str {
        "JitCall"
    }
    fn attributes(&self) -> String {
        format!("{}#{}", self.name, self.index)
    }
    fn infer(&self, _inputs: &[&TensorType]) -> Result<TensorType, String> {
        Err("JitCall is only a gradient rule".into())
    }
    fn eval(&self, _inputs: &[&Tensor]) -> Result<Tensor, String> {
        Err("JitCall is only a gradient rule".into())
    }
    fn vjp(&self, inputs: &[Tensor], _out: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let recompute = || (self.f)(&inputs[..self.num_inputs]);
        let outs = with_grad_enabled(true, || {
            spore_core::autocast::with_compute_dtype(self.compute_dtype, recompute)
        })?;
        let Some(out) = outs.get(self.index) else {
            return Err(Error::invalid(format!(
                "jit {}: recomputation returned fewer outputs",
                self.name
            )));
        };
        gradients(
            std::slice::from_ref(out),
            std::slice::from_ref(grad),
            inputs,
        )
    }
}
