//! The `spore` command-line tool. Run `spore --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Arg, ArgMatches, Command};
use spore::cli::{EvalArgs, PredictArgs, TrainArgs, ZooModel, eval, predict, train};
use spore_core::context::Mode;
use spore_core::debug::dump::inspect as dump_tool;

fn model_arg() -> Arg {
    Arg::new("model")
        .long("model")
        .required(true)
        .help("network from the model zoo: lenet, mlp or resnet18")
}

fn cli() -> Command {
    Command::new("spore")
        .about("Spore: train, evaluate and debug networks from the command line")
        .after_help("Examples:\n  spore train --model lenet --mode graph --epochs 10 --batch-size 32 --sink-size 250 --checkpoint-dir ckpt\n  spore eval --model lenet --checkpoint ckpt/lenet-10_250.ckpt\n  spore predict --model lenet --checkpoint ckpt/lenet-10_250.ckpt digit.png\n  spore dump compare /tmp/dump_pynative /tmp/dump_graph")
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(
            Command::new("train")
                .about("Train a zoo model (the bundled MNIST digits unless --data is given) and save checkpoints")
                .arg(model_arg())
                .arg(Arg::new("mode").long("mode").default_value("graph").help("graph (one compiled graph per step) or pynative (op by op)"))
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
            Command::new("print-file")
                .about("Turn a file written by the Print operator (print_file_path) back into text")
                .arg(Arg::new("file").required(true)),
        )
}

fn text<'a>(m: &'a ArgMatches, name: &str) -> &'a str {
    m.get_one::<String>(name)
        .map(String::as_str)
        .unwrap_or_default()
}

fn number<T: std::str::FromStr>(m: &ArgMatches, name: &str, what: &str) -> Result<T, String> {
    let v = text(m, name);
    v.parse()
        .map_err(|_| format!("--{name} expects {what}, got {v:?}"))
}

fn path(m: &ArgMatches, name: &str) -> PathBuf {
    PathBuf::from(
        m.get_one::<String>(name)
            .map(String::as_str)
            .unwrap_or_default(),
    )
}

fn run(m: &ArgMatches) -> Result<String, String> {
    match m.subcommand() {
        Some(("dump", d)) => match d.subcommand() {
            Some(("list", a)) => dump_tool::list(&path(a, "dir")).map_err(|e| e.to_string()),
            Some(("stats", a)) => dump_tool::stats(
                &path(a, "dir"),
                a.get_one::<String>("graph").map(String::as_str),
                a.get_one::<String>("iteration").map(String::as_str),
            )
            .map_err(|e| e.to_string()),
            Some(("compare", a)) => {
                let tol_text = a
                    .get_one::<String>("tolerance")
                    .cloned()
                    .unwrap_or_default();
                let tol: f64 = tol_text.parse().map_err(|_| {
                    format!("--tolerance expects a number such as 1e-5, got {tol_text:?}")
                })?;
                let report = dump_tool::compare(&path(a, "first"), &path(a, "second"), tol)
                    .map_err(|e| e.to_string())?;
                Ok(report.to_string())
            }
            _ => Err("unknown dump command; see `spore dump --help`".into()),
        },
        Some(("train", a)) => {
            let args = TrainArgs {
                model: ZooModel::parse(text(a, "model")).map_err(|e| e.to_string())?,
                mode: Mode::parse(text(a, "mode")).map_err(|e| e.to_string())?,
                epochs: number(a, "epochs", "a positive integer")?,
                batch_size: number(a, "batch-size", "a positive integer")?,
                sink_size: match a.get_one::<String>("sink-size") {
                    Some(_) => Some(number(a, "sink-size", "-1 or a positive integer")?),
                    None => None,
                },
                checkpoint_dir: path(a, "checkpoint-dir"),
                data: a.get_one::<String>("data").map(PathBuf::from),
                learning_rate: number(a, "lr", "a number")?,
                momentum: number(a, "momentum", "a number")?,
                seed: number(a, "seed", "a non-negative integer")?,
            };
            train(&args).map_err(|e| e.to_string())
        }
        Some(("eval", a)) => {
            let args = EvalArgs {
                model: ZooModel::parse(text(a, "model")).map_err(|e| e.to_string())?,
                checkpoint: path(a, "checkpoint"),
                data: a.get_one::<String>("data").map(PathBuf::from),
                batch_size: number(a, "batch-size", "a positive integer")?,
            };
            eval(&args).map_err(|e| e.to_string())
        }
        Some(("predict", a)) => {
            let args = PredictArgs {
                model: ZooModel::parse(text(a, "model")).map_err(|e| e.to_string())?,
                checkpoint: path(a, "checkpoint"),
                images: a
                    .get_many::<String>("images")
                    .map(|v| v.map(PathBuf::from).collect())
                    .unwrap_or_default(),
            };
            predict(&args).map_err(|e| e.to_string())
        }
        Some(("print-file", a)) => {
            spore_core::debug::print::parse_print_text(path(a, "file")).map_err(|e| e.to_string())
        }
        _ => Err("unknown command; see `spore --help`".into()),
    }
}

fn main() -> ExitCode {
    let matches = cli().get_matches();
    match run(&matches) {
        Ok(text) => {
            println!("{}", text.trim_end());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
