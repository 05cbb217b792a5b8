//! The new benchmark models in both modes: a BERT-style encoder trained with AdamW and
//! ResNet-50 inference, Graph mode against PyNative.

use spore_core::context::Mode;
use spore_core::{DType, Parameter, Tensor, no_grad, rng};
use spore_nn::prelude::*;

use super::{assert_close, serial, set_mode, values};

/// Token ids with padding at the end of every other row (id 0), labels in `0..classes`.
fn token_batch(
    batch: usize,
    seq: usize,
    vocab: usize,
    classes: usize,
    seed: usize,
) -> (Tensor, Tensor) {
    let ids: Vec<i32> = (0..batch * seq)
        .map(|i| {
            let (row, col) = (i / seq, i % seq);
            if row % 2 == 1 && col >= seq - 2 {
                0
            } else {
                (1 + (i * 31 + seed * 17) % (vocab - 1)) as i32
            }
        })
        .collect();
    let labels: Vec<i32> = (0..batch).map(|i| ((i + seed) % classes) as i32).collect();
    (
        Tensor::from_vec(ids, &[batch, seq]).unwrap(),
        Tensor::from_vec(labels, &[batch]).unwrap(),
    )
}

/// Three AdamW steps of a 2-layer encoder: losses and every parameter and moment agree.
#[test]
fn a_bert_training_step_with_adamw_is_the_same_in_graph_and_pynative() {
    let _s = serial();
    let cfg = BertConfig {
        vocab_size: 60,
        hidden: 32,
        layers: 2,
        heads: 4,
        feed_forward: 64,
        max_positions: 16,
        num_classes: 3,
    };
    let run = |mode: Mode| {
        set_mode(Mode::PyNative);
        rng::set_seed(11);
        let net = BertClassifier::new(&cfg).unwrap();
        let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
        let opt = AdamW::config(net.trainable_params(), 1e-3)
            .weight_decay(0.01)
            .build()
            .unwrap();
        let train = TrainOneStepCell::new(WithLossCell::new_dyn(net, loss), opt);
        set_mode(mode);
        // One batch every step, so that a falling loss shows the model learning it.
        let (x, y) = token_batch(4, 10, cfg.vocab_size, 3, 1);
        let losses: Vec<f64> = (0..3)
            .map(|_| train.step(&x, &y).unwrap().item().unwrap())
            .collect();
        set_mode(Mode::PyNative);
        let compiled = train.base().compiled(true).is_some();
        let (names, params): (Vec<String>, Vec<Parameter>) =
            train.parameters_and_names().into_iter().unzip();
        (losses, names, values(&params), compiled)
    };
    let (eager_losses, names, eager_state, eager_compiled) = run(Mode::PyNative);
    let (graph_losses, _, graph_state, graph_compiled) = run(Mode::Graph);
    assert!(!eager_compiled && graph_compiled);
    for (e, g) in eager_losses.iter().zip(&graph_losses) {
        assert!(
            (e - g).abs() <= 1e-5 * (1.0 + e.abs()),
            "{eager_losses:?} vs {graph_losses:?}"
        );
    }
    assert!(
        eager_losses[2] < eager_losses[0],
        "AdamW lowers the loss: {eager_losses:?}"
    );
    // The attention's key biases have a zero gradient in exact arithmetic (adding one
    // value to every score of a row leaves its softmax unchanged), so what reaches
    // AdamW is rounding noise, which it scales to steps of up to about the learning
    // rate: the two modes' different summation orders (PyNative's softmax is one
    // operator, Graph mode's a fused composite) move them by up to 1e-4. They are held to
    // what AdamW's step bound allows, two runs of three steps of at most 1e-3 apart.
    for ((name, g), e) in names.iter().zip(&graph_state).zip(&eager_state) {
        let noise_driven = name.ends_with("attention.key.bias");
        assert_close(g, e, if noise_driven { 6e-3 } else { 1e-4 }, name);
    }
}

/// ResNet-50 inference at batch 1 (the latency workload) in both modes.
#[test]
fn resnet50_inference_is_the_same_in_graph_and_pynative() {
    let _s = serial();
    set_mode(Mode::PyNative);
    rng::set_seed(4);
    let net = ImageNetResNet::resnet50(10).unwrap();
    net.set_train(false);
    let x = Tensor::randn(&[1, 3, 64, 64], DType::F32, Some(9)).unwrap();
    let eager = no_grad(|| net.call1(&x)).unwrap();
    set_mode(Mode::Graph);
    let graph = no_grad(|| net.call1(&x)).unwrap();
    set_mode(Mode::PyNative);
    assert!(
        net.base().compiled(false).is_some(),
        "Graph mode compiled the network"
    );
    assert_close(&graph, &eager, 1e-4, "ResNet-50 logits");
}
