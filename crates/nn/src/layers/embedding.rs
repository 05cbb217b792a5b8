//! `Embedding`: looks up rows of `embedding_table` (`vocab_size x embedding_size`) by
//! integer ids. The table starts as `Normal(1.0)` (the issue's spec, as `mint.nn.Embedding`
//! and PyTorch); `padding_idx` starts as a zero row. With `use_one_hot` the lookup is a
//! one-hot matrix product (same values; a dense gradient).
//!
//! ```
//! use spore_core::Tensor;
//! use spore_nn::prelude::*;
//! let emb = Embedding::new(10, 3).unwrap();
//! let ids = Tensor::from_vec(vec![1i32, 4, 1, 0], &[2, 2]).unwrap();
//! let y = emb.call1(&ids).unwrap();
//! assert_eq!(y.shape(), &[2, 2, 3]);
//! ```

use std::sync::Arc;

use spore_core::{DType, Error, Parameter, Result, Tensor};

use super::{label, positive, single};
use crate::cell::{Cell, CellBase, param};
use crate::init::Initializer;

/// An embedding table.
pub struct Embedding {
    base: CellBase,
    pub embedding_table: Parameter,
    pub vocab_size: usize,
    pub embedding_size: usize,
    pub use_one_hot: bool,
}

/// `Embedding`'s arguments.
#[derive(Clone, Debug)]
pub struct EmbeddingConfig {
    vocab_size: usize,
    embedding_size: usize,
    use_one_hot: bool,
    init: Initializer,
    padding_idx: Option<usize>,
    dtype: DType,
}

impl EmbeddingConfig {
    pub fn use_one_hot(mut self, on: bool) -> Self {
        self.use_one_hot = on;
        self
    }
    pub fn embedding_table(mut self, init: Initializer) -> Self {
        self.init = init;
        self
    }
    /// A row that starts as zeros.
    pub fn padding_idx(mut self, idx: usize) -> Self {
        self.padding_idx = Some(idx);
        self
    }
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    pub fn build(self) -> Result<Arc<Embedding>> {
        positive(
            "Embedding",
            &[
                ("vocab_size", self.vocab_size),
                ("embedding_size", self.embedding_size),
            ],
        )?;
        let shape = [self.vocab_size, self.embedding_size];
        let mut table = self.init.init(&shape, self.dtype)?;
        if let Some(p) = self.padding_idx {
            if p >= self.vocab_size {
                return Err(Error::invalid(format!(
                    "Embedding: padding_idx {p} is out of range for vocab_size {}",
                    self.vocab_size
                )));
            }
            let keep: Vec<f64> = (0..self.vocab_size)
                .map(|r| if r == p { 0.0 } else { 1.0 })
                .collect();
            let mask = Tensor::from_f64(&keep, &[self.vocab_size, 1], self.dtype)?;
            table = table.mul(&mask)?;
        }
        Ok(Arc::new(Embedding {
            base: CellBase::new(),
            embedding_table: Parameter::new(table, "embedding_table"),
            vocab_size: self.vocab_size,
            embedding_size: self.embedding_size,
            use_one_hot: self.use_one_hot,
        }))
    }
}

impl Embedding {
    pub fn new(vocab_size: usize, embedding_size: usize) -> Result<Arc<Embedding>> {
        Embedding::config(vocab_size, embedding_size).build()
    }
    pub fn config(vocab_size: usize, embedding_size: usize) -> EmbeddingConfig {
        EmbeddingConfig {
            vocab_size,
            embedding_size,
            use_one_hot: false,
            init: Initializer::normal(1.0),
            padding_idx: None,
            dtype: DType::F32,
        }
    }
}

impl Cell for Embedding {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let ids = single(&self.base, "Embedding", inputs)?;
        if !matches!(ids.dtype(), DType::I32 | DType::I64) {
            return Err(Error::invalid(format!(
                "{}: ids must be Int32 or Int64, got {}",
                label(&self.base, "Embedding"),
                ids.dtype()
            )));
        }
        let table = self.embedding_table.value();
        let y = if self.use_one_hot {
            let flat = ids.reshape(&[ids.numel()])?;
            let oh = flat.one_hot(self.vocab_size, table.dtype())?;
            let mut shape = ids.shape().to_vec();
            shape.push(self.embedding_size);
            oh.matmul(&table)?.reshape(&shape)?
        } else {
            table.gather(ids, 0)?
        };
        Ok(vec![y])
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        vec![param("embedding_table", &self.embedding_table)]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Embedding"
    }
}
