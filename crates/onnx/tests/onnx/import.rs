//! Every fixture imported and run in PyNative and Graph mode, within 1e-5 of onnxruntime.

use std::path::Path;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{DType, Tensor};
use spore_nn::prelude::*;

use crate::{python, read_npy, temp_dir};

fn worst(a: &Tensor, b: &Tensor) -> f64 {
    let (x, y) = (
        a.cast(DType::F64).unwrap().to_vec::<f64>().unwrap(),
        b.cast(DType::F64).unwrap().to_vec::<f64>().unwrap(),
    );
    if x.len() != y.len() {
        return f64::INFINITY;
    }
    x.iter()
        .zip(&y)
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f64::max)
}

#[test]
fn every_fixture_matches_onnxruntime_in_both_modes() {
    let dir = temp_dir("fixtures");
    python("fixtures.py", &[&dir]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let mut failures = vec![];
    let mut compared = 0;
    let mut largest: f64 = 0.0;
    let entries = manifest.as_array().unwrap();
    for e in entries {
        let name = e["name"].as_str().unwrap();
        let net = match spore_onnx::import(Path::new(e["model"].as_str().unwrap())) {
            Ok(n) => n,
            Err(err) => {
                failures.push(format!("{name}: import failed: {err}"));
                continue;
            }
        };
        let inputs: Vec<Tensor> = e["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| read_npy(Path::new(p.as_str().unwrap())))
            .collect();
        let expected: Vec<Tensor> = e["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| read_npy(Path::new(p.as_str().unwrap())))
            .collect();
        for mode in [Mode::PyNative, Mode::Graph] {
            set_context(ContextUpdate::new().mode(mode)).unwrap();
            let got = net.call(&inputs);
            set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
            match got {
                Err(err) => failures.push(format!("{name} ({mode:?}): {err}")),
                Ok(got) => {
                    if got.len() != expected.len() {
                        failures.push(format!(
                            "{name} ({mode:?}): {} outputs, onnxruntime {}",
                            got.len(),
                            expected.len()
                        ));
                    }
                    for (k, (g, x)) in got.iter().zip(&expected).enumerate() {
                        if g.shape() != x.shape() {
                            failures.push(format!(
                                "{name} ({mode:?}) output {k}: shape {:?}, onnxruntime {:?}",
                                g.shape(),
                                x.shape()
                            ));
                            continue;
                        }
                        let d = worst(g, x);
                        compared += 1;
                        largest = largest.max(d);
                        if d > 1e-5 {
                            failures
                                .push(format!("{name} ({mode:?}) output {k}: differs by {d:e}"));
                        }
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{} fixtures, {compared} outputs compared, largest difference {largest:e}",
        entries.len()
    );
    let outputs: usize = entries
        .iter()
        .map(|e| e["outputs"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(
        failures.is_empty(),
        "{} of {} fixtures fail:\n{}",
        failures.len(),
        entries.len(),
        failures.join("\n")
    );
    assert_eq!(compared, 2 * outputs, "every output, in two modes");
}
