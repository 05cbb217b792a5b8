//! A runner in the spirit of MindSpore XAI's `ImageClassificationRunner`: a network,
//! images, explainers and benchmarks in; out come the predictions, one heat-map PNG per
//! image and method, the scores as JSON and CSV, and one self-contained HTML page (every
//! picture inline) showing, per image, the picture, the prediction and every method's
//! map, with the benchmark table (mean score per method) on top.
//!
//! ```no_run
//! use std::sync::Arc;
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! use spore_xai::runner::{Benchmark, ImageClassificationRunner, Sample};
//! use spore_xai::{Explainer, GradCam, Gradient};
//! let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
//! let labels: Vec<String> = (0..10).map(|d| d.to_string()).collect();
//! let runner = ImageClassificationRunner::new(net.clone(), labels);
//! let samples = vec![Sample::new("digit", Tensor::zeros(&[1, 1, 32, 32], DType::F32).unwrap())];
//! let methods: Vec<Box<dyn Explainer>> = vec![Box::new(Gradient::new(net.clone())), Box::new(GradCam::new(net, "conv2").unwrap())];
//! let report = runner.run(&samples, &methods, &Benchmark::ALL, "explain_out".as_ref()).unwrap();
//! ```

pub mod heatmap;
mod html;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use spore_core::{Error, Result, Tensor, no_grad};
use spore_nn::cell::Cell;

use crate::common::{Explainer, forward, in_eval};
use crate::metrics::{Faithfulness, class_sensitivity, faithfulness, localization, robustness};
use crate::perturbation::Activation;

/// One image to explain.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    /// `[1, C, H, W]`.
    pub image: Tensor,
    /// The object's mask (`H×W`), for the localization benchmark.
    pub mask: Option<Vec<bool>>,
}

impl Sample {
    pub fn new(name: &str, image: Tensor) -> Sample {
        Sample {
            name: name.to_string(),
            image,
            mask: None,
        }
    }

    pub fn mask(mut self, mask: Vec<bool>) -> Sample {
        self.mask = Some(mask);
        self
    }
}

/// A benchmark the runner scores each method with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Benchmark {
    Faithfulness(Faithfulness),
    ClassSensitivity,
    Robustness,
    /// Pointing game and IoSR, for samples with a mask.
    Localization,
}

impl Benchmark {
    /// Every benchmark.
    pub const ALL: [Benchmark; 6] = [
        Benchmark::Faithfulness(Faithfulness::Naive),
        Benchmark::Faithfulness(Faithfulness::Deletion),
        Benchmark::Faithfulness(Faithfulness::Insertion),
        Benchmark::ClassSensitivity,
        Benchmark::Robustness,
        Benchmark::Localization,
    ];
}

/// What a run produced.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Per sample: its name, the predicted class's name and its probability.
    pub predictions: Vec<(String, String, f32)>,
    /// (sample, method, metric, score).
    pub scores: Vec<(String, String, String, f64)>,
    /// Per method, per metric: the mean over samples.
    pub means: BTreeMap<String, BTreeMap<String, f64>>,
    /// Per method: milliseconds per image for its maps.
    pub millis: BTreeMap<String, f64>,
}

/// Explains a classifier's predictions.
pub struct ImageClassificationRunner {
    net: Arc<dyn Cell>,
    class_names: Vec<String>,
    activation: Activation,
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::io(path, format!("cannot write: {e}")))
}

