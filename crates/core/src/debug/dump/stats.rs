//! Tensor statistics for `statistic.csv`: max, min, L2 norm and NaN/Inf counts.
//!
//! ```
//! use spore_core::{debug::dump::stats::TensorStats, Tensor};
//! let s = TensorStats::of(&Tensor::from_vec(vec![3.0f32, -4.0, f32::NAN], &[3]).unwrap()).unwrap();
//! assert_eq!((s.max, s.min, s.l2norm, s.nan), (3.0, -4.0, 5.0, 1));
//! ```

use crate::error::Result;
use crate::tensor::Tensor;

#[derive(Clone, Debug, PartialEq)]
pub struct TensorStats {
    /// Over the finite elements (NaN and infinities are counted separately).
    pub max: f64,
    pub min: f64,
    pub l2norm: f64,
    pub nan: usize,
    pub neg_inf: usize,
    pub pos_inf: usize,
}

impl TensorStats {
    pub fn of(t: &Tensor) -> Result<TensorStats> {
        let v = t.to_f64_vec()?;
        let mut s = TensorStats {
            max: f64::NEG_INFINITY,
            min: f64::INFINITY,
            l2norm: 0.0,
            nan: 0,
            neg_inf: 0,
            pos_inf: 0,
        };
        for x in v {
            if x.is_nan() {
                s.nan += 1;
            } else if x == f64::INFINITY {
                s.pos_inf += 1;
            } else if x == f64::NEG_INFINITY {
                s.neg_inf += 1;
            } else {
                s.max = s.max.max(x);
                s.min = s.min.min(x);
                s.l2norm += x * x;
            }
        }
        s.l2norm = s.l2norm.sqrt();
        if s.max == f64::NEG_INFINITY {
            (s.max, s.min) = (f64::NAN, f64::NAN);
        }
        Ok(s)
    }

    /// True when some element is NaN or infinite (an overflow).
    pub fn overflowed(&self) -> bool {
        self.nan + self.neg_inf + self.pos_inf > 0
    }
}

/// The header of `statistic.csv` (MindSpore's columns plus NaN/Inf counts).
pub const STATISTIC_HEADER: &str = "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,L2Norm Value,NaN Count,Negative Inf Count,Positive Inf Count";

/// NumPy's name for a dtype (`float32`, ...), as MindSpore writes it.
pub fn dtype_name(t: &Tensor) -> &'static str {
    match t.dtype() {
        spore_kernels::DType::F32 => "float32",
        spore_kernels::DType::F64 => "float64",
        spore_kernels::DType::F16 => "float16",
        spore_kernels::DType::BF16 => "bfloat16",
        spore_kernels::DType::I32 => "int32",
        spore_kernels::DType::I64 => "int64",
        spore_kernels::DType::U8 => "uint8",
        spore_kernels::DType::Bool => "bool",
    }
}
