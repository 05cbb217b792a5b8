//! Code generation for small devices (MindSpore Lite's Codegen): an inference network
//! becomes a self-contained C99 project with no runtime. Each step of the network is a
//! kernel specialised to its shapes; the weights are `const` arrays (flash on a
//! microcontroller); every intermediate value lives at an offset planned now in one
//! workspace the caller passes in, so the library calls no `malloc`, keeps no state and
//! prints nothing.
//!
//! ```no_run
//! use spore_codegen::{Options, Target, generate};
//! use spore_core::{DType, TensorType};
//! use spore_nn::prelude::*;
//! let net = LeNet5::new(10).unwrap();
//! let project = generate(&*net, &[TensorType::new(&[1, 1, 32, 32], DType::F32)],
//!                        &Options::new("lenet", Target::X86)).unwrap();
//! project.write_to("lenet_c".as_ref()).unwrap();
//! println!("workspace: {} bytes", project.report.workspace_bytes);
//! // cd lenet_c && make && ./benchmark digit.npy
//! ```
//!
//! The pipeline: [`freeze`] (trace in evaluation mode, fold the weights), [`lower`] (fuse
//! into kernels: BatchNorm into convolutions, bias, ReLU and pooling into their
//! producers), [`arena`] (offsets from liveness), [`emit`] (C text), and for int8,
//! [`quant`] (post-training quantization from calibration inputs).

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod arena;
pub mod emit;
pub mod freeze;
pub mod lower;
pub mod program;
pub mod quant;

use std::fmt::Write;
use std::path::Path;

use spore_core::ir::Graph;
use spore_core::{Error, Result, Tensor, TensorType};
use spore_nn::cell::Cell;

use emit::{Api, files};
use program::Program;

/// What the generated project builds for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The host's C compiler (`cc`): a benchmark program and a static library.
    X86,
    /// `arm-none-eabi-gcc -mcpu=cortex-m4 -mthumb -Os`: a static library and a bare-metal
    /// image whose flash and RAM `arm-none-eabi-size` reports.
    CortexM,
}

impl Target {
    /// Parses `x86` or `cortex-m`.
    pub fn parse(s: &str) -> Result<Target> {
        match s {
            "x86" => Ok(Target::X86),
            "cortex-m" => Ok(Target::CortexM),
            _ => Err(Error::invalid(format!(
                "codegen: expected target x86 or cortex-m, got {s:?}"
            ))),
        }
    }
}

/// How to generate.
#[derive(Clone, Debug)]
pub struct Options {
    /// Prefix of every C name (`lenet_predict`); letters, digits and `_`.
    pub name: String,
    pub target: Target,
    /// Int8 kernels, quantized from these calibration inputs (one list of input tensors
    /// per sample); `None` for float32.
    pub int8_calibration: Option<Vec<Vec<Tensor>>>,
}

impl Options {
    pub fn new(name: &str, target: Target) -> Options {
        Options {
            name: name.to_string(),
            target,
            int8_calibration: None,
        }
    }

    /// Int8 kernels calibrated on `samples`.
    pub fn int8(mut self, samples: Vec<Vec<Tensor>>) -> Options {
        self.int8_calibration = Some(samples);
        self
    }
}

/// What was generated, for the user and the tests.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Each kernel: its scope and what it computes (`Conv2D+ReLU+MaxPool`).
    pub kernels: Vec<(String, String)>,
    /// The workspace `predict` needs.
    pub workspace_bytes: usize,
    /// The most bytes of intermediate values alive at once: no plan needs less.
    pub arena_lower_bound: usize,
    /// Bytes of the weight arrays.
    pub weight_bytes: usize,
    /// Bytes of the network's parameters (float32).
    pub parameter_bytes: usize,
    /// Int8 only: the scales chosen per tensor.
    pub quantization: Vec<String>,
    /// The most stack one kernel uses (its row of sums and register tile), outside the
    /// workspace.
    pub stack_bytes: usize,
}

impl Report {
    /// The report as text (also written as `REPORT.md`).
    pub fn to_text(&self, name: &str) -> String {
        let mut s = format!("# {name}: generated C\n\n| kernel | scope |\n|---|---|\n");
        for (scope, kind) in &self.kernels {
            let _ = writeln!(s, "| {kind} | {scope} |");
        }
        let _ = writeln!(
            s,
            "\nworkspace: {} bytes (lower bound {} bytes, the most alive at once)\nweights: {} bytes (parameters: {} bytes)\nstack: at most {} bytes in one kernel",
            self.workspace_bytes,
            self.arena_lower_bound,
            self.weight_bytes,
            self.parameter_bytes,
            self.stack_bytes
        );
        if !self.quantization.is_empty() {
            s.push_str(
                "\nquantization (int8, symmetric per-channel weights, per-tensor activations):\n",
            );
            for q in &self.quantization {
                let _ = writeln!(s, "- {q}");
            }
        }
        s
    }
}

