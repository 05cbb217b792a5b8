//! The `spore` command: train, eval, predict, and the errors bad input gets.

use std::path::PathBuf;
use std::process::Command;

fn spore(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spore"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spore-cli-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

#[test]
fn train_eval_and_predict_from_the_command_line() {
    let dir = temp("ckpt");
    let d = dir.to_string_lossy().to_string();
    let (ok, out, err) = spore(&[
        "train",
        "--model",
        "lenet",
        "--mode",
        "graph",
        "--epochs",
        "2",
        "--batch-size",
        "32",
        "--sink-size",
        "20",
        "--checkpoint-dir",
        &d,
    ]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("epoch: 2 step: 20, loss is ") && out.contains("test accuracy:"),
        "{out}"
    );
    let ckpt = dir.join("lenet-2_20.ckpt");
    assert!(ckpt.is_file(), "{out}");
    let c = ckpt.to_string_lossy().to_string();

    let (ok, out, err) = spore(&["eval", "--model", "lenet", "--checkpoint", &c]);
    assert!(
        ok && out.contains("accuracy:") && out.contains("on 1000 samples"),
        "{out}{err}"
    );
    let test_dir = spore::datasets::bundled_mnist().join("test");
    let (ok, out, _) = spore(&[
        "eval",
        "--model",
        "lenet",
        "--checkpoint",
        &c,
        "--data",
        &test_dir.to_string_lossy(),
    ]);
    assert!(ok && out.contains("accuracy:"), "{out}");

    // A digit from the test set as a PNG.
    let mnist = spore_data::mnist::Mnist::load(&test_dir, spore_data::mnist::Usage::Test).unwrap();
    let png = dir.join("digit.png");
    image::GrayImage::from_raw(28, 28, mnist.image(0).to_vec())
        .unwrap()
        .save(&png)
        .unwrap();
    let (ok, out, err) = spore(&[
        "predict",
        "--model",
        "lenet",
        "--checkpoint",
        &c,
        &png.to_string_lossy(),
    ]);
    assert!(ok && out.contains("digit.png: class "), "{out}{err}");

    // Bad input: errors that say what is wrong, and no panic.
    let (ok, _, err) = spore(&["eval", "--model", "mlp", "--checkpoint", &c]);
    assert!(
        !ok && err.contains("not a mlp checkpoint") && !err.contains("panicked"),
        "{err}"
    );
    let (ok, _, err) = spore(&["train", "--model", "alexnet", "--checkpoint-dir", &d]);
    assert!(
        !ok && err.contains("unknown model \"alexnet\"") && err.contains("lenet, mlp, resnet18"),
        "{err}"
    );
    let (ok, _, err) = spore(&[
        "train",
        "--model",
        "lenet",
        "--data",
        "/nonexistent/mnist",
        "--checkpoint-dir",
        &d,
    ]);
    assert!(
        !ok && err.contains("/nonexistent/mnist") && err.contains("does not exist"),
        "{err}"
    );
    let (ok, _, err) = spore(&[
        "train",
        "--model",
        "lenet",
        "--epochs",
        "ten",
        "--checkpoint-dir",
        &d,
    ]);
    assert!(
        !ok && err.contains("--epochs expects a positive integer"),
        "{err}"
    );
    let (ok, _, err) = spore(&["train", "--model", "resnet18", "--checkpoint-dir", &d]);
    assert!(!ok && err.contains("CIFAR-10"), "{err}");
    let truncated = dir.join("truncated.ckpt");
    let bytes = std::fs::read(&ckpt).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let (ok, _, err) = spore(&[
        "eval",
        "--model",
        "lenet",
        "--checkpoint",
        &truncated.to_string_lossy(),
    ]);
    assert!(
        !ok && err.contains("truncated.ckpt") && !err.contains("panicked"),
        "{err}"
    );
    let (ok, _, err) = spore(&["dump", "list", "/nonexistent/dump"]);
    assert!(!ok && err.contains("does not exist"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn parallel_plan_prints_strategies_time_and_memory_per_device_count() {
    let (ok, out, err) = spore(&[
        "parallel",
        "plan",
        "--model",
        "lenet",
        "--devices",
        "2,8",
        "--batch-per-device",
        "4",
    ]);
    assert!(ok, "{err}");
    for devices in ["2 devices", "8 devices"] {
        assert!(out.contains(&format!("lenet on {devices}")), "{out}");
    }
    // Every product and convolution gets a strategy, and each plan its figures.
    assert!(out.contains("Conv2D-op"), "{out}");
    assert_eq!(out.matches("predicted step").count(), 2, "{out}");
    assert_eq!(out.matches("pure data parallelism").count(), 2, "{out}");
    // With the whole batch on every device too.
    let (ok, out, err) = spore(&[
        "parallel",
        "plan",
        "--model",
        "lenet",
        "--devices",
        "2",
        "--full-batch",
    ]);
    assert!(ok && out.contains("predicted step"), "{err}");
    for (args, expected) in [
        (
            vec!["--devices", "0"],
            "--devices expects comma-separated counts in [1, 4096]",
        ),
        (
            vec!["--devices", "8", "--flops=-1"],
            "--flops expects a positive number",
        ),
        (
            vec!["--devices", "8", "--search-mode", "fast"],
            "search_mode must be one of",
        ),
        (
            vec!["--devices", "8", "--optimizer", "sgd2"],
            "--optimizer expects momentum or adam",
        ),
    ] {
        let mut argv = vec!["parallel", "plan", "--model", "lenet"];
        argv.extend(args);
        let (ok, _, err) = spore(&argv);
        assert!(!ok && err.contains(expected), "{argv:?}: {err}");
    }
    let (ok, _, err) = spore(&["parallel", "plan", "--model", "alexnet", "--devices", "2"]);
    assert!(!ok && err.contains("unknown model \"alexnet\""), "{err}");
}
