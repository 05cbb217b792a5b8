//! Generated C against Spore itself, one image at a time on one thread (BENCHMARKS.md,
//! "Code generation"). For LeNet and ResNet-18 it generates the float32 project (and
//! LeNet's int8 one, calibrated on random inputs: the timing does not depend on the
//! weights), builds it with the project's own Makefile (`cc -O3 -march=native`), and
//! alternates rounds: the C benchmark's time per inference, then Spore's Graph-mode
//! inference of the same single image. It prints the median of the rounds and the
//! per-round ratios.
//!
//! ```sh
//! cargo run --release -p spore --example bench_codegen -- --rounds 5
//! ```

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use spore::codegen::{Options, Target, generate};
use spore::core::TensorType;
use spore::prelude::*;

/// One network to time: its input shape, calls per round, and whether int8 is timed too.
struct Case {
    name: &'static str,
    net: Arc<dyn Cell>,
    shape: [usize; 4],
    iterations: usize,
    int8: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Builds `dir` with its Makefile and returns the benchmark's microseconds per call.
fn c_time(dir: &Path, input: &Path, iterations: usize) -> f64 {
    let out = Command::new(dir.join("benchmark"))
        .arg(input)
        .arg(iterations.to_string())
        .output()
        .expect("the generated benchmark runs");
    let err = String::from_utf8_lossy(&out.stderr);
    err.split("time per inference: ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no timing in: {err}"))
}

fn make(dir: &Path) {
    let st = Command::new("make")
        .args(["-s", "benchmark"])
        .current_dir(dir)
        .status()
        .expect("make runs");
    assert!(st.success(), "make failed in {}", dir.display());
}

/// Microseconds per Graph-mode inference of `x` by `net` (one thread).
fn spore_time(net: &Arc<dyn Cell>, x: &Tensor, iterations: usize) -> f64 {
    let start = Instant::now();
    for _ in 0..iterations {
        std::hint::black_box(spore::core::no_grad(|| net.call1(x)).unwrap());
    }
    start.elapsed().as_secs_f64() * 1e6 / iterations as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(5usize);
    set_context(
        ContextUpdate::new()
            .mode(Mode::Graph)
            .num_threads(1)
            .seed(1),
    )
    .unwrap();
    let work = std::env::temp_dir().join(format!("spore_bench_codegen_{}", std::process::id()));
    let cases = [
        Case {
            name: "lenet",
            net: LeNet5::new(10).unwrap(),
            shape: [1, 1, 32, 32],
            iterations: 20_000,
            int8: true,
        },
        Case {
            name: "resnet18",
            net: ResNet::resnet18(10).unwrap(),
            shape: [1, 3, 32, 32],
            iterations: 20,
            int8: false,
        },
    ];
    println!("one image, one thread; median of {rounds} alternating rounds (us per inference)");
    for Case {
        name,
        net,
        shape,
        iterations,
        int8,
    } in cases
    {
        let (c_iters, s_iters) = (iterations, iterations);
        net.set_train(false);
        let ty = TensorType::new(&shape, DType::F32);
        let x = Tensor::randn(&shape, DType::F32, Some(7)).unwrap();
        let dir = work.join(name);
        generate(
            &*net,
            std::slice::from_ref(&ty),
            &Options::new(name, Target::X86),
        )
        .unwrap()
        .write_to(&dir)
        .unwrap();
        make(&dir);
        let input = dir.join("x.bin");
        let bytes: Vec<u8> = x
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        std::fs::write(&input, bytes).unwrap();
        let int8_dir = work.join(format!("{name}_int8"));
        if int8 {
            let samples: Vec<Vec<Tensor>> = (0..16)
                .map(|k| vec![Tensor::randn(&shape, DType::F32, Some(100 + k)).unwrap()])
                .collect();
            generate(
                &*net,
                std::slice::from_ref(&ty),
                &Options::new(name, Target::X86).int8(samples),
            )
            .unwrap()
            .write_to(&int8_dir)
            .unwrap();
            make(&int8_dir);
        }
        // Warm-up: compile the graph, fault the C binary's pages in.
        spore_time(&net, &x, 3);
        c_time(&dir, &input, 3);
        let (mut c, mut s, mut q, mut ratio) = (vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            let ct = c_time(&dir, &input, c_iters);
            let st = spore_time(&net, &x, s_iters);
            if int8 {
                q.push(c_time(&int8_dir, &input, c_iters));
            }
            ratio.push(st / ct);
            c.push(ct);
            s.push(st);
        }
        let ratios: Vec<String> = ratio.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "{name:9} generated C {:10.2}   Spore Graph {:10.2}   Spore/C {:.2}x (rounds: {})",
            median(c),
            median(s),
            median(ratio.clone()),
            ratios.join(" ")
        );
        if int8 {
            println!("{name:9} generated C int8 {:10.2}", median(q));
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}
