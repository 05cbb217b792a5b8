//! Metrics (MindSpore's `nn.metrics`): accumulate over batches with `update`, read with
//! `eval`, reset with `clear`. Inputs are logits (or scores) `[N, C]` and integer labels `[N]`.
//!
//! ```
//! use spore_train::metrics::{Accuracy, Metric};
//! use spore_core::Tensor;
//! let mut acc = Accuracy::new();
//! let logits = Tensor::from_vec(vec![0.1f32, 0.9, 0.8, 0.2], &[2, 2]).unwrap();
//! acc.update(&logits, &Tensor::from_vec(vec![1i32, 1], &[2]).unwrap(), None).unwrap();
//! assert_eq!(acc.eval(), 0.5);
//! ```

use spore_core::{Error, Result, Tensor};

/// A quantity accumulated over an evaluation.
pub trait Metric: Send {
    fn name(&self) -> String;
    fn clear(&mut self);
    /// Adds one batch: predictions `[N, C]`, labels `[N]`, and (for `Loss`) the batch loss.
    fn update(&mut self, predictions: &Tensor, labels: &Tensor, loss: Option<f64>) -> Result<()>;
    fn eval(&self) -> f64;
    /// The sums `eval` is computed from (counts, totals), so that a data-parallel job
    /// can add them up over its ranks; `None` when the metric cannot be combined so.
    fn state(&self) -> Option<Vec<f64>> {
        None
    }
    /// Replaces the sums with `state` (the same length `state` gave).
    fn set_state(&mut self, state: &[f64]) -> Result<()> {
        let _ = state;
        Err(Error::invalid(format!(
            "the metric '{}' cannot be combined across ranks: implement Metric::state and set_state",
            self.name()
        )))
    }
}

/// `state` as `n` counts for `metric`, checked.
fn counts(metric: &str, state: &[f64], n: usize) -> Result<Vec<usize>> {
    if state.len() != n
        || state
            .iter()
            .any(|v| !(v.is_finite() && *v >= 0.0 && v.fract() == 0.0))
    {
        return Err(Error::invalid(format!(
            "{metric}: expected a state of {n} counts (non-negative integers), got {state:?}"
        )));
    }
    Ok(state.iter().map(|&v| v as usize).collect())
}

/// Rows of predictions and their labels as plain vectors, checked against each other.
fn rows(predictions: &Tensor, labels: &Tensor) -> Result<(Vec<Vec<f64>>, Vec<usize>)> {
    if predictions.rank() != 2 || labels.rank() != 1 || predictions.shape()[0] != labels.shape()[0]
    {
        return Err(Error::invalid(format!(
            "metrics expect predictions [N, C] and labels [N], got {:?} and {:?}",
            predictions.shape(),
            labels.shape()
        )));
    }
    let c = predictions.shape()[1];
    let p = predictions.to_f64_vec()?;
    let l = labels.to_f64_vec()?;
    let mut out_labels = Vec::with_capacity(l.len());
    for &v in &l {
        if v < 0.0 || v as usize >= c || v.fract() != 0.0 {
            return Err(Error::invalid(format!(
                "label {v} is not a class index in 0..{c}"
            )));
        }
        out_labels.push(v as usize);
    }
    Ok((p.chunks(c.max(1)).map(|r| r.to_vec()).collect(), out_labels))
}

