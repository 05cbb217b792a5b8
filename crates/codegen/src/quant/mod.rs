//! Int8 post-training quantization (in progress).
pub mod emit;
use crate::freeze::Frozen;
use crate::program::Program;
use spore_core::{Error, Result, Tensor};
pub struct Quantized {
    pub program: Program,
}
impl Quantized {
    pub fn elem_bytes(&self, _v: usize) -> usize {
        1
    }
    pub fn weight_bytes(&self) -> usize {
        0
    }
    pub fn describe(&self) -> Vec<String> {
        vec![]
    }
}
pub fn quantize(_p: &Program, _f: &Frozen, _s: &[Vec<Tensor>]) -> Result<Quantized> {
    Err(Error::invalid("int8 not yet"))
}
