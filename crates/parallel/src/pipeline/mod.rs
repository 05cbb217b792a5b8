//! Pipeline parallelism: MindSpore's `pipeline_stages`, `cell.pipeline_stage` and
//! `PipelineCell(network, micro_size)`. Each rank runs one stage of the backbone's
//! sequence of cells on every micro-batch and passes activations to the next stage;
//! training goes through the unchanged `TrainOneStepCell` and optimizer.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! use spore_parallel::context::*;
//! use spore_parallel::pipeline::PipelineCell;
//! spore_parallel::init().unwrap();
//! // One process: one stage. Under `mpirun -n 2`, `pipeline_stages(2)` and
//! // `set_pipeline_stage(1)` on the last Dense would run it on rank 1, the rest on rank 0.
//! set_auto_parallel_context(
//!     AutoParallelUpdate::new().parallel_mode(ParallelMode::SemiAutoParallel).pipeline_stages(1),
//! ).unwrap();
//! let backbone = SequentialCell::new(vec![Dense::new(4, 8).unwrap(), ReLU::new(), Dense::new(8, 2).unwrap()]);
//! backbone.get(0).unwrap().base().set_pipeline_stage(0);
//! let net = WithLossCell::new(backbone, MSELoss::new(Reduction::Mean));
//! let pipeline = PipelineCell::new(net, 4).unwrap();
//! let opt = Momentum::new(pipeline.trainable_params(), 0.1, 0.9).unwrap();
//! let step = TrainOneStepCell::new(pipeline, opt);
//! let (x, y) = (Tensor::ones(&[8, 4], DType::F32).unwrap(), Tensor::zeros(&[8, 2], DType::F32).unwrap());
//! assert!(step.call(&[x, y]).unwrap()[0].item().unwrap() >= 0.0);
//! # reset_auto_parallel_context();
//! ```
//!
//! The schedule is GPipe's: every micro-batch forward, then every micro-batch backward
//! in reverse order, the parameters' gradients summed over the micro-batches by the
//! backward pass itself. The edges between stages are differentiable primitives
//! (`boundary`), so the ordinary backward pass of the training step is the pipeline's
//! backward, in PyNative and in Graph mode alike, and `save_graphs` shows the sends and
//! receives. Every rank is given the whole batch, whatever the context's `full_batch`
//! says (blocks per rank are a `ShardedCell` feature so far); each stage reads what it
//! needs (the first the data, the last the labels). The step's loss is the mean of the micro-batch
//! losses (equal to the whole batch's loss for a mean-reduced loss), computed on the
//! last stage and passed to the others, so every rank reports it.
//!
//! When `pipeline_stages` leaves several ranks per stage (8 ranks in 2 stages: 4 each),
//! the stages are consecutive blocks of ranks and each stage is data parallel: replica
//! `i` of a stage takes block `i` of every micro-batch and talks to replica `i` of the
//! next stage, and `TrainOneStepCell` averages the stage's gradients over its replicas
//! (MindSpore's data × pipeline mesh).
//! [`PipelineCell::sharded`] shards each stage over its ranks by strategies instead
//! (MindSpore's data × model × pipeline mesh; see `sharded`).

mod boundary;
mod replicas;
mod sharded;
mod stages;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use spore_core::{DType, Error, Parameter, Result, Tensor, TensorType};
use spore_nn::cell::{Cell, CellBase, CellCall, CellExt};
use spore_nn::wrap::WithLossCell;

use crate::context::{ParallelMode, get_auto_parallel_context};
use crate::management::{engine, group};
use crate::ops::apply_primitive;
use crate::sharding::{ShardedCell, Strategies};
use boundary::{After, Link, StageLoss, StageRecv, StageSend, Token};
pub(crate) use replicas::replica_group_of;
use sharded::{StagePlan, one, run_cells, shard_stage};
use stages::{Place, announce, announced, assign_stages};

/// Message tags: the activation type, the loss, then one activation and one gradient
/// tag per micro-batch (MPI guarantees tags up to 32767).
const TYPE_TAG: i32 = 90;
const LOSS_TAG: i32 = 91;
const FIRST_TAG: i32 = 100;
const MAX_MICRO: usize = 16_000;

/// A network with its loss, cut into pipeline stages along its backbone's cells.
pub struct PipelineCell {
    base: CellBase,
    body: Body,
    micro_size: usize,
    place: Place,
    /// The group of this stage's data-parallel replicas, when it has several.
    replicas: Option<String>,
    /// The type of the activations this stage receives, by the step's input types
    /// (announced once by the previous stage, at the first step of each input type).
    incoming: Mutex<HashMap<Vec<TensorType>, TensorType>>,
    /// The input types whose activation type this stage has announced.
    announced: Mutex<Vec<Vec<TensorType>>>,
}