/// A file-name-safe version of `s`.
fn file_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl ImageClassificationRunner {
    /// `class_names[i]` names the network's output `i`; softmax makes probabilities.
    pub fn new(net: Arc<dyn Cell>, class_names: Vec<String>) -> ImageClassificationRunner {
        ImageClassificationRunner {
            net,
            class_names,
            activation: Activation::Softmax,
        }
    }

    /// Sigmoid for multi-label networks.
    pub fn activation(mut self, a: Activation) -> ImageClassificationRunner {
        self.activation = a;
        self
    }

    /// The predicted class of `image` and its probability.
    fn predict(&self, image: &Tensor) -> Result<(usize, f32)> {
        let logits = in_eval(&self.net, || no_grad(|| forward(&self.net, image)))?;
        let p = match self.activation {
            Activation::Softmax => logits.softmax(-1)?,
            Activation::Sigmoid => logits.sigmoid()?,
        }
        .to_vec::<f32>()?;
        p.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(k, &v)| (k, v))
            .ok_or_else(|| Error::invalid("runner: the network returned no class scores"))
    }

    /// Runs every explainer and benchmark on every sample and writes the results in
    /// `out` (created if missing).
    pub fn run(
        &self,
        samples: &[Sample],
        explainers: &[Box<dyn Explainer>],
        benchmarks: &[Benchmark],
        out: &Path,
    ) -> Result<RunReport> {
        std::fs::create_dir_all(out).map_err(|e| Error::io(out, format!("cannot create: {e}")))?;
        let mut report = RunReport::default();
        let mut pictures: Vec<(Vec<u8>, Vec<Vec<u8>>)> = vec![];
        let mut time: BTreeMap<String, (f64, usize)> = BTreeMap::new();
        for sample in samples {
            let s = sample.image.shape().to_vec();
            let [1, c, h, w] = s[..] else {
                return Err(Error::invalid(format!(
                    "runner: sample {:?} must be one image [1, C, H, W], got {s:?}",
                    sample.name
                )));
            };
            let pixels = sample.image.to_vec::<f32>()?;
            let (class, prob) = self.predict(&sample.image)?;
            let class_name = self
                .class_names
                .get(class)
                .cloned()
                .unwrap_or_else(|| class.to_string());
            report
                .predictions
                .push((sample.name.clone(), class_name, prob));
            let original = heatmap::image_png(&pixels, c, h, w)?;
            write(
                &out.join(format!("{}.png", file_name(&sample.name))),
                &original,
            )?;
            let mut maps = vec![];
            for e in explainers {
                let start = Instant::now();
                let map = e.explain(&sample.image, &[class])?;
                let t = time.entry(e.name()).or_default();
                t.0 += start.elapsed().as_secs_f64() * 1e3;
                t.1 += 1;
                let png = heatmap::heatmap_png(&pixels, c, h, w, &map.to_vec::<f32>()?)?;
                write(
                    &out.join(format!(
                        "{}_{}.png",
                        file_name(&sample.name),
                        file_name(&e.name())
                    )),
                    &png,
                )?;
                maps.push(png);
                for b in benchmarks {
                    for (metric, score) in self.score(*b, e.as_ref(), sample, class, &map)? {
                        report
                            .scores
                            .push((sample.name.clone(), e.name(), metric, score));
                    }
                }
            }
            pictures.push((original, maps));
        }
        report.millis = time
            .into_iter()
            .map(|(k, (ms, n))| (k, ms / n.max(1) as f64))
            .collect();
        let mut sums: BTreeMap<(String, String), (f64, usize)> = BTreeMap::new();
        for (_, method, metric, v) in &report.scores {
            let e = sums.entry((method.clone(), metric.clone())).or_default();
            e.0 += v;
            e.1 += 1;
        }
        for ((method, metric), (sum, n)) in sums {
            report
                .means
                .entry(method)
                .or_default()
                .insert(metric, sum / n as f64);
        }
        write(&out.join("scores.json"), scores_json(&report).as_bytes())?;
        write(&out.join("scores.csv"), scores_csv(&report).as_bytes())?;
        let names: Vec<String> = explainers.iter().map(|e| e.name()).collect();
        let page = html::page(&report, &names, &pictures);
        write(&out.join("index.html"), page.as_bytes())?;
        Ok(report)
    }

    fn score(
        &self,
        b: Benchmark,
        e: &dyn Explainer,
        sample: &Sample,
        class: usize,
        map: &Tensor,
    ) -> Result<Vec<(String, f64)>> {
        let x = &sample.image;
        Ok(match b {
            Benchmark::Faithfulness(kind) => {
                let name = match kind {
                    Faithfulness::Naive => "faithfulness_naive",
                    Faithfulness::Deletion => "faithfulness_deletion",
                    Faithfulness::Insertion => "faithfulness_insertion",
                };
                vec![(
                    name.into(),
                    faithfulness(&self.net, x, class, map, kind, 16, self.activation)?,
                )]
            }
            Benchmark::ClassSensitivity => vec![(
                "class_sensitivity".into(),
                class_sensitivity(&self.net, e, x)?,
            )],
            Benchmark::Robustness => {
                vec![("robustness".into(), robustness(e, x, class, 10, 0.1, 0)?)]
            }
            Benchmark::Localization => match &sample.mask {
                Some(mask) => {
                    let (pg, iosr) = localization(map, mask)?;
                    vec![("pointing_game".into(), pg), ("iosr".into(), iosr)]
                }
                None => vec![],
            },
        })
    }
}

fn scores_json(r: &RunReport) -> String {
    let predictions: Vec<serde_json::Value> = r
        .predictions
        .iter()
        .map(|(s, c, p)| serde_json::json!({"sample": s, "class": c, "probability": p}))
        .collect();
    let scores: Vec<serde_json::Value> = r
        .scores
        .iter()
        .map(|(s, m, k, v)| serde_json::json!({"sample": s, "method": m, "metric": k, "score": v}))
        .collect();
    serde_json::json!({
        "predictions": predictions,
        "scores": scores,
        "means": r.means,
        "milliseconds_per_image": r.millis,
    })
    .to_string()
}

fn scores_csv(r: &RunReport) -> String {
    let mut s = String::from("sample,method,metric,score\n");
    for (sample, m, k, v) in &r.scores {
        let _ = writeln!(s, "{},{m},{k},{v}", sample.replace(',', "_"));
    }
    s
}
