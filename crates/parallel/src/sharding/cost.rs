//! The cost model of a sharding plan: per device, the seconds of one training step
//! (computation from each op's local FLOP and bytes at the cluster's rates;
//! communication from an alpha-beta model of the collectives: log2(p) latencies, and
//! (p-1)/p of the data over each link) and the bytes held.
//!
//! ```
//! use spore_core::{trace::trace, DType, Tensor, TensorType};
//! use spore_parallel::sharding::{plan_cost, plan_graph, Cluster, Strategies};
//! let w = spore_core::Parameter::new(Tensor::ones(&[512, 512], DType::F32).unwrap(), "w");
//! let g = trace("f", &[TensorType::new(&[64, 512], DType::F32)], |x| {
//!     Ok(vec![x[0].matmul(&w.value())?.sum(&[0, 1], false)?])
//! }).unwrap();
//! let cluster = Cluster::example(4);
//! // Every rank computing the whole product (a strategy using one rank of the four).
//! let mut whole = Strategies::new();
//! whole.shard("MatMul", "((1, 1), (1, 1))").unwrap();
//! let alone = plan_cost(&g, &plan_graph(&g, &whole, 4).unwrap(), &cluster, 1.0);
//! let mut s = Strategies::new();
//! s.shard("MatMul", "((4, 1), (1, 1))").unwrap(); // the batch split 4 ways
//! let split = plan_cost(&g, &plan_graph(&g, &s, 4).unwrap(), &cluster, 1.0);
//! assert!(split.compute < alone.compute / 3.0);
//! assert!(split.communication > 0.0); // the weight's gradient is summed
//! ```
//!
//! A step is the forward pass, the backward pass (twice the forward's products) and the
//! communication of both: each redistribution's collective forward and its conjugate
//! backward (an AllGather's gradient is a free slice, a slice's is an AllGather), and
//! the gradient sums of values read whole by ranks computing different parts. Nothing
//! overlaps: the prediction is an upper bound where the executor overlaps.

use std::borrow::Borrow;

use spore_core::TensorType;
use spore_core::ir::flops::op_flops;
use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;

use super::layout::Layout;
use super::plan::{NodeSharding, ShardingPlan};
use super::redistribute::{Step, redistribution_steps};

/// The machine a plan is costed for (per device, and its links).
#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    pub devices: usize,
    /// FLOP/s of matrix products and convolutions.
    pub flops: f64,
    /// Bytes/s of memory-bound ops.
    pub memory_bandwidth: f64,
    /// Bytes of memory per device.
    pub memory: f64,
    /// Seconds per message (alpha).
    pub latency: f64,
    /// Bytes/s per link (1 / beta).
    pub bandwidth: f64,
}

impl Cluster {
    /// A plausible CPU cluster node (1 TFLOP/s, 100 GB/s memory, 256 GB, 25 Gb/s links
    /// with 5 us latency), for examples and plans without measurements.
    pub fn example(devices: usize) -> Cluster {
        Cluster {
            devices,
            flops: 1e12,
            memory_bandwidth: 100e9,
            memory: 256e9,
            latency: 5e-6,
            bandwidth: 25e9 / 8.0,
        }
    }
}

/// What a plan costs per device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cost {
    /// Seconds of computation (forward and backward).
    pub compute: f64,
    /// Seconds of communication (forward and backward).
    pub communication: f64,
    pub parameter_bytes: f64,
    /// One gradient per trained parameter.
    pub gradient_bytes: f64,
    /// Optimizer state (parameter bytes times the optimizer's factor).
    pub optimizer_bytes: f64,
    /// Values kept for the backward pass.
    pub activation_bytes: f64,
}

impl Cost {
    pub fn step_time(&self) -> f64 {
        self.compute + self.communication
    }
    pub fn memory(&self) -> f64 {
        self.parameter_bytes + self.gradient_bytes + self.optimizer_bytes + self.activation_bytes
    }
}