/// What this rank runs of its stage.
enum Body {
    /// The stage's cells as they are, with the backbone's names for them (so that the
    /// stage's parameters keep their names in the whole network: `0.weight`), and the
    /// loss on the last stage. Several ranks of a stage are its data-parallel replicas.
    Cells {
        cells: Vec<(String, Arc<dyn Cell>)>,
        loss_fn: Option<Arc<dyn Cell>>,
    },
    /// The stage's cells (and loss) sharded over the stage's ranks, planned for
    /// batches of the global types `batch` (data, label).
    Sharded {
        stage: Arc<ShardedCell>,
        batch: Vec<TensorType>,
    },
}

/// The parts of a checked pipeline: this rank's place, and each backbone child with
/// the stage that runs it.
type Cut = (Place, Vec<(String, Arc<dyn Cell>)>, Vec<usize>);

impl PipelineCell {
    /// MindSpore's `PipelineCell(network, micro_size)`: `network`'s backbone must be a
    /// sequence of cells (`SequentialCell`), whose stages `pipeline_stage` sets; the
    /// context's `parallel_mode` must be `semi_auto_parallel` or `auto_parallel` and
    /// its `pipeline_stages` must divide the job's ranks.
    pub fn new(network: Arc<WithLossCell>, micro_size: usize) -> Result<Arc<PipelineCell>> {
        let (place, children, stage_of) = cut(&network, micro_size)?;
        let cells = children
            .into_iter()
            .zip(stage_of)
            .filter(|(_, s)| *s == place.stage)
            .map(|(c, _)| c)
            .collect();
        let body = Body::Cells {
            cells,
            loss_fn: place.is_last().then(|| network.loss_fn().clone()),
        };
        let cell =
            PipelineCell::with_body(body, micro_size, place, replicas::replica_group(&place)?);
        if let Some(g) = &cell.replicas {
            replicas::register(&cell.trainable_params(), g);
        }
        Ok(cell)
    }

    /// A pipeline whose stages are sharded over their ranks by `strategies` (data ×
    /// model × pipeline): each stage's cells, with the loss on the last stage, are
    /// planned as one [`ShardedCell`] over the stage's ranks (strategies name the ops
    /// by their paths in the whole network, `0/MatMul`), for batches of the global
    /// types `inputs` (data, label). Every rank is given the whole batch; each rank of
    /// a stage takes the whole micro-batch, which the strategies may split. With
    /// `strategy_ckpt_config`, each stage saves and loads its own file (its group's name
    /// before the extension). A failure while planning any stage is an error on every
    /// rank.
    pub fn sharded(
        network: Arc<WithLossCell>,
        micro_size: usize,
        inputs: &[TensorType],
        strategies: &Strategies,
    ) -> Result<Arc<PipelineCell>> {
        let (place, children, stage_of) = cut(&network, micro_size)?;
        let mut before = vec![];
        let mut mine = vec![];
        for (c, s) in children.into_iter().zip(stage_of) {
            match s.cmp(&place.stage) {
                std::cmp::Ordering::Less => before.push(c),
                std::cmp::Ordering::Equal => mine.push(c),
                std::cmp::Ordering::Greater => {}
            }
        }
        let mesh = replicas::stage_group(&place)?;
        let plan = StagePlan {
            before,
            mine,
            loss_fn: place.is_last().then(|| network.loss_fn().clone()),
            inputs,
            micro_size,
            mesh: &mesh,
        };
        let stage = shard_stage(plan, strategies)?;
        let body = Body::Sharded {
            stage,
            batch: inputs.to_vec(),
        };
        Ok(PipelineCell::with_body(body, micro_size, place, None))
    }

    fn with_body(
        body: Body,
        micro_size: usize,
        place: Place,
        replicas: Option<String>,
    ) -> Arc<PipelineCell> {
        Arc::new(PipelineCell {
            base: CellBase::new(),
            body,
            micro_size,
            place,
            replicas,
            incoming: Mutex::new(HashMap::new()),
            announced: Mutex::new(Vec::new()),
        })
    }

    /// This rank's stage, sharded over the stage's ranks, for a pipeline made by
    /// [`PipelineCell::sharded`] (its `gather_parameter` gives a parameter whole).
    pub fn sharded_stage(&self) -> Option<&Arc<ShardedCell>> {
        match &self.body {
            Body::Sharded { stage, .. } => Some(stage),
            Body::Cells { .. } => None,
        }
    }

