//! The executor: runs an optimised graph with the eager kernels, releasing each value
//! after its last use, feeding fresh random keys, and storing parameter updates back.
//!
//! ```
//! use spore_compile::executor::Executable;
//! use spore_core::{trace::trace, DType, Tensor, TensorType};
//! let g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| Ok(vec![x[0].add(&x[0])?])).unwrap();
//! let mut exe = Executable::new(g).unwrap();
//! let y = exe.run(&[Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap()]).unwrap();
//! assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
//! ```

use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use spore_core::apply::{apply_in_graph as apply, no_grad};
use spore_core::debug::{self, OpSite, dump};
use spore_core::ir::interpret::check_inputs;
use spore_core::ir::{Graph, NodeKind};
use spore_core::prims::in_place::EvalContext;
use spore_core::{Error, Result, Tensor};
use spore_kernels::Buffer;
use spore_kernels::arena::{self, BufferPool, PoolStats};

use crate::args::with_args;
use crate::in_place::{Lending, Lent, reclaim};
use crate::plan::MemoryPlan;

/// A compiled graph ready to run repeatedly.
pub struct Executable {
    pub graph: Graph,
    pub plan: MemoryPlan,
    /// Per-node value slots, reused across runs.
    slots: Vec<Vec<Tensor>>,
    /// Compiled sub-graphs of control-flow nodes: node -> (first, second).
    subgraphs: HashMap<usize, (Executable, Executable)>,
    /// Graph id in dumps and profiles (PyNative ops are graph 0).
    pub graph_id: usize,
    /// Whether this graph's IR and execution order were written for the current dumper.
    dump_registered: Option<usize>,
    /// The type each parameter was compiled with (`None` for one only assigned), checked
    /// before every run.
    param_types: Vec<Option<spore_core::TensorType>>,
    /// Buffers of dead values, reused by later ops and later runs (the arena).
    pool: BufferPool,
    /// Handles on the previous run's outputs: when the caller has dropped its own by the
    /// next run, their memory goes back to the pool (so a training loop that reads its
    /// loss and drops it allocates nothing per step).
    last_outputs: Vec<Tensor>,
    /// This run's random keys (the vector is kept between runs).
    keys: Vec<Tensor>,
    /// The output vector [`Executable::run_first`] reuses.
    first_outputs: Vec<Tensor>,
    /// Ops that wrote their result into a dying argument's buffer, over all runs.
    in_place_ops: usize,
    /// Of those, the ones that wrote a parameter's new value over its current one.
    in_place_updates: usize,
    /// This run's parameters whose buffer their update took: (parameter, node).
    donated: Vec<(usize, usize)>,
    /// What a parameter holds while its buffer is lent (an empty tensor, made once).
    stand_in: Tensor,
}

static NEXT_GRAPH_ID: AtomicUsize = AtomicUsize::new(1);