/// Messages in a row of a collective on `p` ranks: MPI libraries switch from rings to
/// recursive doubling and halving as groups grow, so latency grows with log2(p) steps
/// while each rank still moves (p-1)/p of the data.
pub(crate) fn rounds(p: f64) -> f64 {
    p.log2().ceil().min(p - 1.0)
}

/// An AllReduce (Rabenseifner: a ReduceScatter then an AllGather) of `bytes` per rank.
pub(crate) fn all_reduce(c: &Cluster, p: usize, bytes: f64) -> f64 {
    let p = p as f64;
    2.0 * rounds(p) * c.latency + 2.0 * (p - 1.0) / p * bytes / c.bandwidth
}

/// An AllGather producing (or a ReduceScatter consuming) `whole_bytes` per rank.
fn gather(c: &Cluster, p: usize, whole_bytes: f64) -> f64 {
    let p = p as f64;
    rounds(p) * c.latency + (p - 1.0) / p * whole_bytes / c.bandwidth
}

fn group_size(dev: &[usize], axes: &[usize]) -> usize {
    axes.iter().map(|&a| dev[a]).product()
}

/// Bytes of this rank's block of a tensor of type `t` laid out as `layout`.
pub(crate) fn bytes_of(t: &TensorType, layout: &Layout) -> f64 {
    let local = layout
        .local_shape(&t.shape)
        .unwrap_or_else(|_| t.shape.to_vec());
    (local.iter().product::<usize>() * t.dtype.size_in_bytes()) as f64
}

/// Seconds of one redistribution: forward, and backward where a gradient flows.
pub fn redistribution_time(
    c: &Cluster,
    t: &TensorType,
    from: &Layout,
    to: &Layout,
    grad: bool,
) -> f64 {
    let Ok(steps) = redistribution_steps(from, to, &t.shape) else {
        return f64::INFINITY;
    };
    // This rank's block as the steps reshape it.
    let mut local = from
        .local_shape(&t.shape)
        .unwrap_or_else(|_| t.shape.to_vec());
    let element = t.dtype.size_in_bytes() as f64;
    let mut total = 0.0;
    for step in steps {
        let here = local.iter().product::<usize>() as f64 * element;
        let (forward, backward) = match &step {
            Step::AllReduce { dev, axes } => (all_reduce(c, group_size(dev, axes), here), 0.0),
            Step::ReduceScatter { dim, dev, axis } => {
                let p = group_size(dev, &[*axis]);
                local[*dim] /= p;
                (gather(c, p, here), gather(c, p, here))
            }
            Step::AllGather { dim, dev, axis } => {
                let p = group_size(dev, &[*axis]);
                local[*dim] *= p;
                (gather(c, p, here * p as f64), 0.0)
            }
            Step::Slice { dim, dev, axis } => {
                let p = group_size(dev, &[*axis]);
                local[*dim] /= p;
                (0.0, gather(c, p, here))
            }
            Step::AllToAll {
                split_dim,
                concat_dim,
                dev,
                axis,
            } => {
                let p = group_size(dev, &[*axis]);
                local[*split_dim] /= p;
                local[*concat_dim] *= p;
                // Each rank keeps 1/p of its block and sends the rest, one part per peer.
                (gather(c, p, here), gather(c, p, here))
            }
        };
        total += forward + if grad { backward } else { 0.0 };
    }
    total
}

/// Which values a gradient flows into: floats computed from parameters.
pub fn needs_grad(g: &Graph) -> Vec<bool> {
    let mut grad = vec![false; g.nodes.len()];
    for (id, n) in g.nodes.iter().enumerate() {
        let float = n.ty().dtype.is_float();
        grad[id] = float
            && match &n.kind {
                NodeKind::Parameter(p) => g.params[*p].requires_grad(),
                NodeKind::Op { op, args } => {
                    !matches!(op, Op::StopGradient) && args.iter().any(|&a| grad[a])
                }
                _ => false,
            };
    }
    grad
}

