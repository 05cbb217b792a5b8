//! `spore explain`: saliency maps and their benchmarks for a zoo model's predictions on
//! image files, written as PNGs, JSON, CSV and one HTML page (spore-xai's runner).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use spore_core::{Error, Result};
use spore_nn::cell::Cell;
use spore_xai::metrics::Faithfulness;
use spore_xai::runner::{Benchmark, ImageClassificationRunner, Sample};
use spore_xai::{
    Backprop, Explainer, GradCam, Gradient, IntegratedGradients, Occlusion, Rise, SmoothGrad,
};

use super::ZooModel;
use super::data::image_input;
use super::run::load_network;

/// Every method `--methods` knows.
pub const METHODS: &str =
    "gradient,deconvolution,guidedbackprop,gradcam,integratedgradients,smoothgrad,occlusion,rise";
/// Every benchmark `--benchmarks` knows.
pub const BENCHMARKS: &str = "faithfulness,class_sensitivity,robustness";

/// Options of `spore explain`.
#[derive(Clone, Debug)]
pub struct ExplainArgs {
    pub model: ZooModel,
    pub checkpoint: PathBuf,
    pub images: PathBuf,
    /// Empty: every method the model supports.
    pub methods: Vec<String>,
    pub benchmarks: Vec<String>,
    pub out: PathBuf,
}

fn explainer(name: &str, model: ZooModel, net: &Arc<dyn Cell>) -> Result<Box<dyn Explainer>> {
    Ok(match name {
        "gradient" => Box::new(Gradient::new(net.clone())),
        "deconvolution" => Box::new(Backprop::deconvolution(net.clone())),
        "guidedbackprop" => Box::new(Backprop::guided(net.clone())),
        "gradcam" => {
            let layer = match model {
                ZooModel::LeNet => "conv2",
                ZooModel::ResNet18 => "layer4",
                ZooModel::Mlp => {
                    return Err(Error::invalid(
                        "spore explain: gradcam needs a convolutional layer; the mlp has none",
                    ));
                }
            };
            Box::new(GradCam::new(net.clone(), layer)?)
        }
        "integratedgradients" => Box::new(IntegratedGradients::new(net.clone())),
        "smoothgrad" => Box::new(SmoothGrad::new(Box::new(Gradient::new(net.clone())))),
        // 32x32 images: windows of a quarter of the side.
        "occlusion" => Box::new(Occlusion::new(net.clone()).window(8, 4)),
        "rise" => Box::new(Rise::new(net.clone()).masks(1000)),
        other => {
            return Err(Error::invalid(format!(
                "spore explain: unknown method {other:?}; choose from {METHODS}"
            )));
        }
    })
}

fn benchmarks(names: &[String]) -> Result<Vec<Benchmark>> {
    let mut out = vec![];
    for n in names {
        match n.as_str() {
            "faithfulness" => out.extend([
                Benchmark::Faithfulness(Faithfulness::Naive),
                Benchmark::Faithfulness(Faithfulness::Deletion),
                Benchmark::Faithfulness(Faithfulness::Insertion),
            ]),
            "class_sensitivity" => out.push(Benchmark::ClassSensitivity),
            "robustness" => out.push(Benchmark::Robustness),
            other => {
                return Err(Error::invalid(format!(
                    "spore explain: unknown benchmark {other:?}; choose from {BENCHMARKS}"
                )));
            }
        }
    }
    Ok(out)
}

fn image_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, format!("cannot list the images: {e}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| ["png", "jpg", "jpeg"].contains(&x.to_ascii_lowercase().as_str()))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::io(dir, "no .png, .jpg or .jpeg images here"));
    }
    Ok(files)
}

/// Runs the explanation; returns the benchmark table to print.
pub fn explain(args: &ExplainArgs) -> Result<String> {
    let names: Vec<String> = if args.methods.is_empty() {
        METHODS
            .split(',')
            .filter(|m| !(args.model == ZooModel::Mlp && *m == "gradcam"))
            .map(str::to_string)
            .collect()
    } else {
        args.methods.clone()
    };
    let benchmarks = benchmarks(&args.benchmarks)?;
    let net = load_network(args.model, &args.checkpoint)?;
    let methods: Vec<Box<dyn Explainer>> = names
        .iter()
        .map(|m| explainer(m, args.model, &net))
        .collect::<Result<_>>()?;
    let mut samples = vec![];
    for path in image_files(&args.images)? {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("image")
            .to_string();
        samples.push(Sample::new(&name, image_input(args.model, &path)?));
    }
    let classes: Vec<String> = match args.model {
        ZooModel::ResNet18 => [
            "airplane",
            "automobile",
            "bird",
            "cat",
            "deer",
            "dog",
            "frog",
            "horse",
            "ship",
            "truck",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        _ => (0..10).map(|d| d.to_string()).collect(),
    };
    let runner = ImageClassificationRunner::new(net, classes);
    let report = runner.run(&samples, &methods, &benchmarks, &args.out)?;
    let metrics: Vec<String> = {
        let mut m: Vec<String> = report
            .means
            .values()
            .flat_map(|v| v.keys().cloned())
            .collect();
        m.sort();
        m.dedup();
        m
    };
    let mut out = format!(
        "| method | ms/image | {} |\n|---|--:|{}\n",
        metrics.join(" | "),
        "--:|".repeat(metrics.len())
    );
    for m in &methods {
        let name = m.name();
        let cells: Vec<String> = metrics
            .iter()
            .map(|k| {
                report
                    .means
                    .get(&name)
                    .and_then(|v| v.get(k))
                    .map_or(String::new(), |v| format!("{v:.3}"))
            })
            .collect();
        out.push_str(&format!(
            "| {name} | {:.1} | {} |\n",
            report.millis.get(&name).copied().unwrap_or(0.0),
            cells.join(" | ")
        ));
    }
    out.push_str(&format!(
        "{} images explained; maps, scores.json, scores.csv and index.html in {}\n",
        samples.len(),
        args.out.display()
    ));
    Ok(out)
}
