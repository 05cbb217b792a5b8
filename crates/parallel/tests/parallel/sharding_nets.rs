//! The networks and strategies of the sharding tests: an MLP, a Transformer encoder
//! layer and a small CNN, each with a global batch per step.

use std::sync::Arc;

use spore_core::{DType, Result, Tensor};
use spore_nn::prelude::*;
use spore_nn::zoo::bert::{BertConfig, EncoderLayer};
use spore_parallel::sharding::Strategies;

/// One network to split: how to build it (loss included), its step-`s` batch and the
/// strategies to split it with.
pub struct Case {
    pub name: String,
    pub build: fn() -> Arc<dyn Cell>,
    pub batch: fn(usize) -> Vec<Tensor>,
    pub strategies: Strategies,
}

fn strategies(entries: &[(&str, String)]) -> Strategies {
    let mut s = Strategies::new();
    for (path, st) in entries {
        s.shard(path, st).unwrap();
    }
    s
}

fn labels(step: usize, n: usize) -> Tensor {
    let y: Vec<i32> = (0..n).map(|i| ((i * 3 + step) % 10) as i32).collect();
    Tensor::from_vec(y, &[n]).unwrap()
}

/// Dense-ReLU-Dense-ReLU-Dense of the given widths, with a classification loss.
pub fn mlp_of([input, hidden1, hidden2, classes]: [usize; 4]) -> Arc<dyn Cell> {
    let net: Arc<dyn Cell> = SequentialCell::new(vec![
        Dense::new(input, hidden1).unwrap(),
        ReLU::new(),
        Dense::new(hidden1, hidden2).unwrap(),
        ReLU::new(),
        Dense::new(hidden2, classes).unwrap(),
    ]);
    WithLossCell::new_dyn(
        net,
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean),
    )
}

fn mlp() -> Arc<dyn Cell> {
    mlp_of([32, 64, 64, 10])
}

fn mlp_batch(step: usize) -> Vec<Tensor> {
    let x = Tensor::randn(&[16, 32], DType::F32, Some(500 + step as u64)).unwrap();
    vec![x, labels(step, 16)]
}

/// An encoder layer (hidden 32, 4 heads, feed-forward 64) regressed onto a target.
struct EncoderLoss {
    base: CellBase,
    layer: Arc<EncoderLayer>,
    loss: Arc<MSELoss>,
}

impl Cell for EncoderLoss {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let out = self.layer.call(&inputs[..2])?.remove(0);
        self.loss.call(&[out, inputs[2].clone()])
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![child("layer", &self.layer), child("loss", &self.loss)]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "EncoderLoss"
    }
}

fn encoder() -> Arc<dyn Cell> {
    let cfg = BertConfig {
        vocab_size: 10,
        hidden: 32,
        layers: 1,
        heads: 4,
        feed_forward: 64,
        max_positions: 8,
        num_classes: 2,
    };
    Arc::new(EncoderLoss {
        base: CellBase::new(),
        layer: EncoderLayer::new(&cfg).unwrap(),
        loss: MSELoss::new(Reduction::Mean),
    })
}

fn encoder_batch(step: usize) -> Vec<Tensor> {
    let seed = 700 + 3 * step as u64;
    let x = Tensor::randn(&[2, 8, 32], DType::F32, Some(seed)).unwrap();
    // The last two keys of the second sequence are padding.
    let mut mask = vec![0.0f32; 16];
    mask[14] = -10_000.0;
    mask[15] = -10_000.0;
    let mask = Tensor::from_vec(mask, &[2, 1, 1, 8]).unwrap();
    let target = Tensor::randn(&[2, 8, 32], DType::F32, Some(seed + 1)).unwrap();
    vec![x, mask, target]
}

/// Token embeddings (16 ids, width 8) of 4-token sequences, flattened into a classifier.
fn embedding() -> Arc<dyn Cell> {
    let net: Arc<dyn Cell> = SequentialCell::new(vec![
        Embedding::new(16, 8).unwrap(),
        Flatten::new(),
        Dense::new(4 * 8, 10).unwrap(),
    ]);
    WithLossCell::new_dyn(
        net,
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean),
    )
}

fn embedding_batch(step: usize) -> Vec<Tensor> {
    let ids: Vec<i32> = (0..32).map(|i| ((i * 7 + step * 3) % 16) as i32).collect();
    vec![Tensor::from_vec(ids, &[8, 4]).unwrap(), labels(step, 8)]
}