    /// This rank's stage.
    pub fn stage(&self) -> usize {
        self.place.stage
    }

    fn link(&self, peer: usize, tag: i32) -> Result<Link> {
        Ok(Link {
            peer,
            tag,
            group: group(None)?,
        })
    }

    fn activation_tag(&self, micro: usize) -> i32 {
        FIRST_TAG + micro as i32
    }

    fn gradient_tag(&self, micro: usize) -> i32 {
        FIRST_TAG + (self.micro_size + micro) as i32
    }

    /// The type of the activations from the previous stage for these step inputs.
    fn incoming_type(&self, key: &[TensorType]) -> Result<TensorType> {
        let mut known = self.incoming.lock().map_err(|_| poisoned())?;
        if let Some(t) = known.get(key) {
            return Ok(t.clone());
        }
        let t = announced(&group(None)?, self.place.prev(), TYPE_TAG)?;
        known.insert(key.to_vec(), t.clone());
        Ok(t)
    }

    /// Tells the next stage the type of `h`, once per input types.
    fn announce_once(&self, key: &[TensorType], h: &Tensor) -> Result<()> {
        let mut done = self.announced.lock().map_err(|_| poisoned())?;
        if !done.iter().any(|k| k == key) {
            announce(&group(None)?, h.tensor_type(), self.place.next(), TYPE_TAG)?;
            done.push(key.to_vec());
        }
        Ok(())
    }

    /// This rank's share of micro-batch `m` of `x` (along its first axis): the
    /// micro-batch itself, or its block for this data-parallel replica of the stage.
    fn micro(&self, x: &Tensor, m: usize, what: &str) -> Result<Tensor> {
        let batch = x.shape().first().copied().unwrap_or(0);
        // Replicas of a stage take blocks of each micro-batch; sharded stages take it
        // whole (their strategies split it).
        let (blocks, block) = match self.body {
            Body::Cells { .. } => (self.place.per_stage, self.place.replica()),
            Body::Sharded { .. } => (1, 0),
        };
        let parts = self.micro_size * blocks;
        if batch == 0 || !batch.is_multiple_of(parts) {
            return Err(Error::invalid(format!(
                "PipelineCell: the {what}'s batch of {batch} (type {}) does not split into micro_size {} equal \
                 micro-batches{}",
                x.tensor_type(),
                self.micro_size,
                match blocks {
                    1 => String::new(),
                    n => format!(" of {n} equal blocks (one per data-parallel rank of a stage)"),
                }
            )));
        }
        let len = batch / parts;
        x.narrow(0, (m * blocks + block) * len, len)
    }

    /// This stage on one micro-batch: its activation, or on the last stage its loss
    /// against `label`.
    fn run_stage(&self, x: Tensor, label: Option<Tensor>) -> Result<Tensor> {
        match (&self.body, label) {
            (Body::Cells { cells, loss_fn }, label) => {
                let h = one(run_cells(cells, vec![x])?)?;
                match (loss_fn, label) {
                    (Some(loss_fn), Some(label)) => loss_fn.call_first(&[h, label]),
                    _ => Ok(h),
                }
            }
            (Body::Sharded { stage, .. }, Some(label)) => stage.call_first(&[x, label]),
            (Body::Sharded { stage, .. }, None) => one(stage.call(&[x])?),
        }
    }
}

/// Checks the context, `micro_size` and the backbone; places this rank and its stage's cells.
fn cut(network: &WithLossCell, micro_size: usize) -> Result<Cut> {
    let ctx = get_auto_parallel_context();
    if !matches!(
        ctx.parallel_mode,
        ParallelMode::SemiAutoParallel | ParallelMode::AutoParallel
    ) {
        return Err(Error::invalid(format!(
            "PipelineCell: pipeline parallelism needs parallel_mode semi_auto_parallel or auto_parallel, \
             but it is {}",
            ctx.parallel_mode.name()
        )));
    }
    if !(1..=MAX_MICRO).contains(&micro_size) {
        return Err(Error::invalid(format!(
            "PipelineCell: micro_size must be in [1, {MAX_MICRO}], got {micro_size}"
        )));
    }
    let e = engine()?;
    let place = Place::new(e.rank, e.size, ctx.pipeline_stages)?;
    let backbone = network.backbone();
    // The stages run the backbone's children one after another, which is what a
    // SequentialCell computes; another cell's construct could do anything else.
    if backbone.class_name() != "SequentialCell" || !backbone.params().is_empty() {
        return Err(Error::invalid(format!(
            "PipelineCell: the backbone must be a SequentialCell of the cells to cut into stages, got {}",
            backbone.class_name()
        )));
    }
    let children = backbone.cells();
    let stage_of = assign_stages(&children, place.stages)?;
    Ok((place, children, stage_of))
}

