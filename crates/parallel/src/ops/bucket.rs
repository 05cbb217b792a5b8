//! A gradient bucket's AllReduce in two ops, so that communication overlaps computing:
//! `AllReduceStart` copies the bucket's gradients into one buffer, hands it to the
//! communication thread and returns at once with a ticket (an Int64 scalar);
//! `AllReduceWait` waits for that ticket's result, a flat tensor of the bucket's
//! elements. Data parallelism starts a bucket as soon as the backward pass has finished
//! its gradients and waits only before the optimizer, both in PyNative mode (as the
//! backward pass runs) and in Graph mode (where the two are nodes the executor runs in
//! that order). The wait's time in the profiler is the communication left exposed.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_parallel::{init, ReduceOp};
//! use spore_parallel::ops::bucket::{start, wait};
//! init().unwrap();
//! let g = [Tensor::ones(&[2], spore_core::DType::F32).unwrap(), Tensor::ones(&[1, 1], spore_core::DType::F32).unwrap()];
//! let ticket = start(&g.iter().collect::<Vec<_>>(), 0, ReduceOp::Mean, None).unwrap();
//! assert_eq!(wait(&ticket, 3, spore_core::DType::F32).unwrap().to_vec::<f32>().unwrap(), [1.0, 1.0, 1.0]);
//! ```

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use spore_core::prims::custom::CustomPrimitive;
use spore_core::{DType, Error, Result, Tensor, TensorType};
use spore_kernels::Buffer;

use super::{apply_primitive, check_reducible, result_tensor, shared_buffer};
use crate::backend::ReduceOp;
use crate::collective::{self, InFlight};
use crate::management::{GroupInfo, group};

/// Reductions started and not yet waited for, by ticket.
static IN_FLIGHT: Mutex<Option<HashMap<i64, InFlight>>> = Mutex::new(None);
static NEXT_TICKET: AtomicI64 = AtomicI64::new(1);

fn in_flight<R>(f: impl FnOnce(&mut HashMap<i64, InFlight>) -> R) -> R {
    let mut g = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// Starts the reduction of bucket number `bucket`, `grads` (one dtype) as one flat
/// buffer; returns the ticket. Every rank must start the same buckets in the same order
/// (a bucket started out of order is an error naming both bucket numbers).
#[track_caller]
pub fn start(
    grads: &[&Tensor],
    bucket: usize,
    op: ReduceOp,
    group_name: Option<&str>,
) -> Result<Tensor> {
    apply_primitive(
        AllReduceStart {
            op,
            bucket,
            group: group(group_name)?,
        },
        grads,
    )
}

/// Waits for `ticket`'s reduction: `numel` elements of `dtype`, flat.
#[track_caller]
pub fn wait(ticket: &Tensor, numel: usize, dtype: DType) -> Result<Tensor> {
    apply_primitive(AllReduceWait { numel, dtype }, &[ticket])
}

#[derive(Debug, Clone)]
pub(crate) struct AllReduceStart {
    pub(crate) op: ReduceOp,
    pub(crate) bucket: usize,
    pub(crate) group: GroupInfo,
}

/// The bucket's elements, in input order, as one buffer: a recycled one (a bucket of the
/// same size comes back every step), filled straight from the gradients' memory.
fn flatten(grads: &[&Tensor]) -> std::result::Result<Buffer, String> {
    let first = grads
        .first()
        .ok_or("a bucket needs at least one gradient")?;
    let total = grads.iter().map(|g| g.numel()).sum();
    let mut flat = crate::recycle::take(first.dtype(), total);
    let mut at = 0;
    for g in grads {
        let part = shared_buffer(g)?;
        let n = part.len();
        match (&mut flat, &*part) {
            (Buffer::F32(a), Buffer::F32(b)) => a[at..at + n].copy_from_slice(b),
            (Buffer::F64(a), Buffer::F64(b)) => a[at..at + n].copy_from_slice(b),
            (Buffer::F16(a), Buffer::F16(b)) => a[at..at + n].copy_from_slice(b),
            (Buffer::BF16(a), Buffer::BF16(b)) => a[at..at + n].copy_from_slice(b),
            (a, b) => {
                return Err(format!(
                    "a bucket's gradients must share one floating-point dtype, got {} and {}",
                    a.dtype(),
                    b.dtype()
                ));
            }
        }
        at += n;
    }
    Ok(flat)
}

impl CustomPrimitive for AllReduceStart {
    fn name(&self) -> &str {
        "AllReduceStart"
    }
    fn attributes(&self) -> String {
        format!(
            "op={}, bucket={}, group={}",
            self.op.name(),
            self.bucket,
            self.group.name
        )
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let first = inputs.first().ok_or("expected at least one gradient")?;
        for t in inputs {
            if t.dtype != first.dtype {
                return Err(format!(
                    "a bucket's gradients must share one dtype, got {} and {}",
                    first.dtype, t.dtype
                ));
            }
        }
        check_reducible(self.op, first.dtype)?;
        Ok(TensorType::new(&[], DType::I64))
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        // One gradient is sent from its own memory; a flattened bucket's buffer goes back
        // to the pool once sent.
        let send = match inputs {
            [one] => shared_buffer(one)?,
            _ => crate::recycle::track(flatten(inputs)?),
        };
        let len = send.len();
        let attribute = collective::bucket_attribute(self.op, self.bucket);
        let flight = collective::all_reduce_start(&self.group, send, &[len], self.op, attribute)
            .map_err(|e| e.to_string())?;
        let ticket = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
        in_flight(|m| m.insert(ticket, flight));
        Ok(Tensor::scalar(ticket))
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(Error::invalid(
            "AllReduceStart is part of a training step's gradient reduction and is not differentiable",
        ))
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

#[derive(Debug, Clone)]
pub(crate) struct AllReduceWait {
    pub(crate) numel: usize,
    pub(crate) dtype: DType,
}

impl CustomPrimitive for AllReduceWait {
    fn name(&self) -> &str {
        "AllReduceWait"
    }
    fn attributes(&self) -> String {
        format!("numel={}, dtype={}", self.numel, self.dtype)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        match inputs {
            [t] if t.dtype == DType::I64 && t.shape.is_empty() => {
                Ok(TensorType::new(&[self.numel], self.dtype))
            }
            _ => Err("expected one ticket (an Int64 scalar from AllReduceStart)".into()),
        }
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let ticket = inputs
            .first()
            .ok_or("expected one ticket")?
            .item()
            .map_err(|e| e.to_string())? as i64;
        let flight = in_flight(|m| m.remove(&ticket))
            .ok_or_else(|| format!("no reduction in flight for ticket {ticket}"))?;
        let data = flight.wait().map_err(|e| e.to_string())?;
        if data.len() != self.numel || data.dtype() != self.dtype {
            return Err(format!(
                "the reduction returned {} {} elements, expected {} {}",
                data.len(),
                data.dtype(),
                self.numel,
                self.dtype
            ));
        }
        result_tensor(data, &[self.numel])
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(Error::invalid(
            "AllReduceWait is part of a training step's gradient reduction and is not differentiable",
        ))
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}
