//! An imported ResNet-18 in Graph mode against onnxruntime on the same model file, the
//! same machine and threads, in alternating rounds (BENCHMARKS.md, "ONNX"). The model is
//! Spore's own ResNet-18 exported to ONNX, imported back, and timed at batch 1 and 32;
//! onnxruntime runs `bench/onnxruntime_time.py` on the file.
//!
//! ```sh
//! cargo run --release -p spore --example bench_onnx -- --threads 2 --rounds 3 [--batch N]
//! ```
//!
//! `--batch N` times that batch size alone (default: 1 and 32); `--rounds 0` skips
//! onnxruntime and runs Spore only (for `perf record`); `--profile` with it records the runs
//! with Spore's profiler (per-op CSV under the temp folder's `spore-profile-onnx`);
//! `--save-graphs` writes the compiled graphs under the temp folder's `spore-onnx-graphs`.

use std::process::Command;
use std::time::Instant;

use spore::prelude::*;
use spore_core::debug::profiler::Profiler;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (threads, rounds) = (arg("--threads", 2), arg("--rounds", 3));
    let mut context = ContextUpdate::new()
        .mode(Mode::Graph)
        .num_threads(threads)
        .seed(1);
    if std::env::args().any(|a| a == "--save-graphs") {
        context = context
            .save_graphs(1)
            .save_graphs_path(std::env::temp_dir().join("spore-onnx-graphs"));
    }
    set_context(context).unwrap();
    let dir = std::env::temp_dir().join(format!("spore_bench_onnx_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("resnet18.onnx");
    let x = Tensor::zeros(&[1, 3, 32, 32], DType::F32).unwrap();
    spore::export(
        &*ResNet::resnet18(10).unwrap(),
        &[x],
        &model,
        spore::Format::Onnx,
    )
    .unwrap();
    let net = spore::onnx::import(&model).unwrap();
    // The repository's script: from the working directory when run there (a binary built
    // elsewhere and carried to a lent host), else from where this one was built.
    let here = std::path::PathBuf::from("bench/onnxruntime_time.py");
    let script = match here.exists() {
        true => here,
        false => {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/onnxruntime_time.py")
        }
    };
    println!(
        "ResNet-18 (CIFAR form) inference, {threads} threads, median of {rounds} alternating rounds (ms per run)"
    );
    let only = arg("--batch", 0);
    let sizes = [(1usize, 50usize), (32, 5)]
        .into_iter()
        .filter(|&(batch, _)| only == 0 || batch == only);
    for (batch, runs) in sizes {
        let x = Tensor::randn(&[batch, 3, 32, 32], DType::F32, Some(2)).unwrap();
        net.call1(&x).unwrap();
        if rounds == 0 {
            // Spore alone, long enough to profile.
            let profiler = std::env::args().any(|a| a == "--profile").then(|| {
                let p = Profiler::new(std::env::temp_dir().join("spore-profile-onnx"));
                p.start();
                p
            });
            for _ in 0..40 * runs {
                std::hint::black_box(net.call1(&x).unwrap());
                if let Some(p) = &profiler {
                    p.step_end(std::time::Duration::ZERO);
                }
            }
            if let Some(p) = profiler {
                p.stop();
                p.analyse().unwrap();
            }
            continue;
        }
        let (mut s, mut o) = (vec![], vec![]);
        for _ in 0..rounds {
            let start = Instant::now();
            for _ in 0..runs {
                std::hint::black_box(net.call1(&x).unwrap());
            }
            s.push(start.elapsed().as_secs_f64() * 1e3 / runs as f64);
            let out = Command::new("python3")
                .arg(&script)
                .args([
                    model.to_str().unwrap(),
                    &batch.to_string(),
                    &threads.to_string(),
                    &runs.to_string(),
                ])
                .output()
                .expect("python3 runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            o.push(String::from_utf8_lossy(&out.stdout).trim().parse().unwrap());
        }
        let ratios: Vec<String> = s
            .iter()
            .zip(&o)
            .map(|(a, b)| format!("{:.2}", b / a))
            .collect();
        println!(
            "batch {batch:2}: Spore (imported, Graph) {:8.2}   onnxruntime {:8.2}   onnxruntime/Spore {:.2}x (rounds: {})",
            median(s.clone()),
            median(o.clone()),
            median(o.iter().zip(&s).map(|(b, a)| b / a).collect()),
            ratios.join(" ")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
