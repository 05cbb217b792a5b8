//! The `spore` command's arguments: parsed and validated into an [`Invocation`] before
//! anything runs, so that every mistake is a message and no argument can make it panic
//! (a fuzz target feeds this parser arbitrary argument lists).
//!
//! ```
//! use spore::cli::args::{Invocation, parse};
//! let inv = parse(["spore", "eval", "--model", "lenet", "--checkpoint", "a.ckpt"]).unwrap();
//! assert!(matches!(inv, Invocation::Eval(a) if a.batch_size == 32));
//! let err = parse(["spore", "train", "--model", "lenet", "--epochs", "0"]).unwrap_err();
//! assert!(err.to_string().contains("--epochs expects a positive integer, got \"0\""));
//! ```

use std::ffi::OsString;
use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{Arg, ArgMatches, Command};
use spore_core::context::Mode;

use super::{CodegenArgs, EvalArgs, ExplainArgs, PredictArgs, TrainArgs, ZooModel};

/// What the command line asks for.
#[derive(Clone, Debug)]
pub enum Invocation {
    Train(TrainArgs),
    Eval(EvalArgs),
    Predict(PredictArgs),
    Codegen(CodegenArgs),
    Explain(ExplainArgs),
    DumpList {
        dir: PathBuf,
    },
    DumpStats {
        dir: PathBuf,
        graph: Option<String>,
        iteration: Option<String>,
    },
    DumpCompare {
        first: PathBuf,
        second: PathBuf,
        tolerance: f64,
    },
    PrintFile {
        file: PathBuf,
    },
    /// `spore convert model.onnx --out DIR [--name Type]`.
    ConvertOnnx {
        model: PathBuf,
        out: PathBuf,
        name: String,
    },
    /// `spore parallel plan --model bert [--devices 8,64,512,4096] ...`.
    ParallelPlan(super::parallel::PlanArgs),
    /// `spore run model.onnx --input x.npy ... [--mode] [--output y.npy ...]`.
    RunOnnx {
        model: PathBuf,
        inputs: Vec<PathBuf>,
        outputs: Vec<PathBuf>,
        mode: Mode,
        repeat: usize,
    },
}

fn model_arg() -> Arg {
    Arg::new("model")
        .long("model")
        .required(true)
        .help("network from the model zoo: lenet, mlp or resnet18")
}

