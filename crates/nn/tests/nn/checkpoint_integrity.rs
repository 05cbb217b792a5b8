//! Checkpoint integrity: every tensor's CRC-32 and the tensor table's are stored and
//! checked, so a flipped byte anywhere is an error (naming the file and the tensor) or
//! provably harmless, never silently different weights; files without checksums still
//! load; and `kill -9` at any moment of a save leaves a complete checkpoint.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use spore_core::{DType, Tensor};
use spore_nn::checkpoint::{
    LoadOptions, ParamDict, SaveOptions, load_checkpoint_bytes, load_checkpoint_with, save_tensors,
    save_tensors_with,
};
use spore_nn::prelude::*;

use super::fixture_path;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spore_ckpt_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A few tensors of every dtype a checkpoint holds.
fn tensors(seed: u64) -> Vec<(String, Tensor)> {
    let w = Tensor::randn(&[4, 3], DType::F32, Some(seed)).unwrap();
    vec![
        ("fc.weight".to_string(), w),
        (
            "fc.bias".to_string(),
            Tensor::from_vec(vec![0.5f64, -1.25], &[2]).unwrap(),
        ),
        (
            "global_step".to_string(),
            Tensor::from_vec(vec![seed as i32], &[1]).unwrap(),
        ),
        (
            "ids".to_string(),
            Tensor::from_vec(vec![7i64, -3], &[2]).unwrap(),
        ),
        (
            "mask".to_string(),
            Tensor::from_vec(vec![true, false, true], &[3]).unwrap(),
        ),
        (
            "bytes".to_string(),
            Tensor::from_vec(vec![1u8, 2, 250], &[3]).unwrap(),
        ),
    ]
}

fn same_values(dict: &ParamDict, expected: &[(String, Tensor)]) -> bool {
    dict.len() == expected.len()
        && expected.iter().all(|(name, t)| {
            dict.get(name).is_some_and(|got| {
                got.tensor_type() == t.tensor_type()
                    && got.to_f64_vec().unwrap() == t.to_f64_vec().unwrap()
            })
        })
}

/// Flipping any single bit of the file, at every byte, either fails to load or loads the
/// very same tensors (a flip in the header's padding, say). Data flips name the tensor.
#[test]
fn every_flipped_bit_is_detected_or_harmless() {
    let dir = temp_dir("flip");
    let path = dir.join("t.ckpt");
    let expected = tensors(1);
    save_tensors(&expected, &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let (mut detected, mut harmless) = (0, 0);
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut corrupt = bytes.clone();
            corrupt[i] ^= bit;
            match load_checkpoint_bytes(&corrupt, "t.ckpt", LoadOptions::default()) {
                Err(e) => {
                    detected += 1;
                    let message = e.to_string();
                    assert!(message.contains("t.ckpt"), "byte {i}: {message}");
                    if i >= 8 + header_len {
                        assert!(
                            message.contains("fails its CRC-32 check")
                                && message.contains("tensor \""),
                            "a flipped data byte {i} must name its tensor: {message}"
                        );
                    }
                }
                Ok(dict) => {
                    assert!(
                        same_values(&dict, &expected),
                        "byte {i} bit {bit:#x}: loaded other values without an error"
                    );
                    harmless += 1;
                }
            }
        }
    }
    // Only whitespace of the header's padding may change harmlessly.
    assert!(
        harmless <= 2 * 8,
        "{harmless} harmless flips of {}",
        2 * bytes.len()
    );
    assert!(detected > 0);
    std::fs::remove_dir_all(&dir).ok();
}

