//! Keeping the ranks of a sharded job in step while it is built: a step that fails on
//! one rank fails on all (instead of leaving the others waiting in a collective), and
//! what every rank must share (the plan, the whole weights each cuts its block from)
//! is compared across ranks.
//!
//! ```
//! spore_parallel::init().unwrap();
//! // One rank agrees with itself.
//! spore_parallel::sharding::same_on_every_rank("plan", "((1, 1), (1, 4))").unwrap();
//! ```

use spore_core::{Error, Parameter, Result};

use crate::backend::ReduceOp;
use crate::collective::group_f64s;
use crate::management::{GroupInfo, group};

/// `result` on this rank, made an error on every rank of `mesh` if it is one on any: a
/// collective, so every rank of the mesh must call it at the same point.
pub(crate) fn agree<T>(mesh: &GroupInfo, result: Result<T>, what: &str) -> Result<T> {
    let failed = group_f64s(
        mesh,
        &[if result.is_ok() { 0.0 } else { 1.0 }],
        ReduceOp::Max,
    )?[0];
    match result {
        Ok(_) if failed > 0.0 => Err(Error::invalid(format!(
            "{what} failed on another rank (its error says why)"
        ))),
        other => other,
    }
}

/// FNV-1a over `bytes`, in 32 bits (exact as an f64 in a collective).
fn checksum(bytes: impl IntoIterator<Item = u8>) -> u32 {
    bytes.into_iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// A checksum of a tensor's values (in place where it is contiguous, as parameters are).
fn weights_checksum(t: &spore_core::Tensor) -> Result<u32> {
    use spore_kernels::buffer::Element;
    Ok(match t.storage() {
        Some(s) if s.layout.is_contiguous() && s.layout.offset == 0 => {
            spore_kernels::with_buffer!(&*s.buffer, v => checksum(
                v.iter().take(t.numel()).flat_map(|x| x.to_f64().to_bits().to_le_bytes())
            ))
        }
        _ => checksum(
            t.to_f64_vec()?
                .iter()
                .flat_map(|x| x.to_bits().to_le_bytes()),
        ),
    })
}

/// Fails on every rank unless all ranks passed the same `text` (a collective).
pub fn same_on_every_rank(what: &str, text: &str) -> Result<()> {
    same_on_mesh(&group(None)?, what, text)
}

/// Fails on every rank of `mesh` unless all of them passed the same `text`.
pub(crate) fn same_on_mesh(mesh: &GroupInfo, what: &str, text: &str) -> Result<()> {
    let h = f64::from(checksum(text.bytes()));
    let [high, low] = group_f64s(mesh, &[h, -h], ReduceOp::Max)?[..] else {
        return Err(Error::invalid(
            "internal: two maxima came back as another count",
        ));
    };
    if high != -low {
        return Err(Error::invalid(format!(
            "the ranks disagree on the {what}: every rank must build the same network with the same strategies and options"
        )));
    }
    Ok(())
}

/// Fails on every rank, naming the first parameter, unless every rank holds the same
/// whole values (each cuts its block from them): the ranks' seeds must agree.
pub(crate) fn check_same_weights(mesh: &GroupInfo, params: &[Parameter]) -> Result<()> {
    let sums: Vec<f64> = params
        .iter()
        .map(|p| weights_checksum(&p.stored()).map(f64::from))
        .collect::<Result<_>>()?;
    let n = mesh.size() as f64;
    let total = group_f64s(mesh, &sums, ReduceOp::Sum)?;
    let highest = group_f64s(mesh, &sums, ReduceOp::Max)?;
    for (i, p) in params.iter().enumerate() {
        // Equal on every rank exactly when the sum is n times the largest.
        if total[i] != highest[i] * n {
            return Err(Error::invalid(format!(
                "parameter {} differs between ranks before sharding: seed every rank the same (spore::set_seed) so each cuts its block from the same weights",
                p.name()
            )));
        }
    }
    Ok(())
}