/// The generated files.
#[derive(Clone, Debug)]
pub struct CProject {
    /// (file name, contents).
    pub files: Vec<(String, String)>,
    pub report: Report,
}

impl CProject {
    /// Writes every file into `dir` (created if missing).
    pub fn write_to(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::invalid(format!("codegen: cannot create {}: {e}", dir.display()))
        })?;
        for (name, text) in &self.files {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| {
                Error::invalid(format!("codegen: cannot write {}: {e}", path.display()))
            })?;
        }
        Ok(())
    }

    pub fn file(&self, name: &str) -> Option<&str> {
        self.files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.as_str())
    }
}

/// Generates C for `cell` run on inputs of `inputs`' types (the batch size included:
/// the code is specialised to these shapes).
pub fn generate<C: Cell + ?Sized>(
    cell: &C,
    inputs: &[TensorType],
    options: &Options,
) -> Result<CProject> {
    let frozen = freeze::freeze(cell, inputs)?;
    finish(frozen, options)
}

/// Generates C for a traced inference graph (a compiled evaluation graph).
pub fn generate_graph(graph: Graph, options: &Options) -> Result<CProject> {
    finish(freeze::freeze_graph(graph)?, options)
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "codegen: the name becomes a C prefix and must be letters, digits and '_' (not starting with a digit), got {name:?}"
        )))
    }
}

fn finish(frozen: freeze::Frozen, options: &Options) -> Result<CProject> {
    check_name(&options.name)?;
    let parameter_bytes = frozen
        .graph
        .params
        .iter()
        .map(|p| p.tensor_type().numel() * 4)
        .sum();
    let program = lower::lower(&frozen)?;
    for c in &program.consts {
        if let Some(v) = c.data.iter().find(|v| !v.is_finite()) {
            return Err(Error::invalid(format!(
                "codegen: weight {} ({}) holds {v}; only finite weights can be generated",
                c.name, c.origin
            )));
        }
    }
    let mut report = Report {
        kernels: program
            .scopes
            .iter()
            .zip(&program.steps)
            .map(|(s, k)| (s.clone(), k.kind()))
            .collect(),
        parameter_bytes,
        stack_bytes: program
            .steps
            .iter()
            .map(|s| match s {
                program::Step::Conv(c) => emit::conv::stack_bytes(c),
                program::Step::Dense(d) => 4 * d.n.min(32),
                _ => 0,
            })
            .max()
            .unwrap_or(0),
        ..Report::default()
    };
    let (model, weights, weights_h, workspace) = match &options.int8_calibration {
        None => {
            let (offsets, plan) = arena::plan_program(&program);
            report.workspace_bytes = plan.size;
            report.arena_lower_bound = plan.lower_bound;
            report.weight_bytes = program.weight_bytes();
            let api = api_of(&program, options, plan.size);
            let [m, w, h] = emit::float_sources(&program, &api, &offsets);
            (m, w, h, plan.size)
        }
        Some(samples) => {
            let q = quant::quantize(&program, &frozen, samples)?;
            let (offsets, plan) = q.plan();
            report.workspace_bytes = plan.size;
            report.arena_lower_bound = plan.lower_bound;
            report.weight_bytes = q.weight_bytes();
            report.quantization = q.describe();
            let api = api_of(&program, options, plan.size);
            let [m, w, h] = quant::emit::int8_sources(&q, &api, &offsets);
            (m, w, h, plan.size)
        }
    };
    let api = api_of(&program, options, workspace);
    let about = format!(
        "{} ({}), generated by spore codegen",
        options.name,
        if options.int8_calibration.is_some() {
            "int8"
        } else {
            "float32"
        }
    );
    let mut files = vec![
        ("model.h".to_string(), api.header(&about)),
        ("model.c".to_string(), model),
        ("weights.c".to_string(), weights),
        ("weights.h".to_string(), weights_h),
        ("benchmark.c".to_string(), files::benchmark_c(&api)),
        (
            "Makefile".to_string(),
            files::makefile(&api, options.target),
        ),
        (
            "CMakeLists.txt".to_string(),
            files::cmakelists(&api, options.target),
        ),
    ];
    if options.target == Target::CortexM {
        files.push(("firmware.c".to_string(), files::firmware_c(&api)));
        files.push(("cortex-m4.cmake".to_string(), files::cortex_m_toolchain()));
    }
    files.push(("REPORT.md".to_string(), report.to_text(&options.name)));
    Ok(CProject { files, report })
}

fn api_of(p: &Program, options: &Options, workspace: usize) -> Api {
    Api {
        prefix: options.name.clone(),
        workspace,
        inputs: p.inputs.iter().map(|&v| p.values[v].numel).collect(),
        outputs: p.outputs.iter().map(|&v| p.values[v].numel).collect(),
        io_type: "float",
    }
}
