//! MindSpore's `SummaryCollector`: a training callback that records, every
//! `collect_freq` steps, the loss and the learning rate as scalars and the trainable
//! parameters as histograms; at each epoch's end the evaluation metrics; and once, the
//! network's graph and sample input images when given.
//!
//! Gradient histograms come from a probe batch the user gives
//! ([`SummaryCollector::gradients_on`]): the loss network's gradients at the current
//! weights, in evaluation mode (so the probe changes no BatchNorm statistic), recorded
//! with the parameters. (MindSpore records the training step's own
//! gradients through summary operators inside the network; Spore's training step does not
//! expose them to callbacks.)
//!
//! ```no_run
//! use spore_summary::SummaryCollector;
//! use spore_train::callback::Callback;
//! let mut summary = SummaryCollector::new("summary_dir").collect_freq(50);
//! // model.train(10, &dataset, &mut [&mut summary], TrainConfig::default())
//! ```

use std::path::PathBuf;
use std::sync::Arc;

use spore_core::{Result, Tensor, TensorType, value_and_grad};
use spore_nn::cell::{Cell, CellCall, CellExt};
use spore_train::callback::{Callback, RunContext};

use crate::record::{Plugin, SummaryRecord};

/// A callback writing TensorBoard summaries of a training run.
pub struct SummaryCollector {
    dir: PathBuf,
    collect_freq: usize,
    histograms: bool,
    record: Option<SummaryRecord>,
    last_step: Option<usize>,
    graph: Option<(Arc<dyn Cell>, Vec<TensorType>)>,
    images: Option<(String, Tensor)>,
    probe: Option<(Arc<dyn Cell>, Vec<Tensor>)>,
}

impl SummaryCollector {
    /// Summaries in `dir` every 10 steps (MindSpore's default `collect_freq`).
    pub fn new(dir: impl Into<PathBuf>) -> SummaryCollector {
        SummaryCollector {
            dir: dir.into(),
            collect_freq: 10,
            histograms: true,
            record: None,
            last_step: None,
            graph: None,
            images: None,
            probe: None,
        }
    }

    /// Records every `n` training steps (in sink mode, at the sink after each `n`).
    pub fn collect_freq(mut self, n: usize) -> SummaryCollector {
        self.collect_freq = n.max(1);
        self
    }

    /// Whether parameter (and gradient) histograms are recorded (default: yes).
    pub fn histograms(mut self, on: bool) -> SummaryCollector {
        self.histograms = on;
        self
    }

    /// Records `network`'s forward graph for inputs of `types` when training begins.
    pub fn graph(mut self, network: Arc<dyn Cell>, types: Vec<TensorType>) -> SummaryCollector {
        self.graph = Some((network, types));
        self
    }

    /// Records `images` (`[N, C, H, W]`) under `tag` when training begins.
    pub fn images(mut self, tag: &str, images: Tensor) -> SummaryCollector {
        self.images = Some((tag.to_string(), images));
        self
    }

    /// Records gradient histograms (`gradient/<parameter>`): the gradients of
    /// `loss_network` (which returns the loss) on `inputs` at each collection.
    pub fn gradients_on(
        mut self,
        loss_network: Arc<dyn Cell>,
        inputs: Vec<Tensor>,
    ) -> SummaryCollector {
        self.probe = Some((loss_network, inputs));
        self
    }

    fn record(&mut self) -> Result<&mut SummaryRecord> {
        match &mut self.record {
            Some(r) => Ok(r),
            slot => Ok(slot.insert(SummaryRecord::new(&self.dir)?)),
        }
    }

    fn gradients(&self) -> Result<Vec<(String, Tensor)>> {
        let Some((net, inputs)) = &self.probe else {
            return Ok(vec![]);
        };
        let named: Vec<(String, spore_core::Parameter)> = net
            .parameters_and_names()
            .into_iter()
            .filter(|(_, p)| p.requires_grad())
            .collect();
        let weights: Vec<Tensor> = named.iter().map(|(_, p)| p.value()).collect();
        // In evaluation mode: the probe must not move BatchNorm's statistics or draw
        // dropout masks from the training run's random stream.
        let was = net.is_training();
        net.set_train(false);
        let n = net.clone();
        let f = move |x: &[Tensor]| -> Result<Tensor> { n.call_first(x) };
        let out = value_and_grad(f, None, &weights, false)(inputs);
        net.set_train(was);
        let out = out?;
        Ok(named
            .into_iter()
            .map(|(n, _)| n)
            .zip(out.weight_grads)
            .collect())
    }
}

impl Callback for SummaryCollector {
    fn on_train_begin(&mut self, ctx: &mut RunContext) -> Result<()> {
        // A collector used for a second `train` starts a new file and a new count.
        self.record = None;
        self.last_step = None;
        let step = ctx.cur_step_num;
        let graph = match &self.graph {
            Some((net, types)) => {
                let was = net.is_training();
                net.set_train(false);
                let n = net.clone();
                let g = spore_core::trace::trace(net.class_name(), types, move |x| n.call(x));
                net.set_train(was);
                Some(g?)
            }
            None => None,
        };
        let images = self.images.clone();
        let record = self.record()?;
        if let Some(g) = graph {
            record.set_graph(&g)?;
        }
        if let Some((tag, t)) = images {
            record.add_value(Plugin::Image, &tag, &t)?;
            record.record(step)?;
        }
        record.flush()
    }

    fn on_step_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        let step = ctx.cur_step_num;
        let due = match self.last_step {
            None => true,
            Some(last) => step >= last + self.collect_freq,
        };
        if !due {
            return Ok(());
        }
        self.last_step = Some(step);
        let params: Vec<(String, Tensor)> = match (&ctx.train_network, self.histograms) {
            (Some(net), true) => net
                .parameters_and_names()
                .into_iter()
                .filter(|(_, p)| p.requires_grad())
                .map(|(n, p)| (n, p.stored()))
                .collect(),
            _ => vec![],
        };
        let grads = if self.histograms {
            self.gradients()?
        } else {
            vec![]
        };
        let record = self.record()?;
        if let Some(loss) = ctx.loss {
            record.add_scalar("loss", loss);
        }
        if let Some(lr) = ctx.learning_rate {
            record.add_scalar("learning_rate", lr);
        }
        for (name, t) in &params {
            record.add_value(Plugin::Histogram, name, t)?;
        }
        for (name, g) in &grads {
            record.add_value(Plugin::Histogram, &format!("gradient/{name}"), g)?;
        }
        record.record(step)?;
        // A running TensorBoard sees each collection as it is written.
        record.flush()
    }

    fn on_epoch_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        let step = ctx.cur_step_num;
        let metrics = ctx.metrics.clone();
        let record = self.record()?;
        for (name, v) in &metrics {
            record.add_scalar(&format!("metric/{name}"), *v);
        }
        record.record(step)?;
        record.flush()
    }

    fn on_train_end(&mut self, _ctx: &mut RunContext) -> Result<()> {
        match self.record.take() {
            Some(mut r) => r.close(),
            None => Ok(()),
        }
    }
}
