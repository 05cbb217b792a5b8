//! A BERT-style encoder with a sequence classifier (BERT's `BertForSequenceClassification`
//! without token types and dropout): token and learned positional embeddings, LayerNorm,
//! `layers` post-norm Transformer encoder layers (multi-head self-attention with a padding
//! mask, then a GELU feed-forward block), a pooler (`tanh(Dense)` of the first token) and a
//! `Dense(hidden, num_classes)` classifier.
//!
//! Input: token ids, `int32` or `int64` of shape `batch x sequence`. Id 0 is padding: keys holding it
//! get a -10000 bias before the softmax (BERT's additive mask), so the mask travels with
//! the ids and a training step takes the same `(inputs, labels)` pair as every other model.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_nn::prelude::*;
//! let cfg = BertConfig { vocab_size: 50, hidden: 16, layers: 2, heads: 4, feed_forward: 32,
//!                        max_positions: 8, num_classes: 3 };
//! let net = BertClassifier::new(&cfg).unwrap();
//! let ids = Tensor::from_vec(vec![5i32, 7, 9, 0, 3, 4, 0, 0], &[2, 4]).unwrap();
//! assert_eq!(net.call1(&ids).unwrap().shape(), &[2, 3]);
//! ```

use std::sync::Arc;

use spore_core::{DType, Error, Result, Tensor};

use crate::cell::{Cell, CellBase, CellCall, child};
use crate::layers::{Dense, Embedding, GELU, LayerNorm, Tanh};

/// BERT's LayerNorm epsilon.
const LAYER_NORM_EPS: f64 = 1e-12;

/// The encoder's sizes.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    pub vocab_size: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub feed_forward: usize,
    pub max_positions: usize,
    pub num_classes: usize,
}

impl BertConfig {
    /// The benchmark's encoder (issue 40): BERT's vocabulary (30,522 ids) and 512
    /// positions, 4 layers, hidden 256, 4 heads, feed-forward 1024, 2 classes.
    pub fn small() -> BertConfig {
        BertConfig {
            vocab_size: 30_522,
            hidden: 256,
            layers: 4,
            heads: 4,
            feed_forward: 1024,
            max_positions: 512,
            num_classes: 2,
        }
    }

    fn check(&self) -> Result<()> {
        let sizes = [
            self.vocab_size,
            self.hidden,
            self.layers,
            self.heads,
            self.feed_forward,
            self.max_positions,
            self.num_classes,
        ];
        if sizes.contains(&0) || !self.hidden.is_multiple_of(self.heads) {
            return Err(Error::invalid(format!(
                "BertConfig: every size must be positive and hidden divisible by heads, got {self:?}"
            )));
        }
        Ok(())
    }
}

fn layer_norm(hidden: usize) -> Result<Arc<LayerNorm>> {
    LayerNorm::with_options(&[hidden], -1, -1, LAYER_NORM_EPS)
}

/// Multi-head self-attention: query, key and value projections, scaled dot products with
/// the additive mask, softmax over keys, the heads merged and projected.
pub struct SelfAttention {
    base: CellBase,
    pub query: Arc<Dense>,
    pub key: Arc<Dense>,
    pub value: Arc<Dense>,
    pub output: Arc<Dense>,
    heads: usize,
}

impl SelfAttention {
    pub fn new(hidden: usize, heads: usize) -> Result<Arc<SelfAttention>> {
        if heads == 0 || hidden == 0 || !hidden.is_multiple_of(heads) {
            return Err(Error::invalid(format!(
                "SelfAttention: hidden ({hidden}) must be a positive multiple of heads ({heads})"
            )));
        }
        Ok(Arc::new(SelfAttention {
            base: CellBase::new(),
            query: Dense::new(hidden, hidden)?,
            key: Dense::new(hidden, hidden)?,
            value: Dense::new(hidden, hidden)?,
            output: Dense::new(hidden, hidden)?,
            heads,
        }))
    }

    /// `batch x sequence x hidden` to `batch x heads x sequence x head_size`.
    fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let [b, s, h] = x.shape() else {
            return Err(Error::invalid(format!(
                "SelfAttention: expected batch x sequence x hidden, got {:?}",
                x.shape()
            )));
        };
        x.reshape(&[*b, *s, self.heads, h / self.heads])?
            .permute(&[0, 2, 1, 3])
    }
}

