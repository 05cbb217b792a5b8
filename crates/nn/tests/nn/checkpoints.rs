//! Checkpoints: round trip, resuming training bit-identically (parameters and optimizer
//! state), a file written by Python's `safetensors`, and errors for truncated, corrupted
//! and mismatched files.

use std::path::PathBuf;
use std::sync::Arc;

use spore_core::context::Mode;
use spore_core::ops::PadMode;
use spore_core::{DType, Tensor, rng};
use spore_nn::checkpoint::{load_checkpoint_into, save_tensors};
use spore_nn::optim::WarmupCosineLR;
use spore_nn::prelude::*;

use super::{assert_close, assert_same, batch, fixture_path, serial, set_mode};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spore_nn_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn small_net() -> Arc<SequentialCell> {
    SequentialCell::new(vec![
        Conv2d::config(1, 3, 3)
            .pad_mode(PadMode::Same)
            .build()
            .unwrap(),
        BatchNorm2d::new(3).unwrap(),
        ReLU::new(),
        Flatten::new(),
        Dense::new(3 * 5 * 5, 4).unwrap(),
    ])
}

fn trainer(seed: u64) -> Arc<TrainOneStepCell> {
    rng::set_seed(seed);
    let net = small_net();
    let opt = Adam::config(
        net.trainable_params(),
        WarmupCosineLR::new(0.001, 0.05, 2, 6),
    )
    .weight_decay(0.01)
    .build()
    .unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    TrainOneStepCell::new(WithLossCell::new(net, loss), opt)
}

fn run_steps(t: &Arc<TrainOneStepCell>, range: std::ops::Range<u64>) {
    for s in range {
        let (x, y) = batch(&[6, 1, 5, 5], 4, s);
        t.step(&x, &y).unwrap();
    }
}

fn snapshot(t: &Arc<TrainOneStepCell>) -> Vec<(String, Tensor)> {
    t.parameters_and_names()
        .into_iter()
        .map(|(n, p)| (n, p.stored()))
        .collect()
}