impl Executable {
    /// Plans `graph` (already optimised) for execution.
    pub fn new(graph: Graph) -> Result<Executable> {
        graph.verify()?;
        debug::check_env()?;
        let mut subgraphs = HashMap::new();
        for (i, n) in graph.nodes.iter().enumerate() {
            let pair = match &n.kind {
                NodeKind::Cond {
                    then_branch,
                    else_branch,
                    ..
                } => (then_branch, else_branch),
                NodeKind::While { cond, body, .. } => (cond, body),
                _ => continue,
            };
            // The sub-graphs went through the compile pipeline with the outer graph
            // (`run_passes` recurses into them); here they are only planned.
            let compile = |g: &Graph| -> Result<Executable> { Executable::new(g.clone()) };
            subgraphs.insert(i, (compile(pair.0)?, compile(pair.1)?));
        }
        spore_kernels::matmul::reserve_gemm_scratch();
        let plan = MemoryPlan::new(&graph);
        let mut param_types = vec![None; graph.params.len()];
        for n in &graph.nodes {
            if let NodeKind::Parameter(k) = n.kind {
                param_types[k] = Some(n.ty().clone());
            }
        }
        let slots = vec![vec![]; graph.nodes.len()];
        let graph_id = NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed);
        Ok(Executable {
            graph,
            plan,
            slots,
            subgraphs,
            graph_id,
            dump_registered: None,
            param_types,
            pool: BufferPool::default(),
            last_outputs: Vec::new(),
            keys: Vec::new(),
            in_place_ops: 0,
            in_place_updates: 0,
            donated: Vec::new(),
            stand_in: Tensor::from_buffer(Buffer::F32(Vec::new()), &[0])?,
            first_outputs: Vec::new(),
        })
    }

    /// Runs the graph and stores its parameter updates; returns its outputs.
    pub fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut outputs = Vec::with_capacity(self.graph.outputs.len());
        self.run_into(inputs, &mut outputs)?;
        Ok(outputs)
    }

    /// [`Executable::run`] returning only the first output (an error for a graph without
    /// outputs); allocates nothing in steady state.
    pub fn run_first(&mut self, inputs: &[Tensor]) -> Result<Tensor> {
        let mut outputs = std::mem::take(&mut self.first_outputs);
        let result = self.run_into(inputs, &mut outputs);
        // Keep the vector (emptied) for the next call; the handles go with the result.
        let first = outputs.drain(..).next();
        self.first_outputs = outputs;
        result?;
        first.ok_or_else(|| Error::invalid(format!("graph {}: it has no outputs", self.graph.name)))
    }

    /// [`Executable::run`] writing the outputs into `outputs` (cleared first): with a
    /// reused vector, a steady-state run allocates nothing at all.
    pub fn run_into(&mut self, inputs: &[Tensor], outputs: &mut Vec<Tensor>) -> Result<()> {
        outputs.clear();
        check_inputs(&self.graph, inputs)?;
        for (p, compiled) in self.graph.params.iter().zip(&self.param_types) {
            if let Some(t) = compiled
                && p.tensor_type() != *t
            {
                return Err(Error::invalid(format!(
                    "graph {}: parameter {} is now {} but was compiled as {t}",
                    self.graph.name,
                    p.name(),
                    p.tensor_type()
                )));
            }
        }
        let dumper = dump::current();
        let iteration = match &dumper {
            Some(d) => {
                let key = std::sync::Arc::as_ptr(d) as usize;
                if self.dump_registered != Some(key) {
                    d.register_graph(self.graph_id, &self.graph)?;
                    self.dump_registered = Some(key);
                }
                d.begin_graph_run(self.graph_id, &self.graph)?
            }
            None => 0,
        };
        // The whole run executes on a worker of the kernel thread pool: parallel kernels
        // then split work with a `join` on the local deque instead of handing every op
        // from the caller's thread to the pool and sleeping until it is done (two context
        // switches per op, a large share of a small network's step).
        spore_core::threads::join_kernel_pool_once();
        let result = if rayon::current_thread_index().is_some() {
            // The other workers spin through the step (and a moment after, until the next
            // one), so that each parallel kernel finds them awake.
            let _awake = spore_core::threads::keep_workers_awake();
            self.run_pooled(inputs, outputs, iteration)
        } else {
            // The run moves to a pool thread: the caller's frozen weights go with it.
            use spore_core::prims::filter_cache::{frozen_weights, with_frozen_weights};
            let frozen = frozen_weights();
            rayon::scope(|_| {
                if frozen {
                    with_frozen_weights(|| self.run_pooled(inputs, outputs, iteration))
                } else {
                    self.run_pooled(inputs, outputs, iteration)
                }
            })
        };
        // Everything dumped during the run reaches the disk, whether the run failed or not.
        let flushed = dumper.map(|d| d.flush()).unwrap_or(Ok(()));
        result?;
        flushed
    }

    /// How many ops ran in place (into a dying argument's buffer) over all runs.
    pub fn in_place_ops(&self) -> usize {
        self.in_place_ops
    }

    /// How many of those wrote a parameter's new value over its current value (see
    /// [`crate::in_place`]).
    pub fn in_place_updates(&self) -> usize {
        self.in_place_updates
    }

    /// How the buffer pool has served this graph's kernels so far.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Executes with this graph's buffer pool serving the kernels, stores the parameter
    /// updates, and gives every buffer no longer referenced back to the pool.
    fn run_pooled(
        &mut self,
        inputs: &[Tensor],
        outputs: &mut Vec<Tensor>,
        iteration: u64,
    ) -> Result<()> {
        let mut pool = std::mem::take(&mut self.pool);
        let mut keys = std::mem::take(&mut self.keys);
        let result = arena::with_pool(&mut pool, || {
            // Last run's outputs the caller no longer holds: their memory is free again.
            self.last_outputs.drain(..).for_each(Tensor::recycle);
            let result = (0..self.graph.num_keys)
                .try_for_each(|_| random_key().map(|k| keys.push(k)))
                .and_then(|()| no_grad(|| self.execute(inputs, &keys, iteration)));
            if result.is_err() {
                // Parameters whose buffer already holds their new value keep that value
                // (every node that can fail on values ran before them: see the plan).
                for &(k, v) in &self.donated {
                    if let Some(value) = self.slots[v].first() {
                        self.graph.params[k].store(value.clone());
                    }
                }
            }
            self.donated.clear();
            if result.is_ok() {
                for &o in &self.graph.outputs {
                    outputs.push(self.slots[o][0].clone());
                    self.last_outputs.push(self.slots[o][0].clone());
                }
                for &(p, v) in &self.graph.updates {
                    // The replaced value's buffer is free unless the user kept a handle:
                    // the next step's update writes into it (two buffers per parameter,
                    // alternating, instead of a fresh allocation per step).
                    self.graph.params[p]
                        .store(self.slots[v][0].clone())
                        .recycle();
                }
            }
            // Release everything still held, also after an error.
            for slot in &mut self.slots {
                slot.drain(..).for_each(Tensor::recycle);
            }
            keys.drain(..).for_each(Tensor::recycle);
            result
        });
        pool.end_run();
        self.pool = pool;
        self.keys = keys;
        result
    }

    fn execute(&mut self, inputs: &[Tensor], keys: &[Tensor], iteration: u64) -> Result<()> {
        let observe = debug::enabled();
        // In-place execution empties the lent argument: not while the dump reads every
        // op's inputs (the profiler reads only names and times).
        let lend = !observe || dump::current().is_none();
        for i in 0..self.graph.nodes.len() {
            let node = &self.graph.nodes[i];
            let value: Vec<Tensor> = match &node.kind {
                NodeKind::Input(k) => {
                    self.set_single(i, inputs[*k].clone());
                    continue;
                }
                NodeKind::Parameter(k) => {
                    let v = self.graph.params[*k].stored();
                    self.set_single(i, v);
                    continue;
                }
                NodeKind::RandomKey(k) => {
                    self.set_single(i, keys[*k].clone());
                    continue;
                }
                NodeKind::Constant(t) => {
                    let t = t.clone();
                    self.set_single(i, t);
                    continue;
                }
                NodeKind::Op { .. } => {
                    self.run_op(i, lend, observe, iteration)?;
                    continue;
                }
                NodeKind::Cond { .. } => self.run_cond(i)?,
                NodeKind::While { .. } => self.run_while(i)?,
                NodeKind::GetItem { of, index } => {
                    let v = self.slots[*of][*index].clone();
                    self.set_single(i, v);
                    continue;
                }
            };
            self.slots[i] = value;
            self.release_after(i);
        }
        Ok(())
    }

    /// Runs op node `i`: lends it the buffer of an argument that dies there (with `lend`),
    /// reports it to dump and profiler (with `observe`), stores its value.
    fn run_op(&mut self, i: usize, lend: bool, observe: bool, iteration: u64) -> Result<()> {
        let node = &self.graph.nodes[i];
        let NodeKind::Op { op, args } = &node.kind else {
            return Err(Error::invalid("internal: run_op on a node without an op"));
        };
        let mut ctx = EvalContext::default();
        let lent = lend
            .then(|| {
                Lending {
                    graph: &self.graph,
                    plan: &self.plan,
                    slots: &mut self.slots,
                    stand_in: &self.stand_in,
                }
                .lend_dying_argument(i, op, node.ty(), args, &mut ctx)
            })
            .flatten();
        // The op's own failure and the observers' are kept apart: once the op wrote a
        // parameter's new value into a lent buffer, that value must reach the parameter
        // even if reporting the op then fails.
        let out = with_args(&self.slots, args, |refs| {
            let start = observe.then(Instant::now);
            let loc = node.location.unwrap_or(Location::caller());
            let out = apply(op, refs, loc, &mut ctx)?;
            let reported = start.map_or(Ok(()), |start| {
                let site = OpSite {
                    graph_id: self.graph_id,
                    iteration,
                    task_id: i,
                };
                debug::report_op(site, op, &node.name, refs, &out, start)
            });
            Ok::<_, Error>((out, reported))
        });
        if let Some(lent) = lent {
            if out.is_err() {
                reclaim(lent, &self.graph, i, &mut ctx);
            } else {
                self.in_place_ops += 1;
                if let Lent::Parameter(k) = lent {
                    self.in_place_updates += 1;
                    self.donated.push((k, i));
                }
            }
        }
        let (out, reported) = out?;
        self.set_single(i, out);
        reported
    }

    /// The value of node `i`'s argument `v`.
    fn arg(&self, v: usize) -> Tensor {
        self.slots[v][0].clone()
    }

    /// Runs the branch of `Cond` node `i` that its predicate picks.
    fn run_cond(&mut self, i: usize) -> Result<Vec<Tensor>> {
        let NodeKind::Cond {
            pred,
            then_args,
            else_args,
            ..
        } = &self.graph.nodes[i].kind
        else {
            return Err(Error::invalid("internal: run_cond on another node"));
        };
        let is_then = self.arg(*pred).item()? != 0.0;
        let take = if is_then { then_args } else { else_args };
        let vals: Vec<Tensor> = take.iter().map(|&a| self.arg(a)).collect();
        let Some((t, e)) = self.subgraphs.get_mut(&i) else {
            return Err(Error::invalid("internal: cond sub-graph missing"));
        };
        if is_then { t.run(&vals) } else { e.run(&vals) }
    }

    /// Runs `While` node `i`'s body until its condition is false.
    fn run_while(&mut self, i: usize) -> Result<Vec<Tensor>> {
        let NodeKind::While {
            init,
            cond_args,
            body_args,
            ..
        } = &self.graph.nodes[i].kind
        else {
            return Err(Error::invalid("internal: run_while on another node"));
        };
        let mut state: Vec<Tensor> = init.iter().map(|&a| self.arg(a)).collect();
        let ca: Vec<Tensor> = cond_args.iter().map(|&a| self.arg(a)).collect();
        let ba: Vec<Tensor> = body_args.iter().map(|&a| self.arg(a)).collect();
        let Some((c, b)) = self.subgraphs.get_mut(&i) else {
            return Err(Error::invalid("internal: while sub-graph missing"));
        };
        loop {
            let go = c.run(&[state.clone(), ca.clone()].concat())?;
            if go[0].item()? == 0.0 {
                return Ok(state);
            }
            state = b.run(&[state, ba.clone()].concat())?;
        }
    }

    /// Stores the one value node `i` produced in its slot (reusing the slot's vector:
    /// no allocation in steady state), then releases what dies after node `i`.
    fn set_single(&mut self, i: usize, value: Tensor) {
        let slot = &mut self.slots[i];
        slot.clear();
        slot.push(value);
        self.release_after(i);
    }

    /// Liveness: a value dead after node `i` gives its buffer back to the pool, where the
    /// next op of the same size and dtype takes it. (Draining keeps the slot's capacity.)
    fn release_after(&mut self, i: usize) {
        for &v in &self.plan.free_after[i] {
            self.slots[v].drain(..).for_each(Tensor::recycle);
        }
    }
}

/// A fresh random key as a 0-d i64 tensor, its buffer taken from the installed pool.
fn random_key() -> Result<Tensor> {
    let key = spore_core::rng::next_key() as i64;
    Tensor::from_buffer(
        Buffer::I64(arena::collect_exact(1, std::iter::once(key))),
        &[],
    )
}