/// The command's definition (subcommands, flags, help texts).
pub fn command() -> Command {
    Command::new("spore")
        .about("Spore: train, evaluate and debug networks from the command line")
        .after_help("Examples:\n  spore train --model lenet --mode graph --epochs 10 --batch-size 32 --sink-size 250 --checkpoint-dir ckpt\n  spore eval --model lenet --checkpoint ckpt/lenet-10_250.ckpt\n  spore predict --model lenet --checkpoint ckpt/lenet-10_250.ckpt digit.png\n  spore dump compare /tmp/dump_pynative /tmp/dump_graph")
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(
            Command::new("train")
                .about("Train a zoo model (the bundled MNIST digits unless --data is given) and save checkpoints")
                .arg(model_arg())
                .arg(Arg::new("mode").long("mode").default_value("graph").help("graph (one compiled graph per step) or pynative (op by op, the optimizer update compiled)"))
                .arg(Arg::new("epochs").long("epochs").default_value("10"))
                .arg(Arg::new("batch-size").long("batch-size").default_value("32"))
                .arg(Arg::new("sink-size").long("sink-size").help("data sink mode: steps per epoch, or -1 for the whole dataset; without it, no sinking"))
                .arg(Arg::new("checkpoint-dir").long("checkpoint-dir").default_value("checkpoints").help("folder for {model}-{epoch}_{step}.ckpt files"))
                .arg(Arg::new("data").long("data").help("MNIST folder (IDX files, raw or .gz, directly or in train/ and test/), or CIFAR-10 binary folder for resnet18"))
                .arg(Arg::new("lr").long("lr").default_value("0.01").help("Momentum learning rate"))
                .arg(Arg::new("momentum").long("momentum").default_value("0.9"))
                .arg(Arg::new("seed").long("seed").default_value("1")),
        )
        .subcommand(
            Command::new("eval")
                .about("Evaluate a checkpoint: prints the accuracy on test data")
                .arg(model_arg())
                .arg(Arg::new("checkpoint").long("checkpoint").required(true).help("a .ckpt file written by spore train"))
                .arg(Arg::new("data").long("data").help("folder holding MNIST t10k IDX test files (default: the bundled test digits)"))
                .arg(Arg::new("batch-size").long("batch-size").default_value("32")),
        )
        .subcommand(
            Command::new("predict")
                .about("Classify PNG/JPEG images with a checkpoint")
                .arg(model_arg())
                .arg(Arg::new("checkpoint").long("checkpoint").required(true))
                .arg(Arg::new("images").required(true).num_args(1..).help("image files")),
        )
        .subcommand(
            Command::new("codegen")
                .about("Generate self-contained C99 for inference (no runtime, memory planned offline)")
                .arg(model_arg())
                .arg(Arg::new("checkpoint").long("checkpoint").required(true).help("a .ckpt file written by spore train"))
                .arg(Arg::new("target").long("target").default_value("x86").help("x86 (the host's cc) or cortex-m (arm-none-eabi-gcc -mcpu=cortex-m4)"))
                .arg(Arg::new("int8").long("int8").action(clap::ArgAction::SetTrue).help("int8 kernels, quantized from --calibration data"))
                .arg(Arg::new("calibration").long("calibration").help("with --int8: the training data folder to calibrate on (as spore train's --data)"))
                .arg(Arg::new("calibration-samples").long("calibration-samples").default_value("200").help("how many training samples to calibrate on"))
                .arg(Arg::new("out").long("out").required(true).help("folder for the generated project")),
        )
        .subcommand(
            Command::new("explain")
                .about("Explain a model's predictions on images: saliency maps, benchmarks, an HTML page")
                .arg(model_arg())
                .arg(Arg::new("checkpoint").long("checkpoint").required(true).help("a .ckpt file written by spore train"))
                .arg(Arg::new("images").long("images").required(true).help("folder of .png/.jpg images"))
                .arg(Arg::new("methods").long("methods").help("comma-separated explainers (default: every one the model supports)"))
                .arg(Arg::new("benchmarks").long("benchmarks").default_value(super::explain::BENCHMARKS).help("comma-separated benchmarks"))
                .arg(Arg::new("out").long("out").required(true).help("folder for the maps, scores and index.html")),
        )
        .subcommand(
            Command::new("dump")
                .about("Inspect dumps written by the Dump tool (SPORE_DUMP_CONFIG / MINDSPORE_DUMP_CONFIG)")
                .subcommand_required(true)
                .subcommand(Command::new("list").about("List graphs and iterations in a dump").arg(Arg::new("dir").required(true).help("the dump's `path` (or a rank_N folder)")))
                .subcommand(
                    Command::new("stats")
                        .about("Print max/min/L2 norm and NaN/Inf counts of every dumped tensor (CSV)")
                        .arg(Arg::new("dir").required(true))
                        .arg(Arg::new("graph").long("graph").help("only this graph id"))
                        .arg(Arg::new("iteration").long("iteration").help("only this iteration")),
                )
                .subcommand(
                    Command::new("compare")
                        .about("Compare two dumps (e.g. PyNative vs Graph) and report the first op whose outputs differ")
                        .arg(Arg::new("first").required(true))
                        .arg(Arg::new("second").required(true))
                        .arg(Arg::new("tolerance").long("tolerance").default_value("1e-5").help("relative tolerance per element")),
                ),
        )
        .subcommand(
            Command::new("convert")
                .about("Convert an ONNX model: a checkpoint, the Rust source of an equivalent Cell, and a report")
                .arg(Arg::new("model").required(true).help("an .onnx file"))
                .arg(Arg::new("out").long("out").required(true).help("folder for model.rs, model.ckpt and REPORT.md"))
                .arg(Arg::new("name").long("name").default_value("ConvertedNet").help("the Rust type's name")),
        )
        .subcommand(
            Command::new("run")
                .about("Run an ONNX model on .npy inputs (one per graph input, in order); prints the time per run")
                .arg(Arg::new("model").required(true).help("an .onnx file"))
                .arg(Arg::new("input").long("input").required(true).action(clap::ArgAction::Append).help("a .npy file per graph input"))
                .arg(Arg::new("output").long("output").action(clap::ArgAction::Append).help("where to save each output (.npy)"))
                .arg(Arg::new("mode").long("mode").default_value("graph").help("graph or pynative"))
                .arg(Arg::new("repeat").long("repeat").default_value("10").help("timed runs after one warm-up")),
        )
        .subcommand(
            Command::new("parallel")
                .about("Distributed training tools")
                .subcommand_required(true)
                .subcommand(
                    Command::new("plan")
                        .about("Search strategies for a zoo model on a described cluster; print each op's strategy, the step time and memory per device")
                        .arg(Arg::new("model").long("model").required(true).help(super::parallel::MODELS))
                        .arg(Arg::new("devices").long("devices").default_value("8,64,512,4096").help("comma-separated device counts"))
                        .arg(Arg::new("batch-per-device").long("batch-per-device").default_value("8"))
                        .arg(Arg::new("search-mode").long("search-mode").default_value("recursive_programming").help("recursive_programming, dynamic_programming (exact, slow on large graphs) or sharding_propagation"))
                        .arg(Arg::new("flops").long("flops").default_value("1e12").help("FLOP/s of products per device"))
                        .arg(Arg::new("memory-gb").long("memory-gb").default_value("64").help("memory per device"))
                        .arg(Arg::new("memory-bandwidth-gbs").long("memory-bandwidth-gbs").default_value("100").help("GB/s of memory per device"))
                        .arg(Arg::new("latency-us").long("latency-us").default_value("5").help("link latency (alpha)"))
                        .arg(Arg::new("bandwidth-gbps").long("bandwidth-gbps").default_value("25").help("link bandwidth in Gbit/s"))
                        .arg(Arg::new("optimizer").long("optimizer").default_value("momentum").help("momentum or adam (optimizer state per parameter)"))
                        .arg(Arg::new("full-batch").long("full-batch").action(clap::ArgAction::SetTrue).help("every device is given the whole batch (MindSpore's full_batch); by default each is given its block of it")),
                ),
        )
        .subcommand(
            Command::new("print-file")
                .about("Turn a file written by the Print operator (print_file_path) back into text")
                .arg(Arg::new("file").required(true)),
        )
}

