//! Seeds: real files where the repository has them (the bundled MNIST files, a checkpoint
//! written by Python's safetensors, .npy files written by NumPy, MindSpore's documented
//! Dump configurations), and files built from real data where it has none (CIFAR-10
//! records and PNG/JPEG images made of MNIST digits, Spore's own checkpoints and print
//! files).
//!
//! ```
//! assert!(spore_fuzz::seeds::npy_files().len() >= 8);
//! ```

use std::io::Write;
use std::path::PathBuf;

use spore::core::Tensor;
use spore::core::debug::npy;
use spore::core::debug::print::{self, PrintValue};
use spore::data::idx::{IdxArray, read_idx};

fn repo_file(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

fn read(relative: &str) -> Vec<u8> {
    let path = repo_file(relative);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fuzz seed {} is missing: {e}", path.display()))
}

/// The first `n` training digits (28x28) and their labels, from the bundled files.
fn mnist_digits(n: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
    let load = |f: &str| -> IdxArray {
        read_idx(&spore::datasets::bundled_mnist().join("train").join(f))
            .unwrap_or_else(|e| panic!("bundled MNIST file: {e}"))
    };
    let images = load("train-images-idx3-ubyte.gz");
    let labels = load("train-labels-idx1-ubyte.gz");
    let digits = images
        .data
        .chunks(28 * 28)
        .take(n)
        .map(<[u8]>::to_vec)
        .collect();
    (digits, labels.data[..n].to_vec())
}

fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = e.write_all(bytes);
    e.finish().unwrap_or_default()
}

/// IDX files of 8 real digits and labels, raw and gzipped, and the real test-label file.
pub fn idx() -> Vec<Vec<u8>> {
    let (digits, labels) = mnist_digits(8);
    let images = idx_bytes(&[8, 28, 28], &digits.concat());
    let labels = idx_bytes(&[8], &labels);
    vec![
        gzip(&images),
        gzip(&labels),
        images,
        labels,
        read("data/mnist/test/t10k-labels-idx1-ubyte.gz"),
    ]
}

/// A digit padded to 32x32.
fn padded(digit: &[u8]) -> Vec<u8> {
    let mut plane = vec![0u8; 32 * 32];
    for (r, row) in digit.chunks(28).enumerate() {
        plane[(r + 2) * 32 + 2..][..28].copy_from_slice(row);
    }
    plane
}

/// CIFAR-10 batches (label byte, then red, green and blue 32x32 planes) of 1 and 4
/// records, made of MNIST digits: the repository ships no CIFAR-10 file.
pub fn cifar10() -> Vec<Vec<u8>> {
    let (digits, labels) = mnist_digits(4);
    let record = |i: usize| {
        let plane = padded(&digits[i]);
        let inverted: Vec<u8> = plane.iter().map(|p| 255 - p).collect();
        [vec![labels[i]], plane.clone(), inverted, plane].concat()
    };
    vec![record(0), (0..4).flat_map(record).collect()]
}

/// PNG (grey and RGB) and JPEG encodings of real digits.
pub fn images() -> Vec<Vec<u8>> {
    let (digits, _) = mnist_digits(3);
    let encode = |img: image::DynamicImage, format: image::ImageFormat| {
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, format)
            .unwrap_or_else(|e| panic!("encoding a seed image: {e}"));
        out.into_inner()
    };
    let grey = |d: &[u8]| image::GrayImage::from_raw(28, 28, d.to_vec());
    let rgb = |d: &[u8]| {
        image::RgbImage::from_raw(
            28,
            28,
            d.iter().flat_map(|&p| [p, p / 2, 255 - p]).collect(),
        )
    };
    let (Some(g0), Some(c1), Some(c2)) = (grey(&digits[0]), rgb(&digits[1]), rgb(&digits[2]))
    else {
        panic!("seed images: 28x28 buffers of the wrong size");
    };
    vec![
        encode(g0.into(), image::ImageFormat::Png),
        encode(c1.into(), image::ImageFormat::Png),
        encode(c2.into(), image::ImageFormat::Jpeg),
    ]
}