/// On a LeNet checkpoint (about 250 KB), flips at random places: the error names the
/// tensor whose bytes were hit.
#[test]
fn a_flipped_weight_byte_names_the_file_and_the_tensor() {
    let dir = temp_dir("lenet_flip");
    let path = dir.join("lenet.ckpt");
    let net = LeNet5::new(10).unwrap();
    save_checkpoint(&*net, &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let data_start = 8 + header_len;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..300 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let at = data_start + (state as usize) % (bytes.len() - data_start);
        let owner = header
            .as_object()
            .unwrap()
            .iter()
            .find(|(name, info)| {
                *name != "__metadata__" && {
                    let off = &info["data_offsets"];
                    let (s, e) = (
                        off[0].as_u64().unwrap() as usize,
                        off[1].as_u64().unwrap() as usize,
                    );
                    (s..e).contains(&(at - data_start))
                }
            })
            .map(|(name, _)| name.clone())
            .unwrap();
        let mut corrupt = bytes.clone();
        corrupt[at] ^= 1 << (state >> 61);
        std::fs::write(&path, &corrupt).unwrap();
        let err = load_checkpoint(&path).unwrap_err().to_string();
        assert!(
            err.contains(&path.display().to_string()) && err.contains(&format!("tensor {owner:?}")),
            "byte {at} of {owner}: {err}"
        );
        // Nothing reaches the network either.
        let other = LeNet5::new(10).unwrap();
        assert!(load_checkpoint_into(&*other, &path).is_err());
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn files_without_checksums_load_unless_crc_check_requires_them() {
    // Written by Python's safetensors: no checksums.
    let python = fixture_path("python_checkpoint.safetensors");
    let dict = load_checkpoint(&python).unwrap();
    assert!(!dict.is_empty());
    let err = load_checkpoint_with(&python, LoadOptions { crc_check: true })
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("carries no checksums") && err.contains("python_checkpoint"),
        "{err}"
    );

    // Spore's own file with crc_check off: no checksums, so a flip goes unnoticed, which is
    // why checksums are on by default.
    let dir = temp_dir("nocrc");
    let path = dir.join("plain.ckpt");
    save_tensors_with(&tensors(2), &path, SaveOptions { crc_check: false }).unwrap();
    let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
    assert!(!text.contains("crc32"), "no checksum keys expected");
    assert!(load_checkpoint(&path).is_ok());
    assert!(load_checkpoint_with(&path, LoadOptions { crc_check: true }).is_err());
    // With checksums (the default) both loads pass.
    save_tensors(&tensors(2), &path).unwrap();
    assert!(load_checkpoint_with(&path, LoadOptions { crc_check: true }).is_ok());
    std::fs::remove_dir_all(&dir).ok();
}

/// A checkpoint saved by another tool with Spore's keys but a renamed tensor: the table's
/// checksum catches it.
#[test]
fn a_renamed_tensor_fails_the_table_checksum() {
    let dir = temp_dir("rename");
    let path = dir.join("r.ckpt");
    save_tensors(&tensors(3), &path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(b"\"fc.weight\":".len())
        .position(|w| w == b"\"fc.weight\":")
        .unwrap();
    bytes[at + 1] = b'g'; // "gc.weight": same length, still valid JSON
    let err = load_checkpoint_bytes(&bytes, "r.ckpt", LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("table") || err.contains("checksum"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

const CHILD_ENV: &str = "SPORE_CHECKPOINT_SAVER_DIR";

/// Two versions of a large checkpoint (about 8 MB): every tensor of version `v` is filled
/// with `v`, so a file mixing two saves would be seen.
fn version(v: u8) -> Vec<(String, Tensor)> {
    (0..8)
        .map(|i| {
            let t = Tensor::from_vec(vec![v as f32; 256 * 1024], &[256, 1024]).unwrap();
            (format!("layer{i}.weight"), t)
        })
        .collect()
}

/// Helper process of the kill test: saves versions 1, 2, 1, 2, ... to the same file until
/// it is killed. It runs only when the parent test starts it.
#[test]
#[ignore = "helper process of kill_9_during_saves_never_leaves_a_partial_checkpoint"]
fn checkpoint_saver_child() {
    let dir = PathBuf::from(std::env::var(CHILD_ENV).expect("started by the kill test"));
    let versions = [version(1), version(2)];
    for i in 0.. {
        save_tensors(&versions[i % 2], dir.join("model.ckpt")).unwrap();
        std::fs::write(dir.join("saves"), (i + 1).to_string()).unwrap();
    }
}

fn saves_done(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("saves"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A process saving in a loop is killed with SIGKILL at 20 random moments; each time the
/// checkpoint under the final name is one complete version with valid checksums, and the
/// next save removes the dead process's temporary file.
#[test]
fn kill_9_during_saves_never_leaves_a_partial_checkpoint() {
    let exe = std::env::current_exe().unwrap();
    let dir = temp_dir("kill9");
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut saw_temporary = 0;
    for round in 0..20 {
        let before = saves_done(&dir);
        let mut child = std::process::Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "checkpoint_integrity::checkpoint_saver_child",
            ])
            .env(CHILD_ENV, &dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the child has saved at least once, then up to 60 ms more.
        let start = Instant::now();
        while saves_done(&dir) <= before && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            saves_done(&dir) > before,
            "round {round}: the child never saved"
        );
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        std::thread::sleep(Duration::from_micros(state % 60_000));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let dict = load_checkpoint_with(dir.join("model.ckpt"), LoadOptions { crc_check: true })
            .unwrap_or_else(|e| panic!("round {round}: after kill -9: {e}"));
        let complete = [1u8, 2].iter().any(|&v| same_values(&dict, &version(v)));
        assert!(complete, "round {round}: the checkpoint mixes versions");
        let temporaries = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .count();
        saw_temporary += temporaries;
        assert!(
            temporaries <= 1,
            "round {round}: {temporaries} temporary files"
        );
    }
    // A save now cleans up what the killed processes left.
    save_tensors(&version(3), dir.join("model.ckpt")).unwrap();
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    eprintln!("kill -9 test: {saw_temporary} of 20 kills interrupted a save mid-write");
    std::fs::remove_dir_all(&dir).ok();
}
