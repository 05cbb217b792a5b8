//! `spore codegen` on a trained LeNet: the float32 project equals Spore's eager outputs
//! on the 1,000 bundled test digits, the int8 one (calibrated on training digits) stays
//! within 0.5 points of its accuracy in a workspace of at most 2.5 KB, and both build
//! for a Cortex-M4 (sizes printed with --nocapture).

use std::path::{Path, PathBuf};
use std::process::Command;

use spore::cli::{args::parse, execute};
use spore::datasets::{bundled_mnist, create_dataset};
use spore::prelude::*;

fn temp_dir(name: &str) -> PathBuf {
    crate::temp_dir("codegen", name)
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Builds the project's benchmark with strict C99 flags and runs it on `inputs`.
fn outputs(dir: &Path, inputs: &Path) -> Vec<Vec<f32>> {
    run(Command::new("cc")
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-O2",
        ])
        .args(["-o", "bench", "benchmark.c", "model.c", "weights.c", "-lm"])
        .current_dir(dir));
    run(Command::new(dir.join("bench")).arg(inputs).arg("1"))
        .lines()
        .map(|l| l.split(' ').map(|v| v.parse().unwrap()).collect())
        .collect()
}

fn accuracy(rows: &[Vec<f32>], labels: &[i32]) -> f64 {
    let argmax = |r: &Vec<f32>| (0..r.len()).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap() as i32;
    let hits = rows
        .iter()
        .zip(labels)
        .filter(|(r, l)| argmax(r) == **l)
        .count();
    hits as f64 / labels.len() as f64
}

/// `arm-none-eabi-size` of the Cortex-M image: (text, data, bss).
fn cortex_m_size(dir: &Path) -> (usize, usize, usize) {
    let which = Command::new("arm-none-eabi-gcc").arg("--version").output();
    assert!(
        which.is_ok_and(|o| o.status.success()),
        "arm-none-eabi-gcc is missing: scripts/test.sh installs gcc-arm-none-eabi and libnewlib-arm-none-eabi"
    );
    run(Command::new("make").arg("-s").current_dir(dir));
    let text = run(Command::new("arm-none-eabi-size")
        .arg("firmware.elf")
        .current_dir(dir));
    let nums: Vec<usize> = text
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .take(3)
        .map(|v| v.parse().unwrap())
        .collect();
    (nums[0], nums[1], nums[2])
}

#[test]
fn trained_lenet_generates_float32_and_int8_c_for_x86_and_cortex_m() {
    let work = temp_dir("lenet");
    // A LeNet well above 90 %, so accuracy changes mean something.
    let (net, ckpt) = crate::trained_lenet(5, &work);

    // The 1,000 test digits as LeNet sees them, in one file.
    let test = create_dataset(bundled_mnist().join("test"), 1000, 1, 2, false).unwrap();
    let row = test.create_tuple_iterator(1).next().unwrap().unwrap();
    let (images, labels) = (&row[0], row[1].to_vec::<i32>().unwrap());
    assert_eq!(labels.len(), 1000);
    let pixels = images.to_vec::<f32>().unwrap();
    let inputs = work.join("digits.bin");
    let bytes: Vec<u8> = pixels.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&inputs, bytes).unwrap();
    net.set_train(false);
    let eager = net.call1(images).unwrap().to_vec::<f32>().unwrap();

    let ckpt_s = ckpt.to_str().unwrap();
    let generate = |out: &Path, extra: &[&str]| {
        let mut argv = vec![
            "spore",
            "codegen",
            "--model",
            "lenet",
            "--checkpoint",
            ckpt_s,
        ];
        argv.extend_from_slice(extra);
        argv.extend_from_slice(&["--out", out.to_str().unwrap()]);
        execute(&parse(argv).unwrap()).unwrap()
    };
    let train_dir = bundled_mnist().join("train");
    let train_s = train_dir.to_str().unwrap();
    let f32_dir = work.join("fp32");
    let i8_dir = work.join("int8");
    let said = generate(&f32_dir, &[]);
    assert!(said.contains("float32"), "{said}");
    let said = generate(&i8_dir, &["--int8", "--calibration", train_s]);
    assert!(said.contains("int8"), "{said}");

    let fp32 = outputs(&f32_dir, &inputs);
    let int8 = outputs(&i8_dir, &inputs);
    let worst = fp32
        .iter()
        .flatten()
        .zip(&eager)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    // Trained logits reach tens, where float32's spacing is a few 1e-6: the bound is
    // 1e-5 relative to the largest logit (the untrained networks of spore-codegen's
    // tests are held to 1e-5 absolute).
    let largest = eager.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    eprintln!(
        "float32 C vs eager on 1,000 digits: largest difference {worst:e}, largest logit {largest}"
    );
    assert!(
        worst <= 1e-5 * largest.max(1.0),
        "float32 C vs eager: {worst} (largest logit {largest})"
    );
    let (a32, a8) = (accuracy(&fp32, &labels), accuracy(&int8, &labels));
    eprintln!(
        "LeNet accuracy on 1,000 test digits: float32 {:.2} %, int8 {:.2} %",
        100.0 * a32,
        100.0 * a8
    );
    assert!(a32 > 0.9, "the trained LeNet reaches {a32}");
    assert!((a32 - a8).abs() <= 0.005, "int8 {a8} vs float32 {a32}");
    let header = std::fs::read_to_string(i8_dir.join("model.h")).unwrap();
    let ws: usize = header
        .lines()
        .find_map(|l| l.strip_prefix("#define LENET_WORKSPACE_SIZE "))
        .unwrap()
        .trim_end_matches('u')
        .parse()
        .unwrap();
    eprintln!("int8 workspace: {ws} bytes");
    assert!(ws <= 2560, "int8 workspace {ws} bytes");

    for (name, extra) in [
        ("fp32", vec![]),
        ("int8", vec!["--int8", "--calibration", train_s]),
    ] {
        let dir = work.join(format!("m4_{name}"));
        let mut args = extra.clone();
        args.extend_from_slice(&["--target", "cortex-m"]);
        generate(&dir, &args);
        let (text, data, bss) = cortex_m_size(&dir);
        eprintln!(
            "Cortex-M4 {name}: text {text} B, data {data} B, bss {bss} B (flash {} B, RAM {} B)",
            text + data,
            data + bss
        );
        assert!(bss >= ws.min(1), "the workspace is static RAM in the image");
    }
    let _ = std::fs::remove_dir_all(&work);
}