/// A checkpoint written by Python's `safetensors` (no checksums) and one written by
/// Spore (with checksums, every dtype).
pub fn checkpoints() -> Vec<Vec<u8>> {
    let dir = std::env::temp_dir().join(format!("spore-fuzz-seeds-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("seed.ckpt");
    let tensors = vec![
        (
            "fc.weight".to_string(),
            Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 0.25, 3.0, -0.5], &[2, 3]),
        ),
        (
            "fc.bias".to_string(),
            Tensor::from_vec(vec![1.0f64, -2.0], &[2]),
        ),
        ("global_step".to_string(), Tensor::from_vec(vec![5i32], &[])),
        ("ids".to_string(), Tensor::from_vec(vec![3i64, 1], &[2])),
        (
            "mask".to_string(),
            Tensor::from_vec(vec![true, false], &[2]),
        ),
        ("pixels".to_string(), Tensor::from_vec(vec![1u8, 255], &[2])),
    ];
    let tensors: Vec<(String, Tensor)> = tensors
        .into_iter()
        .map(|(n, t)| (n, t.unwrap_or_else(|e| panic!("seed tensor: {e}"))))
        .collect();
    spore::nn::checkpoint::save_tensors(&tensors, &path)
        .unwrap_or_else(|e| panic!("seed checkpoint: {e}"));
    let spore_file = std::fs::read(&path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    vec![
        read("crates/nn/tests/fixtures/python_checkpoint.safetensors"),
        spore_file,
    ]
}

/// MindSpore's documented Dump configuration and two variants.
pub fn dump_configs() -> Vec<Vec<u8>> {
    [
        "synchronous.json",
        "asynchronous_statistics.json",
        "overflow.json",
    ]
    .iter()
    .map(|f| read(&format!("crates/fuzz/seeds/dump_config/{f}")))
    .collect()
}

/// ONNX models Spore exports: a Dense + ReLU network and LeNet5.
pub fn onnx_models() -> Vec<Vec<u8>> {
    use spore::nn::prelude::*;
    let dir = std::env::temp_dir().join(format!("spore_fuzz_onnx_{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let mut out = vec![];
    let export = |net: &dyn spore::nn::cell::Cell, shape: &[usize], name: &str| -> Vec<u8> {
        let path = dir.join(name);
        let x = Tensor::zeros(shape, spore::core::DType::F32)
            .unwrap_or_else(|e| panic!("seed input: {e}"));
        spore::export(net, &[x], &path, spore::Format::Onnx)
            .unwrap_or_else(|e| panic!("seed export: {e}"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("seed model: {e}"))
    };
    let dense = Dense::config(4, 3)
        .activation(ReLU::new())
        .build()
        .unwrap_or_else(|e| panic!("seed net: {e}"));
    out.push(export(&*dense, &[2, 4], "dense.onnx"));
    out.push(export(
        &*LeNet5::new(10).unwrap_or_else(|e| panic!("seed net: {e}")),
        &[1, 1, 32, 32],
        "lenet.onnx",
    ));
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Files written by NumPy (`seeds/make_npy_seeds.py`).
pub fn npy_files() -> Vec<Vec<u8>> {
    let dir = repo_file("crates/fuzz/seeds/npy");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "npy"))
        .collect();
    names.sort();
    names.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// Print files as the Print operator writes them: the magic, then calls with text and
/// tensors.
pub fn print_files() -> Vec<Vec<u8>> {
    let tensor = |t: spore::core::Result<Tensor>| t.unwrap_or_else(|e| panic!("seed tensor: {e}"));
    let calls = [
        vec![
            PrintValue::Text("loss:".into()),
            PrintValue::Tensor(tensor(Tensor::from_vec(
                vec![0.5f32, 1.5, -2.0, 3.0],
                &[2, 2],
            ))),
        ],
        vec![PrintValue::Tensor(tensor(Tensor::from_vec(
            vec![7i32],
            &[],
        )))],
        vec![PrintValue::Text("step done".into())],
    ];
    let mut file = print::MAGIC.to_vec();
    for call in &calls {
        file.extend(print::encode(call).unwrap_or_else(|e| panic!("seed print call: {e}")));
    }
    let one_call = [
        print::MAGIC.to_vec(),
        print::encode(&calls[0]).unwrap_or_default(),
    ]
    .concat();
    // A tensor's .npy bytes alone, to splice into calls.
    let npy_alone =
        npy::encode(&tensor(Tensor::from_vec(vec![1.0f64, 2.0], &[2]))).unwrap_or_default();
    vec![file, one_call, npy_alone]
}

/// The README's command lines, one argument per line.
pub fn command_lines() -> Vec<Vec<u8>> {
    [
        "train --model lenet --mode graph --epochs 10 --batch-size 32 --sink-size 250 --checkpoint-dir ckpt",
        "train --model mlp --mode pynative --epochs 1 --lr 0.05 --momentum 0.8 --seed 3 --data data/mnist",
        "eval --model lenet --checkpoint ckpt/lenet-10_250.ckpt --data data/mnist/test --batch-size 64",
        "predict --model lenet --checkpoint ckpt/lenet-10_250.ckpt digit.png other.jpg",
        "dump compare /tmp/dump_pynative /tmp/dump_graph --tolerance 1e-5",
        "dump stats /tmp/dump --graph 1 --iteration 0",
        "dump list /tmp/dump",
        "print-file print.pb",
    ]
    .iter()
    .map(|line| line.split(' ').collect::<Vec<_>>().join("\n").into_bytes())
    .collect()
}
