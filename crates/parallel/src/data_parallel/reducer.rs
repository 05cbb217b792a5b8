//! One step's gradient reduction: each bucket's AllReduce starts the moment the
//! backward pass has reported the bucket's last gradient, and `finish` waits for them
//! all (just before the optimizer) and hands back the reduced gradients.
//!
//! In PyNative mode `start` runs the collective's first half at once, so the
//! communication thread reduces the bucket while the backward pass computes the
//! earlier layers. In Graph mode the same calls record `AllReduceStart` and
//! `AllReduceWait` nodes in that order, and the executor runs them in it.

use spore_core::{DType, Error, Result, Tensor};
use spore_nn::distributed::GradientReduction;

use super::plan::{GradientSlot, plan_buckets};
use crate::backend::ReduceOp;
use crate::context::AllReduceFusion;
use crate::ops::bucket;

struct Bucket {
    members: Vec<usize>,
    waiting_for: usize,
    numel: usize,
    dtype: DType,
    ticket: Option<Tensor>,
}

pub(crate) struct Reducer {
    buckets: Vec<Bucket>,
    bucket_of: Vec<usize>,
    grads: Vec<Option<Tensor>>,
    shapes: Vec<Vec<usize>>,
    op: ReduceOp,
    /// The group reduced over (`None`: the world).
    group: Option<String>,
}

impl Reducer {
    pub(crate) fn new(
        weights: &[Tensor],
        fusion: &AllReduceFusion,
        op: ReduceOp,
        group: Option<String>,
    ) -> Result<Reducer> {
        let slots: Vec<GradientSlot> = weights
            .iter()
            .map(|w| GradientSlot {
                numel: w.numel(),
                dtype: w.dtype(),
            })
            .collect();
        let plan = plan_buckets(&slots, fusion)?;
        let mut bucket_of = vec![0; weights.len()];
        let buckets = plan
            .into_iter()
            .enumerate()
            .map(|(b, members)| {
                members.iter().for_each(|&i| bucket_of[i] = b);
                Bucket {
                    waiting_for: members.len(),
                    numel: members.iter().map(|&i| slots[i].numel).sum(),
                    dtype: slots[members[0]].dtype,
                    members,
                    ticket: None,
                }
            })
            .collect();
        Ok(Reducer {
            buckets,
            bucket_of,
            grads: vec![None; weights.len()],
            shapes: weights.iter().map(|w| w.shape().to_vec()).collect(),
            op,
            group,
        })
    }

    fn start(&mut self, b: usize) -> Result<()> {
        let bucket = &self.buckets[b];
        let grads: Vec<&Tensor> = bucket
            .members
            .iter()
            .map(|&i| {
                self.grads[i].as_ref().ok_or_else(|| {
                    Error::invalid(format!("data parallel: weight {i}'s gradient is missing"))
                })
            })
            .collect::<Result<_>>()?;
        let ticket = bucket::start(&grads, b, self.op, self.group.as_deref())?;
        self.buckets[b].ticket = Some(ticket);
        Ok(())
    }
}

impl GradientReduction for Reducer {
    fn gradient_ready(&mut self, index: usize, grad: &Tensor) -> Result<()> {
        let Some(&b) = self.bucket_of.get(index) else {
            return Err(Error::invalid(format!(
                "data parallel: a gradient was reported for weight {index}, but the step has {} weights",
                self.bucket_of.len()
            )));
        };
        if self.grads[index].replace(grad.clone()).is_some() {
            return Err(Error::invalid(format!(
                "data parallel: weight {index}'s gradient was reported twice"
            )));
        }
        self.buckets[b].waiting_for -= 1;
        if self.buckets[b].waiting_for == 0 {
            self.start(b)?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>, grads: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if grads.len() != self.grads.len() {
            return Err(Error::invalid(format!(
                "data parallel: expected {} gradients, got {}",
                self.grads.len(),
                grads.len()
            )));
        }
        // Weights the loss does not reach get their (zero) gradients here; their buckets
        // start now, in bucket order. (A rank whose loss reached other weights would start
        // its buckets in another order: the bucket number each AllReduce carries makes
        // that an error instead of a sum of the wrong gradients.)
        for (i, g) in grads.into_iter().enumerate() {
            if self.grads[i].is_none() {
                self.grads[i] = Some(g);
            }
        }
        for b in 0..self.buckets.len() {
            if self.buckets[b].ticket.is_none() {
                self.start(b)?;
            }
        }
        let mut reduced: Vec<Option<Tensor>> = vec![None; self.grads.len()];
        for bucket in &self.buckets {
            let Some(ticket) = &bucket.ticket else {
                return Err(Error::invalid("data parallel: a bucket was never started"));
            };
            let flat = bucket::wait(ticket, bucket.numel, bucket.dtype)?;
            let mut offset = 0;
            for &i in &bucket.members {
                let numel: usize = self.shapes[i].iter().product();
                let piece = if bucket.members.len() == 1 {
                    flat.clone()
                } else {
                    flat.narrow(0, offset, numel)?
                };
                reduced[i] = Some(piece.reshape(&self.shapes[i])?);
                offset += numel;
            }
        }
        reduced
            .into_iter()
            .enumerate()
            .map(|(i, g)| {
                g.ok_or_else(|| {
                    Error::invalid(format!("data parallel: weight {i} was in no bucket"))
                })
            })
            .collect()
    }
}
