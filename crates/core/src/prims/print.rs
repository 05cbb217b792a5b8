//! `Print`: MindSpore's Print operator. Strings and tensors, mixed, printed in program
//! order in both modes: eagerly when called, and inside a compiled graph at its place in
//! the node order (it is a side effect, so no pass removes, merges or moves it).
//!
//! ```
//! use spore_core::{ops::{self, PrintArg}, Tensor};
//! let t = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
//! ops::print(&["loss:".into(), PrintArg::from(&t)]).unwrap();
//! ```

use std::panic::Location;

use spore_kernels::{Buffer, DType};

use crate::apply::apply;
use crate::debug::print::{PrintValue, emit};
use crate::error::Result;
use crate::op::{Op, PrintSegment};
use crate::tensor::{Storage, Tensor, TensorType};

/// An argument of [`print()`]: text or a tensor.
#[derive(Clone, Debug)]
pub enum PrintArg<'a> {
    Text(String),
    Tensor(&'a Tensor),
}

impl From<&str> for PrintArg<'_> {
    fn from(s: &str) -> Self {
        PrintArg::Text(s.to_string())
    }
}
impl From<String> for PrintArg<'_> {
    fn from(s: String) -> Self {
        PrintArg::Text(s)
    }
}
impl<'a> From<&'a Tensor> for PrintArg<'a> {
    fn from(t: &'a Tensor) -> Self {
        PrintArg::Tensor(t)
    }
}

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    let Op::Print(segments) = op else {
        return Err(super::not_in_family(op, "print"));
    };
    let wanted = segments
        .iter()
        .filter(|s| **s == PrintSegment::Tensor)
        .count();
    if wanted != inputs.len() {
        return Err(format!(
            "{wanted} tensor arguments but {} inputs",
            inputs.len()
        ));
    }
    Ok(TensorType::new(&[], DType::I32))
}

pub(crate) fn eval(op: &Op, inputs: &[&Tensor]) -> Result<Storage, String> {
    let Op::Print(segments) = op else {
        return Err(super::not_in_family(op, "print"));
    };
    let mut next = inputs.iter();
    let values: Vec<PrintValue> = segments
        .iter()
        .map(|s| match s {
            PrintSegment::Text(t) => PrintValue::Text(t.clone()),
            PrintSegment::Tensor => PrintValue::Tensor(
                next.next()
                    .map(|t| (*t).clone())
                    .unwrap_or_else(|| Tensor::scalar(0i32)),
            ),
        })
        .collect();
    emit(&values).map_err(|e| e.to_string())?;
    Ok(Storage::contiguous(Buffer::I32(vec![0]), &[]))
}

/// Prints `args` (to the screen, or to the context's `print_file_path`).
#[track_caller]
pub fn print(args: &[PrintArg<'_>]) -> Result<()> {
    let segments: Vec<PrintSegment> = args
        .iter()
        .map(|a| match a {
            PrintArg::Text(s) => PrintSegment::Text(s.clone()),
            PrintArg::Tensor(_) => PrintSegment::Tensor,
        })
        .collect();
    let tensors: Vec<&Tensor> = args
        .iter()
        .filter_map(|a| match a {
            PrintArg::Tensor(t) => Some(*t),
            PrintArg::Text(_) => None,
        })
        .collect();
    apply(Op::Print(segments), &tensors, Location::caller()).map(|_| ())
}
