//! `spore run model.onnx --input x.npy`: an ONNX model imported and run on NumPy inputs,
//! as onnxruntime's tools do; prints each output's shape and the time per run, and saves
//! the outputs as `.npy` when asked.

use std::path::{Path, PathBuf};
use std::time::Instant;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::debug::npy;
use spore_core::{Error, Result, Tensor};
use spore_nn::cell::CellCall;

/// Runs the model; returns the report.
pub fn run_onnx(
    model: &Path,
    inputs: &[PathBuf],
    outputs: &[PathBuf],
    mode: Mode,
    repeat: usize,
) -> Result<String> {
    let net = spore_onnx::import(model)?;
    let xs: Vec<Tensor> = inputs
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).map_err(|e| Error::io(p, format!("cannot read: {e}")))?;
            npy::decode(&bytes).map_err(|e| Error::io(p, e.to_string()))
        })
        .collect::<Result<_>>()?;
    let before = spore_core::context::mode();
    set_context(ContextUpdate::new().mode(mode))?;
    let timed = || -> Result<(Vec<Tensor>, f64)> {
        // One warm-up run (Graph mode compiles here), then the timed ones.
        let ys = net.call(&xs)?;
        let start = Instant::now();
        for _ in 0..repeat {
            std::hint::black_box(net.call(&xs)?);
        }
        Ok((
            ys,
            start.elapsed().as_secs_f64() * 1e3 / repeat.max(1) as f64,
        ))
    };
    let result = timed();
    set_context(ContextUpdate::new().mode(before))?;
    let (ys, per) = result?;
    if outputs.len() > ys.len() {
        return Err(Error::invalid(format!(
            "spore run: {} --output files for a model with {} outputs",
            outputs.len(),
            ys.len()
        )));
    }
    let mut report = String::new();
    for (k, y) in ys.iter().enumerate() {
        report.push_str(&format!(
            "output {k} ({}): {:?} {:?}\n",
            net.outputs[k],
            y.dtype(),
            y.shape()
        ));
        if let Some(p) = outputs.get(k) {
            std::fs::write(p, npy::encode(y)?)
                .map_err(|e| Error::io(p, format!("cannot write: {e}")))?;
        }
    }
    report.push_str(&format!(
        "{per:.3} ms per run ({repeat} runs, {mode:?} mode)\n"
    ));
    Ok(report)
}