fn argmax(row: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

/// Fraction of samples whose top prediction is the label.
#[derive(Default)]
pub struct Accuracy {
    correct: usize,
    total: usize,
}

impl Accuracy {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Metric for Accuracy {
    fn name(&self) -> String {
        "accuracy".into()
    }
    fn clear(&mut self) {
        *self = Self::default();
    }
    fn update(&mut self, p: &Tensor, l: &Tensor, _: Option<f64>) -> Result<()> {
        let (rows, labels) = rows(p, l)?;
        self.correct += rows
            .iter()
            .zip(&labels)
            .filter(|(r, y)| argmax(r) == **y)
            .count();
        self.total += labels.len();
        Ok(())
    }
    fn eval(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.correct as f64 / self.total as f64
        }
    }
    fn state(&self) -> Option<Vec<f64>> {
        Some(vec![self.correct as f64, self.total as f64])
    }
    fn set_state(&mut self, state: &[f64]) -> Result<()> {
        let c = counts("accuracy", state, 2)?;
        (self.correct, self.total) = (c[0], c[1]);
        Ok(())
    }
}

/// Mean of the batch losses, weighted by batch size.
#[derive(Default)]
pub struct Loss {
    sum: f64,
    count: usize,
}

impl Loss {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Metric for Loss {
    fn name(&self) -> String {
        "loss".into()
    }
    fn clear(&mut self) {
        *self = Self::default();
    }
    fn update(&mut self, p: &Tensor, _: &Tensor, loss: Option<f64>) -> Result<()> {
        let loss = loss.ok_or_else(|| Error::invalid("the Loss metric needs the batch loss"))?;
        let n = p.shape().first().copied().unwrap_or(1);
        self.sum += loss * n as f64;
        self.count += n;
        Ok(())
    }
    fn eval(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }
    fn state(&self) -> Option<Vec<f64>> {
        Some(vec![self.sum, self.count as f64])
    }
    fn set_state(&mut self, state: &[f64]) -> Result<()> {
        let [sum, count] = state else {
            return Err(Error::invalid(format!(
                "loss: expected a state of 2 values, got {state:?}"
            )));
        };
        self.count = counts("loss", &[*count], 1)?[0];
        self.sum = *sum;
        Ok(())
    }
}

/// Fraction of samples whose label is among the `k` highest predictions.
pub struct TopKAccuracy {
    k: usize,
    hit: usize,
    total: usize,
}

impl TopKAccuracy {
    pub fn new(k: usize) -> Self {
        TopKAccuracy {
            k: k.max(1),
            hit: 0,
            total: 0,
        }
    }
}

impl Metric for TopKAccuracy {
    fn name(&self) -> String {
        format!("top_{}_accuracy", self.k)
    }
    fn clear(&mut self) {
        self.hit = 0;
        self.total = 0;
    }
    fn update(&mut self, p: &Tensor, l: &Tensor, _: Option<f64>) -> Result<()> {
        let (rows, labels) = rows(p, l)?;
        for (r, &y) in rows.iter().zip(&labels) {
            // Rank of the label's score: how many classes score strictly higher.
            let higher = r.iter().filter(|&&v| v > r[y]).count();
            if higher < self.k {
                self.hit += 1;
            }
        }
        self.total += labels.len();
        Ok(())
    }
    fn eval(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.hit as f64 / self.total as f64
        }
    }
    fn state(&self) -> Option<Vec<f64>> {
        Some(vec![self.hit as f64, self.total as f64])
    }
    fn set_state(&mut self, state: &[f64]) -> Result<()> {
        let c = counts(&self.name(), state, 2)?;
        (self.hit, self.total) = (c[0], c[1]);
        Ok(())
    }
}

/// Counts of (label, prediction) pairs; rows are labels, columns predictions.
pub struct ConfusionMatrix {
    classes: usize,
    counts: Vec<usize>,
}

impl ConfusionMatrix {
    pub fn new(classes: usize) -> Self {
        ConfusionMatrix {
            classes,
            counts: vec![0; classes * classes],
        }
    }
    pub fn matrix(&self) -> Vec<Vec<usize>> {
        self.counts
            .chunks(self.classes.max(1))
            .map(|r| r.to_vec())
            .collect()
    }
    fn add(&mut self, p: &Tensor, l: &Tensor) -> Result<()> {
        let (rows, labels) = rows(p, l)?;
        if p.shape()[1] != self.classes {
            return Err(Error::invalid(format!(
                "ConfusionMatrix of {} classes got predictions {:?}",
                self.classes,
                p.shape()
            )));
        }
        for (r, &y) in rows.iter().zip(&labels) {
            self.counts[y * self.classes + argmax(r)] += 1;
        }
        Ok(())
    }
    fn tp(&self, c: usize) -> f64 {
        self.counts[c * self.classes + c] as f64
    }
    fn predicted(&self, c: usize) -> f64 {
        (0..self.classes)
            .map(|r| self.counts[r * self.classes + c])
            .sum::<usize>() as f64
    }
    fn actual(&self, c: usize) -> f64 {
        self.counts[c * self.classes..(c + 1) * self.classes]
            .iter()
            .sum::<usize>() as f64
    }
    /// Per-class precision, recall and F1 (0 where undefined).
    pub fn per_class(&self) -> Vec<(f64, f64, f64)> {
        (0..self.classes)
            .map(|c| {
                let p = if self.predicted(c) > 0.0 {
                    self.tp(c) / self.predicted(c)
                } else {
                    0.0
                };
                let r = if self.actual(c) > 0.0 {
                    self.tp(c) / self.actual(c)
                } else {
                    0.0
                };
                let f = if p + r > 0.0 {
                    2.0 * p * r / (p + r)
                } else {
                    0.0
                };
                (p, r, f)
            })
            .collect()
    }
}

impl Metric for ConfusionMatrix {
    fn name(&self) -> String {
        "confusion_matrix_trace".into()
    }
    fn clear(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
    }
    fn update(&mut self, p: &Tensor, l: &Tensor, _: Option<f64>) -> Result<()> {
        self.add(p, l)
    }
    /// The fraction of samples on the diagonal (the matrix itself: [`ConfusionMatrix::matrix`]).
    fn eval(&self) -> f64 {
        let total: usize = self.counts.iter().sum();
        if total == 0 {
            0.0
        } else {
            (0..self.classes).map(|c| self.tp(c)).sum::<f64>() / total as f64
        }
    }
    fn state(&self) -> Option<Vec<f64>> {
        Some(self.counts.iter().map(|&c| c as f64).collect())
    }
    fn set_state(&mut self, state: &[f64]) -> Result<()> {
        self.counts = counts("confusion matrix", state, self.counts.len())?;
        Ok(())
    }
}

/// Which per-class score a [`ClassScore`] reports, macro-averaged over classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Score {
    Precision,
    Recall,
    F1,
}