fn cnn() -> Arc<dyn Cell> {
    let conv = |i, o| Conv2d::config(i, o, 3).has_bias(true).build().unwrap();
    let net: Arc<dyn Cell> = SequentialCell::new(vec![
        conv(3, 8),
        ReLU::new(),
        MaxPool2d::new(2, 2).unwrap(),
        conv(8, 8),
        ReLU::new(),
        Flatten::new(),
        Dense::new(8 * 4 * 4, 10).unwrap(),
    ]);
    WithLossCell::new_dyn(
        net,
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean),
    )
}

fn cnn_batch(step: usize) -> Vec<Tensor> {
    let x = Tensor::randn(&[8, 3, 8, 8], DType::F32, Some(900 + step as u64)).unwrap();
    vec![x, labels(step, 8)]
}

/// The cases checked on `n` ranks.
pub fn cases(n: usize) -> Vec<Case> {
    let case = |name: &str, build, batch, strategies| Case {
        name: name.to_string(),
        build,
        batch,
        strategies,
    };
    let columns = format!("((1, 1), (1, {n}))");
    let rows = format!("((1, {n}), ({n}, 1))");
    let mut all = vec![
        // Megatron's pair (columns, then rows), then a data-parallel last layer.
        case(
            "mlp columns-rows-batch",
            mlp,
            mlp_batch,
            strategies(&[
                ("0/MatMul", columns.clone()),
                ("2/MatMul", rows.clone()),
                ("4/MatMul", format!("(({n}, 1), (1, 1))")),
            ]),
        ),
        // The batch split first, then the contraction: the activations' blocks move
        // from rows to columns in one AllToAll (its gradient the AllToAll back).
        case(
            "mlp batch-rows all-to-all",
            mlp,
            mlp_batch,
            strategies(&[
                ("0/MatMul", format!("(({n}, 1), (1, 1))")),
                ("2/MatMul", rows.clone()),
            ]),
        ),
        // Megatron's pair with an out_strategy: the row-split product's partial sums are
        // reduce-scattered by batch rows, which the data-parallel last layer reads as
        // they are.
        Case {
            name: "mlp columns-rows out-strategy".to_string(),
            build: mlp,
            batch: mlp_batch,
            strategies: {
                let mut s = strategies(&[
                    ("0/MatMul", columns.clone()),
                    ("4/MatMul", format!("(({n}, 1), (1, 1))")),
                ]);
                s.shard_with_output("2/MatMul", &rows, &format!("(({n}, 1),)"))
                    .unwrap();
                s
            },
        },
        // Megatron's encoder: heads split by the query/key/value columns, the
        // feed-forward hidden dimension by columns, both outputs by rows.
        case(
            "encoder megatron",
            encoder,
            encoder_batch,
            strategies(&[
                ("query/MatMul", columns.clone()),
                ("key/MatMul", columns.clone()),
                ("value/MatMul", columns.clone()),
                ("attention/output/MatMul", rows.clone()),
                ("intermediate/MatMul", columns.clone()),
                ("layer/output/MatMul", rows.clone()),
            ]),
        ),
        // Output channels split in both convolutions.
        case(
            "cnn output channels",
            cnn,
            cnn_batch,
            strategies(&[
                ("0/Conv2D", format!("((1, 1, 1, 1), ({n}, 1, 1, 1))")),
                ("3/Conv2D", format!("((1, 1, 1, 1), ({n}, 1, 1, 1))")),
            ]),
        ),
    ];
    // A vocabulary-parallel embedding (its rows split), then its columns.
    all.push(case(
        "embedding rows",
        embedding,
        embedding_batch,
        strategies(&[("0/Gather", format!("(({n}, 1), (1, 1))"))]),
    ));
    all.push(case(
        "embedding columns",
        embedding,
        embedding_batch,
        strategies(&[("0/Gather", format!("((1, {n}), (1, 1))"))]),
    ));
    if n == 4 {
        all.push(case(
            "embedding rows x batch",
            embedding,
            embedding_batch,
            strategies(&[("0/Gather", "((2, 1), (2, 1))".into())]),
        ));
        // A 2x2 mesh: batch and model splits at once; the last layer follows.
        all.push(case(
            "mlp 2x2 mesh",
            mlp,
            mlp_batch,
            strategies(&[
                ("0/MatMul", "((2, 1), (1, 2))".into()),
                ("2/MatMul", "((2, 2), (2, 1))".into()),
            ]),
        ));
        all.push(case(
            "cnn batch x channels",
            cnn,
            cnn_batch,
            strategies(&[
                ("0/Conv2D", "((2, 1, 1, 1), (2, 1, 1, 1))".into()),
                ("3/Conv2D", "((2, 2, 1, 1), (1, 2, 1, 1))".into()),
            ]),
        ));
    }
    all
}
