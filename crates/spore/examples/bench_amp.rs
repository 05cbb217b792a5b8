//! Training steps at each mixed-precision level against float32, in alternating rounds
//! (BENCHMARKS.md, "Mixed precision"): LeNet5 (batch 32) and the seed 004 MLP (batch 64)
//! on the bundled digits, ResNet-18 (batch 32, CIFAR-sized random images), ResNet-50
//! (batch 8, ImageNet-sized random images). `--levels O0,O2bf16` times only the levels
//! named (spaces dropped from the names in the table). Each level's
//! loss after its timed steps is printed beside its time, so a fast wrong step shows.
//! The peak bytes of values live in the step's compiled graphs (parameters, their 16-bit
//! copies, activations, gradients) are printed too, from the graphs' memory plans; for a
//! loss-scaled step (O2), its one graph's (with `SPORE_AMP_ONE_GRAPH=0`, the larger of
//! its two graphs' peaks, each counting only the parameters it reads).
//!
//! ```sh
//! cargo run --release -p spore --example bench_amp -- [--model lenet|mlp|resnet18|resnet50] --steps 100 --rounds 3 [--levels O0,O2bf16]
//! ```

use std::sync::Arc;
use std::time::Instant;

use spore::core::TensorType;
use spore::datasets::{bundled_mnist, create_dataset};
use spore::nn::amp::{AmpLevel, AmpOptions, TrainOneStepWithLossScaleCell, build_train_network};
use spore::prelude::*;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

/// Batches of (data, label).
type Batches = Vec<Vec<Tensor>>;

/// The network and `count` batches for `model`.
fn workload(model: &str, count: usize) -> Result<(Arc<dyn Cell>, Batches)> {
    Ok(match model {
        "lenet" | "mlp" => {
            let data = create_dataset(bundled_mnist().join("train"), 32, 1, 2, true)?;
            let rows: Vec<Vec<Tensor>> = data
                .create_tuple_iterator(1)
                .take(2 * count)
                .collect::<Result<_>>()?;
            if model == "lenet" {
                (LeNet5::new(10)?, rows.into_iter().take(count).collect())
            } else {
                // The MLP reads 28x28 digits in batches of 64: two LeNet batches, cropped.
                let batches = rows
                    .chunks(2)
                    .map(|pair| -> Result<Vec<Tensor>> {
                        let x = Tensor::concat(&[&pair[0][0], &pair[1][0]], 0)?;
                        let x = x.strided_slice(&[0, 0, 2, 2], &[64, 1, 30, 30], &[1, 1, 1, 1])?;
                        let y = Tensor::concat(&[&pair[0][1], &pair[1][1]], 0)?;
                        Ok(vec![x, y])
                    })
                    .collect::<Result<_>>()?;
                (Mlp::new()?, batches)
            }
        }
        "resnet18" => {
            let batches = (0..count)
                .map(|k| -> Result<Vec<Tensor>> {
                    let x = Tensor::randn(&[32, 3, 32, 32], DType::F32, Some(k as u64))?;
                    let y =
                        Tensor::from_vec((0..32).map(|i| (i + k as i32) % 10).collect(), &[32])?;
                    Ok(vec![x, y])
                })
                .collect::<Result<_>>()?;
            (ResNet::resnet18(10)?, batches)
        }
        "resnet50" => {
            let batches = (0..count)
                .map(|k| -> Result<Vec<Tensor>> {
                    let x = Tensor::randn(&[8, 3, 224, 224], DType::F32, Some(k as u64))?;
                    let y =
                        Tensor::from_vec((0..8).map(|i| (i + k as i32) % 1000).collect(), &[8])?;
                    Ok(vec![x, y])
                })
                .collect::<Result<_>>()?;
            (ImageNetResNet::resnet50(1000)?, batches)
        }
        other => {
            return Err(Error::invalid(format!(
                "--model must be lenet, mlp, resnet18 or resnet50, got {other}"
            )));
        }
    })
}

/// Peak live bytes of a compiled cell's graph for inputs of `types`, if it compiled.
fn peak_of(cell: &Arc<dyn Cell>, types: &[TensorType]) -> Option<usize> {
    let graph = cell.base().compiled(true)?.graph_for(types)?;
    Some(spore::compile::plan::MemoryPlan::new(&graph).peak_bytes)
}