impl Cell for SelfAttention {
    /// Inputs: hidden states (`batch x sequence x hidden`) and the additive mask
    /// (`batch x 1 x 1 x sequence`).
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [x, mask] = inputs else {
            return Err(Error::invalid(format!(
                "SelfAttention: expected hidden states and a mask, got {} inputs",
                inputs.len()
            )));
        };
        let q = self.split_heads(&self.query.call1(x)?)?;
        let k = self.split_heads(&self.key.call1(x)?)?;
        let v = self.split_heads(&self.value.call1(x)?)?;
        let head_size = q.shape()[3] as f64;
        let scores = q
            .mul_scalar(1.0 / head_size.sqrt())?
            .matmul_t(&k, false, true)?;
        let probs = scores.add(mask)?.softmax(-1)?;
        let context = probs.matmul(&v)?.permute(&[0, 2, 1, 3])?;
        let merged = context.reshape(x.shape())?;
        Ok(vec![self.output.call1(&merged)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            child("query", &self.query),
            child("key", &self.key),
            child("value", &self.value),
            child("output", &self.output),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "SelfAttention"
    }
}

/// One post-norm encoder layer: `norm1(x + attention(x))`, then
/// `norm2(h + dense2(gelu(dense1(h))))`.
pub struct EncoderLayer {
    base: CellBase,
    pub attention: Arc<SelfAttention>,
    pub norm1: Arc<LayerNorm>,
    pub intermediate: Arc<Dense>,
    gelu: Arc<GELU>,
    pub output: Arc<Dense>,
    pub norm2: Arc<LayerNorm>,
}

impl EncoderLayer {
    pub fn new(cfg: &BertConfig) -> Result<Arc<EncoderLayer>> {
        cfg.check()?;
        Ok(Arc::new(EncoderLayer {
            base: CellBase::new(),
            attention: SelfAttention::new(cfg.hidden, cfg.heads)?,
            norm1: layer_norm(cfg.hidden)?,
            intermediate: Dense::new(cfg.hidden, cfg.feed_forward)?,
            // BERT's GELU is the exact (erf) form, as PyTorch's default.
            gelu: GELU::with_approximate(false),
            output: Dense::new(cfg.feed_forward, cfg.hidden)?,
            norm2: layer_norm(cfg.hidden)?,
        }))
    }
}

impl Cell for EncoderLayer {
    /// Inputs: hidden states and the additive mask, as [`SelfAttention`].
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [x, _mask] = inputs else {
            return Err(Error::invalid(format!(
                "EncoderLayer: expected hidden states and a mask, got {} inputs",
                inputs.len()
            )));
        };
        let attended = self.attention.call_first(inputs)?;
        let h = self.norm1.call1(&x.add(&attended)?)?;
        let ff = self.gelu.call1(&self.intermediate.call1(&h)?)?;
        Ok(vec![self.norm2.call1(&h.add(&self.output.call1(&ff)?)?)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![
            child("attention", &self.attention),
            child("norm1", &self.norm1),
            child("intermediate", &self.intermediate),
            child("gelu", &self.gelu),
            child("output", &self.output),
            child("norm2", &self.norm2),
        ]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "EncoderLayer"
    }
}

/// The encoder with its pooler and classifier; see the module docs.
pub struct BertClassifier {
    base: CellBase,
    pub word_embeddings: Arc<Embedding>,
    pub position_embeddings: Arc<Embedding>,
    pub embedding_norm: Arc<LayerNorm>,
    pub layers: Vec<Arc<EncoderLayer>>,
    pub pooler: Arc<Dense>,
    tanh: Arc<Tanh>,
    pub classifier: Arc<Dense>,
}

impl BertClassifier {
    pub fn new(cfg: &BertConfig) -> Result<Arc<BertClassifier>> {
        cfg.check()?;
        Ok(Arc::new(BertClassifier {
            base: CellBase::new(),
            word_embeddings: Embedding::new(cfg.vocab_size, cfg.hidden)?,
            position_embeddings: Embedding::new(cfg.max_positions, cfg.hidden)?,
            embedding_norm: layer_norm(cfg.hidden)?,
            layers: (0..cfg.layers)
                .map(|_| EncoderLayer::new(cfg))
                .collect::<Result<_>>()?,
            pooler: Dense::new(cfg.hidden, cfg.hidden)?,
            tanh: Tanh::new(),
            classifier: Dense::new(cfg.hidden, cfg.num_classes)?,
        }))
    }

    /// Token plus positional embeddings of `ids` (`batch x sequence`), normalised.
    fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let seq = ids.shape()[1];
        let max = self.position_embeddings.vocab_size;
        if seq > max {
            return Err(Error::invalid(format!(
                "BertClassifier: a sequence of {seq} tokens is longer than the {max} positions"
            )));
        }
        let positions = self
            .position_embeddings
            .embedding_table
            .value()
            .narrow(0, 0, seq)?;
        let tokens = self.word_embeddings.call1(ids)?;
        self.embedding_norm.call1(&tokens.add(&positions)?)
    }
}

/// BERT's additive attention mask: -10000 where a key is padding (id 0), else 0, shaped
/// `batch x 1 x 1 x sequence` to broadcast over heads and queries.
fn padding_mask(ids: &Tensor) -> Result<Tensor> {
    let (b, s) = (ids.shape()[0], ids.shape()[1]);
    ids.equal(&Tensor::scalar_of(0.0, ids.dtype()))?
        .cast(DType::F32)?
        .mul_scalar(-10_000.0)?
        .reshape(&[b, 1, 1, s])
}

impl Cell for BertClassifier {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let [ids] = inputs else {
            return Err(Error::invalid(format!(
                "BertClassifier: expected 1 input (token ids), got {}",
                inputs.len()
            )));
        };
        if ids.rank() != 2 || !matches!(ids.dtype(), DType::I32 | DType::I64) {
            return Err(Error::invalid(format!(
                "BertClassifier: expected int32 or int64 token ids of shape batch x sequence, got {} {:?}",
                ids.dtype(),
                ids.shape()
            )));
        }
        let mask = padding_mask(ids)?;
        let mut h = self.embed(ids)?;
        for layer in &self.layers {
            h = layer.call_first(&[h, mask.clone()])?;
        }
        let first = h.narrow(1, 0, 1)?.squeeze(&[1])?;
        let pooled = self.tanh.call1(&self.pooler.call1(&first)?)?;
        Ok(vec![self.classifier.call1(&pooled)?])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        let mut v = vec![
            child("word_embeddings", &self.word_embeddings),
            child("position_embeddings", &self.position_embeddings),
            child("embedding_norm", &self.embedding_norm),
        ];
        for (i, l) in self.layers.iter().enumerate() {
            v.push((format!("layers.{i}"), l.clone() as Arc<dyn Cell>));
        }
        v.push(child("pooler", &self.pooler));
        v.push(child("tanh", &self.tanh));
        v.push(child("classifier", &self.classifier));
        v
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "BertClassifier"
    }
}