fn poisoned() -> Error {
    Error::invalid("PipelineCell: a previous step panicked while holding its state")
}

impl Cell for PipelineCell {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [data, label] = inputs else {
            return Err(Error::invalid(format!(
                "PipelineCell: expected 2 inputs (data, label), got {}",
                inputs.len()
            )));
        };
        let key = [data.tensor_type().clone(), label.tensor_type().clone()];
        // Every rank holds both inputs, so a batch that does not split (or differs from
        // the one the sharded stages were planned for) fails on every rank here, before
        // any stage waits for another.
        if let Body::Sharded { batch, .. } = &self.body
            && batch[..] != key[..]
        {
            return Err(Error::invalid(format!(
                "PipelineCell: the stages were sharded for batches of (data {}, label {}) in {} micro-batches, \
                 got (data {}, label {}); build the pipeline for this batch (a smaller last batch needs \
                 drop_remainder)",
                batch[0], batch[1], self.micro_size, key[0], key[1]
            )));
        }
        self.micro(data, 0, "data")?;
        self.micro(label, 0, "label")?;
        let place = self.place;
        // Chains of tokens order this stage's sends, and its micro-batches (each after
        // the previous one's output), by micro-batch (see `boundary`).
        let anchor = Tensor::scalar(0.0f32).with_requires_grad(true);
        let mut send_token = anchor.clone();
        let mut previous = anchor;
        let incoming = match place.is_first() {
            true => None,
            false => Some(self.incoming_type(&key)?),
        };
        let mut losses = Vec::with_capacity(self.micro_size);
        for m in 0..self.micro_size {
            let x = match &incoming {
                None if m == 0 => self.micro(data, m, "data")?,
                None => apply_primitive(After, &[&self.micro(data, m, "data")?, &previous])?,
                Some(ty) => {
                    let recv = StageRecv {
                        link: self.link(place.prev(), self.activation_tag(m))?,
                        grad_tag: self.gradient_tag(m),
                        ty: ty.clone(),
                    };
                    apply_primitive(recv, &[&previous])?
                }
            };
            let label = match place.is_last() {
                true => Some(self.micro(label, m, "label")?),
                false => None,
            };
            let h = self.run_stage(x.clone(), label)?;
            // A received activation also feeds the token (with a zero gradient), so that
            // its gradient, and the send back, exist even where the stage's cells pass
            // none to it.
            previous = match &incoming {
                None => apply_primitive(Token, &[&h])?,
                Some(_) => apply_primitive(Token, &[&h, &x])?,
            };
            match place.is_last() {
                true => losses.push(h),
                false => {
                    self.announce_once(&key, &h)?;
                    let send = StageSend {
                        link: self.link(place.next(), self.activation_tag(m))?,
                        grad_tag: self.gradient_tag(m),
                    };
                    send_token = apply_primitive(send, &[&h, &send_token])?;
                }
            }
        }
        let local = match losses.split_first() {
            Some((first, rest)) => {
                let mut sum = first.clone();
                for l in rest {
                    sum = sum.add(l)?;
                }
                // Float32 on every stage: the others receive it as their tokens' type.
                sum.mul_scalar(1.0 / self.micro_size as f64)?
                    .cast(DType::F32)?
            }
            None => send_token,
        };
        // The last token joins the loss (a zero), so the last micro-batch's chain is in
        // the backward pass too.
        let local = local.add(&previous)?;
        let loss = StageLoss {
            peers: match place.is_last() {
                true => place.earlier(),
                false => vec![place.last()],
            },
            is_last: place.is_last(),
            tag: LOSS_TAG,
            group: group(None)?,
            replicas: match &self.replicas {
                Some(name) => Some(group(Some(name))?),
                None => None,
            },
        };
        Ok(vec![apply_primitive(loss, &[&local])?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        match &self.body {
            Body::Cells { cells, loss_fn } => {
                let mut out = cells.clone();
                if let Some(l) = loss_fn {
                    out.push(("_loss_fn".to_string(), l.clone()));
                }
                out
            }
            Body::Sharded { .. } => vec![],
        }
    }
    /// A sharded stage's blocks of its parameters, by their names in the network.
    fn params(&self) -> Vec<(String, Parameter)> {
        match &self.body {
            Body::Sharded { stage, .. } => stage.params(),
            Body::Cells { .. } => vec![],
        }
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "PipelineCell"
    }
}
