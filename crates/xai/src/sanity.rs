//! The model-randomisation sanity check of "Sanity Checks for Saliency Maps" (Adebayo et
//! al., 2018): the network's layers are re-drawn at random one at a time, from the output
//! back (cascading), and after each the map is compared with the trained network's by
//! Spearman's rank correlation of absolute values. A method whose maps barely change
//! while the weights become noise explains the input, not the model. The parameters are
//! restored afterwards.
//!
//! ```
//! use spore_xai::sanity::spearman;
//! assert!((spearman(&[1.0, 5.0, 2.0], &[10.0, 30.0, 20.0]) - 1.0).abs() < 1e-12);
//! ```

use std::sync::Arc;

use spore_core::{DType, Parameter, Result, Tensor};
use spore_nn::cell::{Cell, CellExt};

use crate::common::Explainer;
use crate::metrics::pearson;

fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation (ties share their mean rank).
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    pearson(&ranks(a), &ranks(b))
}

/// For each layer with parameters, from the output back: its name and the rank
/// correlation between the map after re-drawing it (and every layer after it) and the
/// original map. `explainer` must explain `net` (it sees the re-drawn weights).
pub fn model_randomization(
    net: &Arc<dyn Cell>,
    explainer: &dyn Explainer,
    input: &Tensor,
    target: usize,
    seed: u64,
) -> Result<Vec<(String, f64)>> {
    let abs =
        |t: Tensor| -> Result<Vec<f64>> { Ok(t.to_f64_vec()?.iter().map(|v| v.abs()).collect()) };
    let original = abs(explainer.explain(input, &[target])?)?;
    let layers: Vec<(String, Vec<Parameter>)> = net
        .cells_and_names()
        .into_iter()
        .filter_map(|(name, c)| {
            let own: Vec<Parameter> = c
                .params()
                .into_iter()
                .map(|(_, p)| p)
                .filter(|p| p.requires_grad())
                .collect();
            (!own.is_empty()).then_some((name, own))
        })
        .collect();
    let saved: Vec<(Parameter, Tensor)> = layers
        .iter()
        .flat_map(|(_, ps)| ps.iter().map(|p| (p.clone(), p.stored())))
        .collect();
    let run = || -> Result<Vec<(String, f64)>> {
        let mut out = vec![];
        for (k, (name, params)) in layers.iter().rev().enumerate() {
            for (j, p) in params.iter().enumerate() {
                let v = p.stored().to_f64_vec()?;
                let n = v.len().max(1) as f64;
                let mean = v.iter().sum::<f64>() / n;
                let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
                let scale = if std > 0.0 { std } else { 0.1 };
                let s = p.tensor_type().shape.to_vec();
                let noise =
                    Tensor::randn(&s, DType::F32, Some(seed.wrapping_add((k * 31 + j) as u64)))?;
                p.store(noise.mul_scalar(scale)?);
            }
            let map = abs(explainer.explain(input, &[target])?)?;
            out.push((name.clone(), spearman(&original, &map)));
        }
        Ok(out)
    };
    let result = run();
    for (p, v) in saved {
        p.store(v);
    }
    result
}