fn resume_is_bit_identical(mode: Mode) {
    let dir = temp_dir(&format!("resume_{mode:?}"));
    let path = dir.join("step3.safetensors");
    // Networks are built in PyNative mode; the steps run in `mode`.
    let build = |seed| {
        set_mode(Mode::PyNative);
        let t = trainer(seed);
        set_mode(mode);
        t
    };

    let uninterrupted = build(1);
    run_steps(&uninterrupted, 0..6);

    let first = build(1);
    run_steps(&first, 0..3);
    save_checkpoint(&*first, &path).unwrap();

    let resumed = build(2); // different initial weights, all overwritten by the load
    let report = load_checkpoint_into(&*resumed, &path).unwrap();
    report.ensure_complete().unwrap();
    run_steps(&resumed, 3..6);
    set_mode(Mode::PyNative);

    let (a, b) = (snapshot(&uninterrupted), snapshot(&resumed));
    assert_eq!(a.len(), b.len());
    assert!(a.iter().any(|(n, _)| n == "moment1.4.weight"));
    assert!(a.iter().any(|(n, _)| n == "1.moving_mean"));
    for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        assert_same(tb, ta, &format!("{mode:?}: {na}"));
    }
    let step = a.iter().find(|(n, _)| n == "global_step").unwrap();
    assert_eq!(step.1.to_vec::<i32>().unwrap(), vec![6]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn resuming_from_a_checkpoint_is_bit_identical_to_an_uninterrupted_run() {
    let _s = serial();
    resume_is_bit_identical(Mode::PyNative);
    resume_is_bit_identical(Mode::Graph);
}

#[test]
fn round_trip_keeps_names_dtypes_and_values() {
    let _s = serial();
    let dir = temp_dir("roundtrip");
    let path = dir.join("net.safetensors");
    rng::set_seed(3);
    let a = LeNet5::new(10).unwrap();
    save_checkpoint(&*a, &path).unwrap();
    // Overwriting is atomic: no temporary file is left behind.
    save_checkpoint(&*a, &path).unwrap();
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["net.safetensors"]);
    let dict = load_checkpoint(&path).unwrap();
    assert_eq!(dict.len(), 8);
    rng::set_seed(4);
    let b = LeNet5::new(10).unwrap();
    let report = load_param_into_net(&*b, &dict).unwrap();
    assert_eq!(report, LoadReport::default());
    for ((n, p), (_, q)) in a
        .parameters_and_names()
        .iter()
        .zip(b.parameters_and_names())
    {
        assert_same(&q.value(), &p.value(), n);
    }

    // Every dtype survives.
    let mixed = vec![
        (
            "f64".to_string(),
            Tensor::from_vec(vec![1.5f64, -2.0], &[2]).unwrap(),
        ),
        (
            "i64".to_string(),
            Tensor::from_vec(vec![7i64], &[1]).unwrap(),
        ),
        (
            "u8".to_string(),
            Tensor::from_vec(vec![0u8, 255], &[2]).unwrap(),
        ),
        (
            "b".to_string(),
            Tensor::from_vec(vec![true, false], &[2]).unwrap(),
        ),
        ("scalar".to_string(), Tensor::scalar(3.0f32)),
        (
            "f16".to_string(),
            Tensor::from_vec(vec![1.5f32, -65504.0, 6e-8], &[3])
                .and_then(|t| t.cast(DType::F16))
                .unwrap(),
        ),
        (
            "bf16".to_string(),
            Tensor::from_vec(vec![1.5f32, -3e38, 1e-40], &[3])
                .and_then(|t| t.cast(DType::BF16))
                .unwrap(),
        ),
    ];
    let p2 = dir.join("mixed.safetensors");
    save_tensors(&mixed, &p2).unwrap();
    // safetensors' own dtype names, as other readers expect them.
    let file = std::fs::read(&p2).unwrap();
    let header_len = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8_lossy(&file[8..8 + header_len]).to_string();
    assert!(
        header.contains(r#""dtype":"F16""#) && header.contains(r#""dtype":"BF16""#),
        "{header}"
    );
    let back = load_checkpoint(&p2).unwrap();
    for (n, t) in &mixed {
        assert_same(&back[n], t, n);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_written_by_python_safetensors_loads() {
    let _s = serial();
    let net = SequentialCell::new(vec![
        Dense::new(4, 3).unwrap(),
        ReLU::new(),
        Dense::new(3, 2).unwrap(),
    ]);
    let path = fixture_path("python_checkpoint.safetensors");
    let report = load_checkpoint_into(&*net, &path).unwrap();
    assert!(report.missing.is_empty());
    assert_eq!(report.unexpected, ["expected.x", "expected.y"]);
    assert!(report.ensure_complete().is_err());
    let dict = load_checkpoint(&path).unwrap();
    let y = net.call1(&dict["expected.x"]).unwrap();
    assert_close(&y, &dict["expected.y"], 1e-5, "python weights");
}

#[test]
fn truncated_and_corrupted_files_are_errors_naming_the_file() {
    let _s = serial();
    let dir = temp_dir("corrupt");
    let good = dir.join("good.safetensors");
    save_checkpoint(&*LeNet5::new(10).unwrap(), &good).unwrap();
    let bytes = std::fs::read(&good).unwrap();

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated.safetensors", bytes[..bytes.len() / 2].to_vec()),
        ("header_only.safetensors", bytes[..20].to_vec()),
        ("empty.safetensors", vec![]),
        (
            "garbage.safetensors",
            b"this is not a checkpoint at all".to_vec(),
        ),
        ("huge_header.safetensors", {
            let mut b = u64::MAX.to_le_bytes().to_vec();
            b.extend_from_slice(b"{}");
            b
        }),
        ("bad_json.safetensors", {
            let mut b = bytes.clone();
            b[10] = b'!';
            b
        }),
    ];
    for (name, data) in cases {
        let path = dir.join(name);
        std::fs::write(&path, data).unwrap();
        let err = load_checkpoint(&path).unwrap_err().to_string();
        assert!(err.contains(name), "{name}: {err}");
    }
    let missing = dir.join("nope.safetensors");
    let err = load_checkpoint(&missing).unwrap_err().to_string();
    assert!(err.contains("nope.safetensors"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shape_mismatches_are_reported_by_name_and_nothing_is_loaded() {
    let _s = serial();
    let dir = temp_dir("mismatch");
    let path = dir.join("ten_classes.safetensors");
    save_checkpoint(&*LeNet5::new(10).unwrap(), &path).unwrap();
    let net = LeNet5::new(5).unwrap();
    let before = net.conv1.weight.value().to_vec::<f32>().unwrap();
    let err = load_checkpoint_into(&*net, &path).unwrap_err().to_string();
    assert!(err.contains("ten_classes.safetensors"), "{err}");
    assert!(
        err.contains("fc3.weight") && err.contains("[10, 84]") && err.contains("[5, 84]"),
        "{err}"
    );
    assert!(err.contains("fc3.bias"), "{err}");
    assert_eq!(
        net.conv1.weight.value().to_vec::<f32>().unwrap(),
        before,
        "nothing loaded"
    );

    // Missing keys are reported, present ones loaded.
    let partial = dir.join("partial.safetensors");
    save_tensors(
        &[(
            "conv1.weight".to_string(),
            Tensor::zeros(&[6, 1, 5, 5], DType::F32).unwrap(),
        )],
        &partial,
    )
    .unwrap();
    let report = load_checkpoint_into(&*net, &partial).unwrap();
    assert_eq!(report.missing.len(), 7);
    assert!(report.unexpected.is_empty());
    assert_eq!(
        net.conv1.weight.value().to_vec::<f32>().unwrap(),
        vec![0.0; 150]
    );
    let dtype = dir.join("dtype.safetensors");
    save_tensors(
        &[(
            "conv1.weight".to_string(),
            Tensor::zeros(&[6, 1, 5, 5], DType::F64).unwrap(),
        )],
        &dtype,
    )
    .unwrap();
    let err = load_checkpoint_into(&*net, &dtype).unwrap_err().to_string();
    assert!(err.contains("Float64") || err.contains("F64"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_save_leaves_the_previous_checkpoint_and_no_temporary_file() {
    let _s = serial();
    let dir = temp_dir("atomic");
    let path = dir.join("ckpt.safetensors");
    let net = Dense::new(3, 2).unwrap();
    save_checkpoint(&*net, &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    // A folder where the checkpoint should go: the rename fails after the temporary
    // file was written and synced.
    let blocked = dir.join("blocked.safetensors");
    std::fs::create_dir_all(blocked.join("inner")).unwrap();
    let err = save_checkpoint(&*net, &blocked).unwrap_err().to_string();
    assert!(err.contains("blocked.safetensors"), "{err}");
    // Two tensors with one name: refused before anything is written.
    let dup = vec![
        ("w".to_string(), Tensor::ones(&[1], DType::F32).unwrap()),
        ("w".to_string(), Tensor::ones(&[1], DType::F32).unwrap()),
    ];
    assert!(save_tensors(&dup, &path).is_err());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the previous checkpoint is intact"
    );
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["blocked.safetensors", "ckpt.safetensors"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
