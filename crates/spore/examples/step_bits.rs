//! Fingerprints of training: LeNet5 and ResNet-18 (CIFAR-10 form) trained 3 steps at
//! batch 32 in Graph and in PyNative mode, and a hash of every parameter's bits after
//! them. A refactoring that must not change what compiled graphs compute is checked by
//! running this before and after (the hashes must match on the same machine).
//!
//! Run: `cargo run --release -p spore --example step_bits`

use spore::prelude::*;

/// FNV-1a over the bits of every parameter and optimizer state, in name order.
fn fingerprint(cell: &TrainOneStepCell) -> Result<u64> {
    let mut named = cell.parameters_and_names();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (name, p) in named {
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        for v in p.stored().to_f64_vec()? {
            for b in (v as f32).to_bits().to_le_bytes() {
                h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    Ok(h)
}

fn run(lenet: bool, mode: Mode) -> Result<(u64, Vec<f64>)> {
    set_context(ContextUpdate::new().mode(Mode::PyNative))?;
    spore::rng::set_seed(5);
    let net: std::sync::Arc<dyn Cell> = if lenet {
        LeNet5::new(10)?
    } else {
        spore::nn::zoo::ResNet::resnet18(10)?
    };
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9)?;
    let train = TrainOneStepCell::new(WithLossCell::new_dyn(net, loss), opt);
    set_context(ContextUpdate::new().mode(mode))?;
    let shape: &[usize] = if lenet {
        &[32, 1, 32, 32]
    } else {
        &[32, 3, 32, 32]
    };
    let mut losses = vec![];
    for s in 0..3u64 {
        let x = Tensor::randn(shape, DType::F32, Some(100 + s))?;
        let y = Tensor::from_vec(
            (0..32)
                .map(|i| ((i * 7 + s as usize) % 10) as i32)
                .collect(),
            &[32],
        )?;
        losses.push(train.step(&x, &y)?.item()?);
    }
    set_context(ContextUpdate::new().mode(Mode::PyNative))?;
    Ok((fingerprint(&train)?, losses))
}

fn main() -> Result<()> {
    for (lenet, name) in [(true, "lenet5"), (false, "resnet18")] {
        for mode in [Mode::Graph, Mode::PyNative] {
            let (hash, losses) = run(lenet, mode)?;
            println!("{name} {mode:?}: {hash:016x} losses {losses:?}");
        }
    }
    Ok(())
}
