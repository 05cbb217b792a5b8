//! Histograms with TensorBoard's default buckets: edges at ±1e-12 · 1.1^k up to 1e20,
//! 0 in between, so that one layout serves every scale. Runs of empty buckets are written
//! as one empty bucket (the run's last edge), as TensorFlow's encoder does.
//!
//! ```
//! use spore_summary::histogram::histogram;
//! let h = histogram(&[0.5, 0.5, -2.0]);
//! assert_eq!((h.min, h.max, h.num, h.sum), (-2.0, 0.5, 3.0, -1.0));
//! assert_eq!(h.bucket.iter().sum::<f64>(), 3.0);
//! ```

use std::sync::OnceLock;

use crate::proto::HistogramProto;

/// The right edges of the buckets, increasing; the last is f64::MAX.
fn edges() -> &'static [f64] {
    static EDGES: OnceLock<Vec<f64>> = OnceLock::new();
    EDGES.get_or_init(|| {
        let mut pos = vec![];
        let mut v = 1e-12;
        while v < 1e20 {
            pos.push(v);
            v *= 1.1;
        }
        let mut all: Vec<f64> = pos.iter().rev().map(|v| -v).collect();
        all.push(0.0);
        all.extend(pos);
        all.push(f64::MAX);
        all
    })
}

/// The histogram of the finite `values` (non-finite ones are left out).
pub fn histogram(values: &[f64]) -> HistogramProto {
    let edges = edges();
    let mut counts = vec![0u64; edges.len()];
    let (mut min, mut max, mut num, mut sum, mut sum_squares) = (f64::MAX, f64::MIN, 0.0, 0.0, 0.0);
    for &v in values.iter().filter(|v| v.is_finite()) {
        // The first edge at or above v.
        let i = edges.partition_point(|&e| e < v);
        counts[i.min(edges.len() - 1)] += 1;
        min = min.min(v);
        max = max.max(v);
        num += 1.0;
        sum += v;
        sum_squares += v * v;
    }
    let mut h = HistogramProto {
        min: if num > 0.0 { min } else { 0.0 },
        max: if num > 0.0 { max } else { 0.0 },
        num,
        sum,
        sum_squares,
        bucket_limit: vec![],
        bucket: vec![],
    };
    let mut empty_run: Option<f64> = None;
    for (&edge, &count) in edges.iter().zip(&counts) {
        if count == 0 {
            empty_run = Some(edge);
            continue;
        }
        if let Some(e) = empty_run.take() {
            h.bucket_limit.push(e);
            h.bucket.push(0.0);
        }
        h.bucket_limit.push(edge);
        h.bucket.push(count as f64);
    }
    h
}
