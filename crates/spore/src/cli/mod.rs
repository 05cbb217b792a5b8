//! What the `spore` command does, as library functions (so it can be tested): train,
//! evaluate and predict with the model zoo.
//!
//! ```no_run
//! use spore::cli::{train, TrainArgs, ZooModel};
//! let args = TrainArgs { model: ZooModel::LeNet, ..TrainArgs::default() };
//! println!("{}", train(&args).unwrap());
//! ```

pub mod args;
mod codegen;
mod data;
mod explain;
mod onnx;
pub mod parallel;
mod run;

pub use args::Invocation;
pub use codegen::{CodegenArgs, codegen};
pub use explain::{ExplainArgs, explain};
pub use run::{EvalArgs, PredictArgs, TrainArgs, eval, predict, train};

use std::sync::Arc;

use spore_core::{Error, Result};
use spore_nn::cell::Cell;
use spore_nn::zoo::{LeNet5, Mlp, ResNet};

/// The networks the command line knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZooModel {
    /// LeNet5 (seed 001) on MNIST resized to 32x32.
    LeNet,
    /// Seed 004's 784-512-512-10 network on MNIST 28x28.
    Mlp,
    /// ResNet-18 (CIFAR-10 form) on CIFAR-10.
    ResNet18,
}

impl ZooModel {
    pub const NAMES: &'static str = "lenet, mlp, resnet18";

    pub fn parse(name: &str) -> Result<ZooModel> {
        match name.to_ascii_lowercase().as_str() {
            "lenet" | "lenet5" => Ok(ZooModel::LeNet),
            "mlp" | "network" => Ok(ZooModel::Mlp),
            "resnet18" | "resnet" | "resnet-18" => Ok(ZooModel::ResNet18),
            _ => Err(Error::invalid(format!(
                "unknown model {name:?}; choose one of {}",
                ZooModel::NAMES
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ZooModel::LeNet => "lenet",
            ZooModel::Mlp => "mlp",
            ZooModel::ResNet18 => "resnet18",
        }
    }

    pub fn build(self) -> Result<Arc<dyn Cell>> {
        Ok(match self {
            ZooModel::LeNet => LeNet5::new(10)?,
            ZooModel::Mlp => Mlp::new()?,
            ZooModel::ResNet18 => ResNet::resnet18(10)?,
        })
    }
}

/// Runs what the command line asked for; returns the text to print.
pub fn execute(invocation: &Invocation) -> Result<String> {
    use spore_core::debug::dump::inspect;
    match invocation {
        Invocation::Train(a) => train(a),
        Invocation::Eval(a) => eval(a),
        Invocation::Predict(a) => predict(a),
        Invocation::Codegen(a) => codegen(a),
        Invocation::Explain(a) => explain(a),
        Invocation::DumpList { dir } => inspect::list(dir),
        Invocation::DumpStats {
            dir,
            graph,
            iteration,
        } => inspect::stats(dir, graph.as_deref(), iteration.as_deref()),
        Invocation::DumpCompare {
            first,
            second,
            tolerance,
        } => Ok(inspect::compare(first, second, *tolerance)?.to_string()),
        Invocation::ParallelPlan(a) => parallel::plan(a),
        Invocation::PrintFile { file } => spore_core::debug::print::parse_print_text(file),
        Invocation::ConvertOnnx { model, out, name } => {
            let c = spore_onnx::convert::convert_file(model, out, name)?;
            Ok(format!(
                "{} nodes converted, {} not converted; wrote model.rs, model.ckpt and REPORT.md to {}\n",
                c.converted,
                c.not_converted.len(),
                out.display()
            ))
        }
        Invocation::RunOnnx {
            model,
            inputs,
            outputs,
            mode,
            repeat,
        } => onnx::run_onnx(model, inputs, outputs, *mode, *repeat),
    }
}