/// One op's seconds (computation and communication, forward and backward) given the
/// layouts planned so far. `free_args[k]`: input `k` is a parameter stored as the op
/// wants it (no redistribution).
pub fn op_time<N: Borrow<NodeSharding>>(
    g: &Graph,
    nodes: &[N],
    id: usize,
    c: &Cluster,
    grad: &[bool],
    free_args: &[bool],
) -> (f64, f64) {
    let node = &g.nodes[id];
    let (NodeKind::Op { op, args }, Some(plan)) = (&node.kind, &nodes[id].borrow().op) else {
        return (0.0, 0.0);
    };
    let local = |t: &TensorType, l: &Layout| {
        TensorType::new(
            &l.local_shape(&t.shape).unwrap_or_else(|_| t.shape.to_vec()),
            t.dtype,
        )
    };
    let arg_types: Vec<TensorType> = args
        .iter()
        .zip(&plan.args)
        .map(|(&a, l)| local(g.nodes[a].ty(), l))
        .collect();
    let out_type = local(node.ty(), &plan.out);
    let refs: Vec<&TensorType> = arg_types.iter().collect();
    let flop = op_flops(op, &refs, &out_type) as f64;
    let backward = if grad[id] { 2.0 } else { 0.0 };
    let compute = if flop > 0.0 {
        flop * (1.0 + backward) / c.flops
    } else {
        let moved: usize = arg_types
            .iter()
            .chain([&out_type])
            .map(|t| t.shape.iter().product::<usize>() * t.dtype.size_in_bytes())
            .sum();
        moved as f64 * (1.0 + backward) / c.memory_bandwidth
    };
    let mut comm = 0.0;
    for (k, &a) in args.iter().enumerate() {
        let t = g.nodes[a].ty();
        if !free_args.get(k).copied().unwrap_or(false) {
            comm += redistribution_time(c, t, &nodes[a].borrow().out, &plan.args[k], grad[a]);
        }
        if grad[a] && !plan.marks[k].is_empty() {
            let p = group_size(&plan.args[k].dev, &plan.marks[k]);
            comm += all_reduce(c, p, bytes_of(t, &plan.args[k]));
        }
    }
    if let Some(result) = &plan.result {
        comm += redistribution_time(c, node.ty(), &plan.out, result, grad[id]);
    }
    (compute, comm)
}

/// The cost of a whole plan; `optimizer_factor` is the optimizer's state per parameter
/// byte (1 for Momentum, 2 for Adam).
pub fn plan_cost(g: &Graph, plan: &ShardingPlan, c: &Cluster, optimizer_factor: f64) -> Cost {
    let grad = needs_grad(g);
    let mut cost = Cost::default();
    // Parameters that train have a gradient and optimizer state.
    let mut trained_bytes = 0.0;
    for (id, node) in g.nodes.iter().enumerate() {
        let (compute, comm) = op_time(g, &plan.nodes, id, c, &grad, &[]);
        cost.compute += compute;
        cost.communication += comm;
        match node.kind {
            NodeKind::Parameter(p) => {
                let b = bytes_of(node.ty(), &plan.params[p]);
                cost.parameter_bytes += b;
                if g.params[p].requires_grad() {
                    trained_bytes += b;
                }
            }
            NodeKind::Op { .. } if grad[id] => {
                cost.activation_bytes += bytes_of(node.ty(), &plan.nodes[id].out);
            }
            _ => {}
        }
    }
    for &o in &g.outputs {
        let t = g.nodes[o].ty();
        let whole = Layout::replicated(plan.devices, t.shape.len());
        cost.communication += redistribution_time(c, t, &plan.nodes[o].out, &whole, false);
    }
    cost.gradient_bytes = trained_bytes;
    cost.optimizer_bytes = trained_bytes * optimizer_factor;
    cost
}
