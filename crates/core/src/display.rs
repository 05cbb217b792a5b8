//! MindSpore-style printing: `Tensor(shape=[2, 3], dtype=Float32, value=\n[[...]])`, with
//! NumPy-like nesting and `...` summarisation of large tensors.
//!
//! ```
//! use spore_core::Tensor;
//! let t = Tensor::from_vec(vec![1.0f32, 2.5], &[2]).unwrap();
//! assert_eq!(t.to_string(), "Tensor(shape=[2], dtype=Float32, value=[ 1.0  2.5])");
//! ```

use std::fmt;

use spore_kernels::DType;

use crate::tensor::Tensor;

/// Above this many elements only the first and last few per axis are printed.
const SUMMARY_THRESHOLD: usize = 1000;
const EDGE_ITEMS: usize = 3;

fn format_value(v: f64, dtype: DType) -> String {
    match dtype {
        DType::Bool => if v != 0.0 { "True" } else { "False" }.to_string(),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => {
            let v = if dtype.is_half() {
                shortest_in(v, dtype)
            } else {
                v
            };
            if v.is_nan() {
                "nan".into()
            } else if v.is_infinite() {
                if v > 0.0 { "inf".into() } else { "-inf".into() }
            } else if v != 0.0 && (v.abs() >= 1e8 || v.abs() < 1e-4) {
                format!("{v:.8e}")
            } else {
                let s = format!("{v}");
                if s.contains('.') { s } else { format!("{s}.0") }
            }
        }
        _ => format!("{}", v as i64),
    }
}

/// The number with the fewest significant digits that rounds to the same 16-bit value as
/// `v`, as NumPy prints float16 (`0.1`, not float32's `0.099975586`).
fn shortest_in(v: f64, dtype: DType) -> f64 {
    if !v.is_finite() {
        return v;
    }
    let same = |p: f64| spore_kernels::Buffer::from_f64(dtype, &[p]).to_f64_vec()[0] == v;
    (1..=17)
        .filter_map(|digits| format!("{v:.*e}", digits - 1).parse::<f64>().ok())
        .find(|&p| same(p))
        .unwrap_or(v)
}

fn write_axis(
    out: &mut String,
    cells: &[String],
    shape: &[usize],
    width: usize,
    summarise: bool,
    depth: usize,
) {
    if shape.is_empty() {
        out.push_str(&format!("{:>width$}", cells[0]));
        return;
    }
    let n = shape[0];
    let stride: usize = shape[1..].iter().product();
    let show: Vec<Option<usize>> = if summarise && n > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS)
            .map(Some)
            .chain([None])
            .chain((n - EDGE_ITEMS..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    };
    out.push('[');
    for (k, item) in show.iter().enumerate() {
        if k > 0 {
            if shape.len() > 1 {
                out.push_str(&"\n".repeat(shape.len() - 1));
                out.push_str(&" ".repeat(depth + 1));
            } else {
                out.push(' ');
            }
        }
        match item {
            Some(i) => write_axis(
                out,
                &cells[i * stride..(i + 1) * stride],
                &shape[1..],
                width,
                summarise,
                depth + 1,
            ),
            None => out.push_str("..."),
        }
    }
    out.push(']');
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Ok(values) = self.to_f64_vec() else {
            return write!(
                f,
                "Tensor(shape={:?}, dtype={}, value=<symbolic>)",
                self.shape(),
                self.dtype()
            );
        };
        let cells: Vec<String> = values
            .iter()
            .map(|&v| format_value(v, self.dtype()))
            .collect();
        let width = cells.iter().map(|c| c.len()).max().unwrap_or(1) + 1;
        let mut body = String::new();
        if cells.is_empty() {
            body.push_str("[]");
        } else {
            write_axis(
                &mut body,
                &cells,
                self.shape(),
                width,
                values.len() > SUMMARY_THRESHOLD,
                0,
            );
        }
        let sep = if self.rank() > 1 { "\n" } else { "" };
        write!(
            f,
            "Tensor(shape={:?}, dtype={}, value={sep}{})",
            self.shape(),
            self.dtype(),
            body.trim_start_matches(' ')
        )
    }
}
