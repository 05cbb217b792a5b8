//! The fuzz targets: one per reader of outside bytes, each with its seeds, the function
//! that feeds it an input, and the largest allocation an input of a given length may
//! justify.
//!
//! ```
//! let names: Vec<&str> = spore_fuzz::targets::all().iter().map(|t| t.name).collect();
//! assert_eq!(names, ["idx", "cifar10", "image", "checkpoint", "dump_config", "npy", "print_file", "cli", "onnx"]);
//! ```
//!
//! Errors are the expected outcome for most inputs; a target only fails on a panic, a
//! hang or an oversized allocation. Raw formats copy their input at most a few times
//! ([`raw`]); compressed ones (gzipped IDX, PNG, JPEG) may expand it by their codec's
//! limit, about a thousand times ([`compressed`]).

use spore::core::debug::dump::config::DumpConfig;
use spore::core::debug::{npy, print};
use spore::data::transforms::vision::decode_bytes;
use spore::nn::checkpoint::{LoadOptions, load_checkpoint_bytes};

use crate::seeds;

/// A reader under test.
pub struct Target {
    pub name: &'static str,
    /// What it reads, for reports.
    pub reads: &'static str,
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Feeds one input; `Err` is a rejection (fine), a panic is a bug.
    pub run: fn(&[u8]) -> Result<(), String>,
    /// The largest single allocation an input of this length may cause.
    pub alloc_limit: fn(usize) -> usize,
    /// Words of the format for the mutator to insert.
    pub dictionary: &'static [&'static str],
}

/// A parser that copies its input into tensors and strings: 1 MiB, plus 16 bytes per
/// input byte (a `u8` becoming an `f32` is 4).
pub fn raw(len: usize) -> usize {
    (1 << 20) + 16 * len
}

