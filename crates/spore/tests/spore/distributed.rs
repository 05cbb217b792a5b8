//! `spore train` under `mpirun`: LeNet trained data parallel on 2 ranks (each reading its
//! shard of the bundled digits) reaches the main job's accuracy bar, 97 %.

use std::process::Command;

#[test]
fn lenet_on_2_ranks_reaches_97_percent() {
    require_mpi_feature();
    let dir = std::env::temp_dir().join(format!("spore-cli-dp-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
            "-n",
            "2",
        ])
        .arg(env!("CARGO_BIN_EXE_spore"))
        .args([
            "train",
            "--model",
            "lenet",
            "--epochs",
            "10",
            "--sink-size",
            "1000",
        ])
        // The linear scaling rule: twice the one-process rate for twice the global batch.
        .args(["--lr", "0.02", "--checkpoint-dir"])
        .arg(&dir)
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .expect("mpirun (scripts/test.sh installs openmpi-bin)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("on 2 ranks (data parallel"), "{text}");
    // Only rank 0 reports and prints the loss.
    assert_eq!(text.matches("test accuracy").count(), 1, "{text}");
    assert_eq!(text.matches("epoch: 10 step: 1000,").count(), 1, "{text}");
    let accuracy: f64 = text
        .split("test accuracy: ")
        .nth(1)
        .and_then(|s| s.split('%').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no accuracy in:\n{text}"));
    println!("LeNet on 2 ranks: {accuracy:.2} %");
    assert!(
        accuracy >= 97.0,
        "LeNet on 2 ranks reached {accuracy} %:\n{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Without the `mpi` feature this fails loudly: a multi-process claim never run proves
/// nothing.
fn require_mpi_feature() {
    #[cfg(not(feature = "mpi"))]
    panic!(
        "\n\n*** the distributed CLI test needs the `mpi` feature: run \
         `cargo test -p spore --features mpi` (scripts/test.sh does) ***\n"
    );
}