/// Macro-averaged precision, recall or F1 over `classes` classes.
pub struct ClassScore {
    score: Score,
    matrix: ConfusionMatrix,
}

impl ClassScore {
    pub fn new(score: Score, classes: usize) -> Self {
        ClassScore {
            score,
            matrix: ConfusionMatrix::new(classes),
        }
    }
}

/// Macro-averaged precision.
pub fn precision(classes: usize) -> ClassScore {
    ClassScore::new(Score::Precision, classes)
}
/// Macro-averaged recall.
pub fn recall(classes: usize) -> ClassScore {
    ClassScore::new(Score::Recall, classes)
}
/// Macro-averaged F1.
pub fn f1(classes: usize) -> ClassScore {
    ClassScore::new(Score::F1, classes)
}

impl Metric for ClassScore {
    fn name(&self) -> String {
        match self.score {
            Score::Precision => "precision",
            Score::Recall => "recall",
            Score::F1 => "f1",
        }
        .into()
    }
    fn clear(&mut self) {
        self.matrix.clear();
    }
    fn update(&mut self, p: &Tensor, l: &Tensor, _: Option<f64>) -> Result<()> {
        self.matrix.add(p, l)
    }
    fn eval(&self) -> f64 {
        let per = self.matrix.per_class();
        let pick = |t: &(f64, f64, f64)| match self.score {
            Score::Precision => t.0,
            Score::Recall => t.1,
            Score::F1 => t.2,
        };
        per.iter().map(pick).sum::<f64>() / per.len().max(1) as f64
    }
    fn state(&self) -> Option<Vec<f64>> {
        self.matrix.state()
    }
    fn set_state(&mut self, state: &[f64]) -> Result<()> {
        self.matrix.set_state(state)
    }
}