/// A decompressing parser: 64 MiB, plus 1100 bytes per input byte (deflate's limit is
/// about 1032:1, JPEG's on plain images similar).
pub fn compressed(len: usize) -> usize {
    (64 << 20) + 1100 * len
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn idx(bytes: &[u8]) -> Result<(), String> {
    spore::data::idx::decode_idx(bytes, "fuzz.idx")
        .map(drop)
        .map_err(|e| e.to_string())
}

fn cifar10(bytes: &[u8]) -> Result<(), String> {
    let (mut images, mut labels) = (Vec::new(), Vec::new());
    spore::data::source::cifar::parse_batch(bytes, "fuzz.bin", &mut images, &mut labels)
        .map_err(|e| e.to_string())
}

fn image(bytes: &[u8]) -> Result<(), String> {
    decode_bytes(bytes).map(drop).map_err(|e| e.to_string())
}

fn checkpoint(bytes: &[u8]) -> Result<(), String> {
    let dict = load_checkpoint_bytes(bytes, "fuzz.ckpt", LoadOptions::default())
        .map_err(|e| e.to_string())?;
    // What a user does next: print the tensors.
    for t in dict.values() {
        std::hint::black_box(t.to_string());
    }
    Ok(())
}

fn dump_config(bytes: &[u8]) -> Result<(), String> {
    let config = DumpConfig::parse(&text(bytes)).map_err(|e| e.to_string())?;
    // The selection functions read the parsed ranges and names.
    for it in [0, 1, 7, 120, u64::MAX] {
        std::hint::black_box(config.iteration_selected(it));
    }
    std::hint::black_box(config.op_selected("Conv2D", "Default/network/conv1/Conv2D-op0"));
    Ok(())
}

fn npy_file(bytes: &[u8]) -> Result<(), String> {
    let t = npy::decode(bytes).map_err(|e| e.to_string())?;
    std::hint::black_box(t.to_string());
    // A decoded tensor goes back out unchanged.
    let again = npy::encode(&t).map_err(|e| e.to_string())?;
    let back = npy::decode(&again).map_err(|e| format!("re-reading our own encoding: {e}"))?;
    if back.tensor_type() != t.tensor_type() {
        return Err("unreachable: types differ after a round trip".into());
    }
    Ok(())
}

fn print_file(bytes: &[u8]) -> Result<(), String> {
    let calls = print::parse_print_bytes(bytes, "fuzz.pb").map_err(|e| e.to_string())?;
    for value in calls.iter().flatten() {
        std::hint::black_box(value.to_string());
    }
    Ok(())
}

/// One argument per line, after the program's name.
fn cli(bytes: &[u8]) -> Result<(), String> {
    let line = text(bytes);
    let args = std::iter::once("spore").chain(line.split('\n'));
    spore::cli::args::parse(args)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Every target, in the order the reports list them.
pub fn all() -> Vec<Target> {
    vec![
        idx_target(),
        cifar10_target(),
        image_target(),
        checkpoint_target(),
        dump_config_target(),
        npy_target(),
        print_file_target(),
        cli_target(),
        onnx_target(),
    ]
}

fn onnx(bytes: &[u8]) -> Result<(), String> {
    // Parsing only: running a model may rightly allocate more than its file holds.
    spore::onnx::import_bytes(bytes, None)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn onnx_target() -> Target {
    Target {
        name: "onnx",
        reads: "ONNX models (spore::onnx::import, spore run)",
        seeds: seeds::onnx_models,
        run: onnx,
        alloc_limit: raw,
        dictionary: &["Conv", "Relu", "MatMul", "Reshape", "ai.onnx"],
    }
}

fn idx_target() -> Target {
    Target {
        name: "idx",
        reads: "MNIST IDX files, raw and gzipped",
        seeds: seeds::idx,
        run: idx,
        alloc_limit: compressed,
        dictionary: &["\u{1f}\u{8b}", "\u{0}\u{0}\u{8}\u{3}"],
    }
}

fn cifar10_target() -> Target {
    Target {
        name: "cifar10",
        reads: "CIFAR-10 binary batches",
        seeds: seeds::cifar10,
        run: cifar10,
        alloc_limit: raw,
        dictionary: &[],
    }
}

fn image_target() -> Target {
    Target {
        name: "image",
        reads: "PNG and JPEG images (Decode, ImageFolderDataset, spore predict)",
        seeds: seeds::images,
        run: image,
        alloc_limit: compressed,
        dictionary: &[
            "IHDR",
            "IDAT",
            "IEND",
            "PLTE",
            "\u{ff}\u{d8}",
            "\u{ff}\u{c0}",
            "\u{ff}\u{da}",
        ],
    }
}

fn checkpoint_target() -> Target {
    Target {
        name: "checkpoint",
        reads: "safetensors checkpoints",
        seeds: seeds::checkpoints,
        run: checkpoint,
        alloc_limit: raw,
        dictionary: &[
            "dtype",
            "shape",
            "data_offsets",
            "__metadata__",
            "F32",
            "I64",
            "BOOL",
            "F16",
            "crc32_header",
            "crc32:",
        ],
    }
}

fn dump_config_target() -> Target {
    Target {
        name: "dump_config",
        reads: "Dump configuration JSON (SPORE_DUMP_CONFIG, MINDSPORE_DUMP_CONFIG)",
        seeds: seeds::dump_configs,
        run: dump_config,
        alloc_limit: raw,
        dictionary: &[
            "common_dump_settings",
            "e2e_dump_settings",
            "dump_mode",
            "path",
            "net_name",
            "iteration",
            "input_output",
            "kernels",
            "support_device",
            "op_debug_mode",
            "saved_data",
            "enable",
            "trans_flag",
            "all",
        ],
    }
}

fn npy_target() -> Target {
    Target {
        name: "npy",
        reads: "NumPy .npy files (Dump output, spore dump)",
        seeds: seeds::npy_files,
        run: npy_file,
        alloc_limit: raw,
        dictionary: &[
            "\u{93}NUMPY",
            "descr",
            "fortran_order",
            "shape",
            "<f4",
            "<f8",
            "<i4",
            "<i8",
            "|u1",
            "|b1",
            "True",
            "False",
            "()",
            "(0,)",
        ],
    }
}

fn print_file_target() -> Target {
    Target {
        name: "print_file",
        reads: "files written by the Print operator (print_file_path, spore print-file)",
        seeds: seeds::print_files,
        run: print_file,
        alloc_limit: raw,
        dictionary: &["SPOREPRT", "\u{93}NUMPY"],
    }
}

fn cli_target() -> Target {
    Target {
        name: "cli",
        reads: "the spore command's arguments",
        seeds: seeds::command_lines,
        run: cli,
        alloc_limit: raw,
        dictionary: &[
            "train",
            "eval",
            "predict",
            "dump",
            "list",
            "stats",
            "compare",
            "print-file",
            "--model",
            "--mode",
            "--epochs",
            "--batch-size",
            "--sink-size",
            "--checkpoint-dir",
            "--data",
            "--lr",
            "--momentum",
            "--seed",
            "--checkpoint",
            "--graph",
            "--iteration",
            "--tolerance",
            "--help",
            "-h",
            "--",
            "lenet",
            "mlp",
            "resnet18",
            "graph",
            "pynative",
        ],
    }
}

/// The target called `name`.
pub fn by_name(name: &str) -> Option<Target> {
    all().into_iter().find(|t| t.name == name)
}
