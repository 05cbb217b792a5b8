//! The `spore` command-line tool. Run `spore --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Arg, ArgMatches, Command};
use spore_core::debug::dump::inspect as dump_tool;

fn cli() -> Command {
    Command::new("spore")
        .about("Spore: train, evaluate and debug networks from the command line")
        .subcommand_required(true)
        .arg_required_else_help(true)
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