/// Parses and validates `args` (the program name first). Help requests and every
/// mistake come back as clap's errors: `Error::exit` prints them as clap does.
pub fn parse<I, T>(args: I) -> Result<Invocation, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut cmd = command();
    let matches = cmd.try_get_matches_from_mut(args)?;
    invocation(&matches).map_err(|message| cmd.error(ErrorKind::InvalidValue, message))
}

fn text<'a>(m: &'a ArgMatches, name: &str) -> &'a str {
    m.get_one::<String>(name)
        .map(String::as_str)
        .unwrap_or_default()
}

fn optional(m: &ArgMatches, name: &str) -> Option<String> {
    m.get_one::<String>(name).cloned()
}

fn path(m: &ArgMatches, name: &str) -> PathBuf {
    PathBuf::from(text(m, name))
}

/// `--name`'s value parsed as `T` and accepted by `valid`; else a message saying what
/// was expected and what was given.
fn number<T: std::str::FromStr>(
    m: &ArgMatches,
    name: &str,
    what: &str,
    valid: impl Fn(&T) -> bool,
) -> Result<T, String> {
    let v = text(m, name);
    v.parse()
        .ok()
        .filter(|n| valid(n))
        .ok_or_else(|| format!("--{name} expects {what}, got {v:?}"))
}

fn positive(n: &usize) -> bool {
    *n > 0
}

fn finite(x: &f64) -> bool {
    x.is_finite()
}

/// `--model`'s zoo network.
fn model(a: &ArgMatches) -> Result<ZooModel, String> {
    ZooModel::parse(text(a, "model")).map_err(|e| e.to_string())
}

fn invocation(m: &ArgMatches) -> Result<Invocation, String> {
    Ok(match m.subcommand() {
        Some(("train", a)) => Invocation::Train(TrainArgs {
            model: model(a)?,
            mode: Mode::parse(text(a, "mode")).map_err(|e| e.to_string())?,
            epochs: number(a, "epochs", "a positive integer", positive)?,
            batch_size: number(a, "batch-size", "a positive integer", positive)?,
            sink_size: match a.get_one::<String>("sink-size") {
                Some(_) => Some(number(
                    a,
                    "sink-size",
                    "-1 or a positive integer",
                    |n: &i64| *n == -1 || *n > 0,
                )?),
                None => None,
            },
            checkpoint_dir: path(a, "checkpoint-dir"),
            data: optional(a, "data").map(PathBuf::from),
            learning_rate: number(a, "lr", "a finite number", finite)?,
            momentum: number(a, "momentum", "a finite number", finite)?,
            seed: number(a, "seed", "a non-negative integer", |_: &u64| true)?,
        }),
        Some(("eval", a)) => Invocation::Eval(EvalArgs {
            model: model(a)?,
            checkpoint: path(a, "checkpoint"),
            data: optional(a, "data").map(PathBuf::from),
            batch_size: number(a, "batch-size", "a positive integer", positive)?,
        }),
        Some(("predict", a)) => Invocation::Predict(PredictArgs {
            model: model(a)?,
            checkpoint: path(a, "checkpoint"),
            images: a
                .get_many::<String>("images")
                .map(|v| v.map(PathBuf::from).collect())
                .unwrap_or_default(),
        }),
        Some(("codegen", a)) => codegen_invocation(a)?,
        Some(("explain", a)) => explain_invocation(a)?,
        Some(("dump", d)) => match d.subcommand() {
            Some(("list", a)) => Invocation::DumpList {
                dir: path(a, "dir"),
            },
            Some(("stats", a)) => Invocation::DumpStats {
                dir: path(a, "dir"),
                graph: optional(a, "graph"),
                iteration: optional(a, "iteration"),
            },
            Some(("compare", a)) => Invocation::DumpCompare {
                first: path(a, "first"),
                second: path(a, "second"),
                tolerance: number(
                    a,
                    "tolerance",
                    "a non-negative number such as 1e-5",
                    |t: &f64| t.is_finite() && *t >= 0.0,
                )?,
            },
            _ => return Err("unknown dump command; see `spore dump --help`".into()),
        },
        Some(("parallel", p)) => match p.subcommand() {
            Some(("plan", a)) => plan_invocation(a)?,
            _ => return Err("unknown parallel command; see `spore parallel --help`".into()),
        },
        Some(("print-file", a)) => Invocation::PrintFile {
            file: path(a, "file"),
        },
        Some(("convert", a)) => Invocation::ConvertOnnx {
            model: path(a, "model"),
            out: path(a, "out"),
            name: text(a, "name").to_string(),
        },
        Some(("run", a)) => {
            let many = |name: &str| -> Vec<PathBuf> {
                a.get_many::<String>(name)
                    .map(|v| v.map(PathBuf::from).collect())
                    .unwrap_or_default()
            };
            Invocation::RunOnnx {
                model: path(a, "model"),
                inputs: many("input"),
                outputs: many("output"),
                mode: Mode::parse(text(a, "mode")).map_err(|e| e.to_string())?,
                repeat: number(a, "repeat", "a positive integer", positive)?,
            }
        }
        _ => return Err("unknown command; see `spore --help`".into()),
    })
}