/// Milliseconds per step over `steps` steps of a fresh network at `level`, the mean loss
/// of the last ten, and the peak live bytes of the compiled step.
fn time_level(
    model: &str,
    level: AmpLevel,
    dtype: DType,
    steps: usize,
) -> Result<(f64, f64, Option<usize>)> {
    set_context(ContextUpdate::new().mode(Mode::Graph).seed(1))?;
    // The pipeline's shuffle too, so that every run and level sees the same batches and
    // the losses printed beside the times compare.
    spore::data::config::set_seed(1);
    let warm = 3;
    let (net, rows) = workload(model, steps + warm)?;
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9)?;
    let options = AmpOptions {
        dtype: Some(dtype),
        ..AmpOptions::default()
    };
    let step = build_train_network(net, opt.clone(), Some(loss), level, options)?;
    for row in &rows[..warm] {
        step.call(row)?;
    }
    let start = Instant::now();
    let mut last = vec![];
    for row in &rows[warm..] {
        last.push(step.call(row)?[0].item()?);
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let tail = &last[last.len().saturating_sub(10)..];
    let types: Vec<TensorType> = rows[0].iter().map(|t| t.tensor_type().clone()).collect();
    let scaled = step
        .as_any()
        .and_then(|a| a.downcast_ref::<TrainOneStepWithLossScaleCell>());
    let mut with_scale = types.clone();
    with_scale.push(TensorType::new(&[], DType::F32));
    let peak = match scaled {
        None => peak_of(&step, &types),
        // One graph for the whole step (Graph mode, one process).
        Some(s)
            if s.fused_step()
                .is_some_and(|f| peak_of(&f, &with_scale).is_some()) =>
        {
            s.fused_step().and_then(|f| peak_of(&f, &with_scale))
        }
        Some(s) => {
            let (gradients, update) = s.stages();
            let grads: Vec<TensorType> = opt
                .params()
                .iter()
                .map(|p| p.value().tensor_type().clone())
                .collect();
            peak_of(&gradients, &with_scale)
                .zip(peak_of(&update, &grads))
                .map(|(a, b)| a.max(b))
        }
    };
    Ok((
        ms,
        tail.iter().sum::<f64>() / tail.len().max(1) as f64,
        peak,
    ))
}

fn main() -> Result<()> {
    let model = arg("--model", "lenet");
    let parse = |name: &str, default: &str| arg(name, default).parse::<usize>().ok();
    let (Some(steps), Some(rounds)) = (parse("--steps", "100"), parse("--rounds", "3")) else {
        return Err(Error::invalid("--steps and --rounds take whole numbers"));
    };
    // One pass over the 8,000 bundled digits: 250 LeNet batches (125 MLP batches).
    let most = if model == "mlp" { 120 } else { 245 };
    if !(1..=most).contains(&steps) || rounds == 0 {
        return Err(Error::invalid(format!(
            "--steps must be 1 to {most} for {model} (one pass over the bundled digits) and --rounds at least 1"
        )));
    }
    let cpu = spore::kernels::peak::cpu_model();
    println!(
        "{model} train step, Graph mode, {cpu}, AVX512_BF16 GEMM: {}: ms per step (mean loss of the last ten steps), peak live bytes of the compiled step",
        spore::kernels::bf16_gemm::native_available()
    );
    let levels = [
        ("O0", AmpLevel::O0, DType::F16),
        ("O1 f16", AmpLevel::O1, DType::F16),
        ("O2 f16", AmpLevel::O2, DType::F16),
        ("O2 bf16", AmpLevel::O2, DType::BF16),
        ("O3 f16", AmpLevel::O3, DType::F16),
        ("O3 bf16", AmpLevel::O3, DType::BF16),
    ];
    let wanted = arg("--levels", "");
    let chosen: Vec<_> = levels
        .iter()
        .filter(|(name, ..)| {
            let name = name.replace(' ', "");
            wanted.is_empty() || wanted.split(',').any(|w| w == name)
        })
        .collect();
    if chosen.is_empty() {
        return Err(Error::invalid(format!(
            "--levels names none of O0, O1f16, O2f16, O2bf16, O3f16, O3bf16: got {wanted}"
        )));
    }
    for round in 1..=rounds {
        let mut cells = vec![];
        for &&(name, level, dtype) in &chosen {
            let (ms, loss, peak) = time_level(&model, level, dtype, steps)?;
            let peak = peak.map_or(String::new(), |b| format!(" {:.0} KiB", b as f64 / 1024.0));
            cells.push(format!("{name} {ms:.2} ({loss:.3}){peak}"));
        }
        println!("round {round}: {}", cells.join("   "));
    }
    Ok(())
}
