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

use spore_core::apply::{apply, no_grad};
use spore_core::ir::interpret::check_inputs;
use spore_core::ir::{Graph, NodeKind};
use spore_core::{Error, Result, Tensor};

use crate::pass::{default_passes, run_passes};
use crate::plan::MemoryPlan;

/// A compiled graph ready to run repeatedly.
pub struct Executable {
    pub graph: Graph,
    pub plan: MemoryPlan,
    /// Per-node value slots, reused across runs.
    slots: Vec<Vec<Tensor>>,
    /// Compiled sub-graphs of control-flow nodes: node -> (first, second).
    subgraphs: HashMap<usize, (Executable, Executable)>,
}

impl Executable {
    /// Plans `graph` (already optimised) for execution.
    pub fn new(graph: Graph) -> Result<Executable> {
        graph.verify()?;
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
            let compile = |g: &Graph| -> Result<Executable> {
                let mut g = g.clone();
                run_passes(&mut g, &default_passes(), None)?;
                Executable::new(g)
            };
            subgraphs.insert(i, (compile(pair.0)?, compile(pair.1)?));
        }
        let plan = MemoryPlan::new(&graph);
        let slots = vec![vec![]; graph.nodes.len()];
        Ok(Executable {
            graph,
            plan,
            slots,
            subgraphs,
        })
    }

    /// Runs the graph and stores its parameter updates; returns its outputs.
    pub fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        check_inputs(&self.graph, inputs)?;
        for (i, p) in self.graph.params.iter().enumerate() {
            let node_ty = self
                .graph
                .nodes
                .iter()
                .find(|n| matches!(n.kind, NodeKind::Parameter(k) if k == i))
                .map(|n| n.ty().clone());
            if let Some(t) = node_ty
                && p.tensor_type() != t
            {
                return Err(Error::invalid(format!(
                    "graph {}: parameter {} is now {} but was compiled as {t}",
                    self.graph.name,
                    p.name(),
                    p.tensor_type()
                )));
            }
        }
        let keys: Vec<Tensor> = (0..self.graph.num_keys)
            .map(|_| Tensor::scalar(spore_core::rng::next_key() as i64))
            .collect();
        let result = no_grad(|| self.execute(inputs, &keys));
        // Release everything still held, also after an error.
        let outputs = result.map(|()| {
            self.graph
                .outputs
                .iter()
                .map(|&o| self.slots[o][0].clone())
                .collect::<Vec<_>>()
        });
        if outputs.is_ok() {
            for &(p, v) in &self.graph.updates {
                self.graph.params[p].store(self.slots[v][0].clone());
            }
        }
        self.slots.iter_mut().for_each(|s| s.clear());
        outputs
    }

    fn execute(&mut self, inputs: &[Tensor], keys: &[Tensor]) -> Result<()> {
        for i in 0..self.graph.nodes.len() {
            let node = &self.graph.nodes[i];
            let arg = |slots: &Vec<Vec<Tensor>>, v: usize| slots[v][0].clone();
            let value: Vec<Tensor> = match &node.kind {
                NodeKind::Input(k) => vec![inputs[*k].clone()],
                NodeKind::Parameter(k) => vec![self.graph.params[*k].stored()],
                NodeKind::RandomKey(k) => vec![keys[*k].clone()],
                NodeKind::Constant(t) => vec![t.clone()],
                NodeKind::Op { op, args } => {
                    let vals: Vec<Tensor> = args.iter().map(|&a| arg(&self.slots, a)).collect();
                    let refs: Vec<&Tensor> = vals.iter().collect();
                    vec![apply(
                        op.clone(),
                        &refs,
                        node.location.unwrap_or(Location::caller()),
                    )?]
                }
                NodeKind::Cond {
                    pred,
                    then_args,
                    else_args,
                    ..
                } => {
                    let take = if arg(&self.slots, *pred).item()? != 0.0 {
                        then_args
                    } else {
                        else_args
                    };
                    let vals: Vec<Tensor> = take.iter().map(|&a| arg(&self.slots, a)).collect();
                    let is_then = std::ptr::eq(take, then_args);
                    let Some((t, e)) = self.subgraphs.get_mut(&i) else {
                        return Err(Error::invalid("internal: cond sub-graph missing"));
                    };
                    if is_then {
                        t.run(&vals)?
                    } else {
                        e.run(&vals)?
                    }
                }
                NodeKind::While {
                    init,
                    cond_args,
                    body_args,
                    ..
                } => {
                    let mut state: Vec<Tensor> =
                        init.iter().map(|&a| arg(&self.slots, a)).collect();
                    let ca: Vec<Tensor> = cond_args.iter().map(|&a| arg(&self.slots, a)).collect();
                    let ba: Vec<Tensor> = body_args.iter().map(|&a| arg(&self.slots, a)).collect();
                    let Some((c, b)) = self.subgraphs.get_mut(&i) else {
                        return Err(Error::invalid("internal: while sub-graph missing"));
                    };
                    loop {
                        let go = c.run(&[state.clone(), ca.clone()].concat())?;
                        if go[0].item()? == 0.0 {
                            break;
                        }
                        state = b.run(&[state, ba.clone()].concat())?;
                    }
                    state
                }
                NodeKind::GetItem { of, index } => vec![self.slots[*of][*index].clone()],
            };
            self.slots[i] = value;
            for &v in &self.plan.free_after[i] {
                self.slots[v].clear();
            }
        }
        Ok(())
    }
}