fn codegen_invocation(a: &ArgMatches) -> Result<Invocation, String> {
    let int8 = a.get_flag("int8");
    let calibration = optional(a, "calibration").map(PathBuf::from);
    if int8 && calibration.is_none() {
        return Err(
            "--int8 needs --calibration DIR (training data to measure activation ranges on)".into(),
        );
    }
    if !int8 && calibration.is_some() {
        return Err("--calibration is only used with --int8".into());
    }
    let target = text(a, "target");
    if !["x86", "cortex-m"].contains(&target) {
        return Err(format!("--target expects x86 or cortex-m, got {target:?}"));
    }
    Ok(Invocation::Codegen(CodegenArgs {
        model: model(a)?,
        checkpoint: path(a, "checkpoint"),
        target: target.to_string(),
        int8,
        calibration,
        calibration_samples: number(a, "calibration-samples", "a positive integer", positive)?,
        out: path(a, "out"),
    }))
}

fn explain_invocation(a: &ArgMatches) -> Result<Invocation, String> {
    let list = |name: &str| -> Vec<String> {
        text(a, name)
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let methods = list("methods");
    if methods.is_empty() && a.contains_id("methods") {
        return Err(format!(
            "--methods expects at least one of {}",
            super::explain::METHODS
        ));
    }
    Ok(Invocation::Explain(ExplainArgs {
        model: model(a)?,
        checkpoint: path(a, "checkpoint"),
        images: path(a, "images"),
        methods,
        benchmarks: list("benchmarks"),
        out: path(a, "out"),
    }))
}

fn plan_invocation(a: &ArgMatches) -> Result<Invocation, String> {
    use spore_parallel::sharding::{Cluster, SearchMode};
    let devices: Vec<usize> = text(a, "devices")
        .split(',')
        .map(|d| d.trim().parse().ok().filter(|n| (1..=4096).contains(n)))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            format!(
                "--devices expects comma-separated counts in [1, 4096], got {:?}",
                text(a, "devices")
            )
        })?;
    let rate = |name: &str| {
        number(a, name, "a positive number", |x: &f64| {
            x.is_finite() && *x > 0.0
        })
    };
    let optimizer_factor = match text(a, "optimizer") {
        "momentum" => 1.0,
        "adam" | "adamw" => 2.0,
        other => {
            return Err(format!(
                "--optimizer expects momentum or adam, got {other:?}"
            ));
        }
    };
    Ok(Invocation::ParallelPlan(super::parallel::PlanArgs {
        model: text(a, "model").to_ascii_lowercase(),
        devices,
        batch_per_device: number(
            a,
            "batch-per-device",
            "a positive integer of at most 1048576",
            |n: &usize| (1..=1 << 20).contains(n),
        )?,
        search_mode: SearchMode::parse(text(a, "search-mode")).map_err(|e| e.to_string())?,
        cluster: Cluster {
            devices: 1,
            flops: rate("flops")?,
            memory_bandwidth: rate("memory-bandwidth-gbs")? * 1e9,
            memory: rate("memory-gb")? * 1e9,
            latency: rate("latency-us")? * 1e-6,
            bandwidth: rate("bandwidth-gbps")? * 1e9 / 8.0,
        },
        optimizer_factor,
        full_batch: a.get_flag("full-batch"),
    }))
}
