//! `spore-fuzz`: long fuzzing runs and replays of saved failures.
//!
//! ```text
//! cargo run --release -p spore-fuzz -- [TARGET...] [--inputs N] [--seconds S] [--seed X]
//! cargo run --release -p spore-fuzz -- --replay target/fuzz-failures/npy-panic-....bin
//! cargo run --release -p spore-fuzz -- --list
//! ```
//! Without targets, every target runs in turn, each for the given budget (default 100,000
//! inputs). Failing inputs are saved under `target/fuzz-failures/`. Exit status 1 when
//! anything failed.

use std::process::ExitCode;
use std::time::Duration;

use spore_fuzz::runner::{Budget, check_one, fuzz};
use spore_fuzz::targets;

#[global_allocator]
static ALLOC: spore_fuzz::guard::TrackingAllocator = spore_fuzz::guard::TrackingAllocator;

fn value<T: std::str::FromStr>(args: &[String], flag: &str) -> Result<Option<T>, String> {
    match args.iter().position(|a| a == flag) {
        None => Ok(None),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("{flag} expects a number")),
    }
}

fn run(args: &[String]) -> Result<bool, String> {
    if args.iter().any(|a| a == "--list") {
        for t in targets::all() {
            println!("{:<12} {}", t.name, t.reads);
        }
        return Ok(true);
    }
    let mut budget = Budget::inputs(value(args, "--inputs")?.unwrap_or(100_000));
    if let Some(s) = value::<f64>(args, "--seconds")? {
        budget.max_time = Some(Duration::from_secs_f64(s.max(0.0)));
        budget.max_inputs = value(args, "--inputs")?.unwrap_or(u64::MAX);
    }
    let seed: u64 = value(args, "--seed")?.unwrap_or(1);
    if let Some(i) = args.iter().position(|a| a == "--replay") {
        let file = args.get(i + 1).ok_or("--replay expects a file")?;
        let input = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
        let name = std::path::Path::new(file)
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('-').next())
            .unwrap_or_default();
        let target =
            targets::by_name(name).ok_or_else(|| format!("{file}: no target named {name:?}"))?;
        let (failure, accepted) = check_one(&target, &input, &budget.failures_dir);
        match failure {
            Some(f) => println!("{}: {}", f.kind, f.message),
            None => println!(
                "no failure ({})",
                if accepted { "accepted" } else { "rejected" }
            ),
        }
        return Ok(true);
    }
    let flags_with_values = ["--inputs", "--seconds", "--seed"];
    let names: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            !a.starts_with("--") && (*i == 0 || !flags_with_values.contains(&args[i - 1].as_str()))
        })
        .map(|(_, a)| a)
        .collect();
    let selected: Vec<targets::Target> = if names.is_empty() {
        targets::all()
    } else {
        names
            .iter()
            .map(|n| targets::by_name(n).ok_or_else(|| format!("unknown target {n:?}; see --list")))
            .collect::<Result<_, _>>()?
    };
    let mut clean = true;
    for target in &selected {
        let report = fuzz(target, &budget, seed);
        println!("{report}");
        clean &= report.failures.is_empty();
    }
    Ok(clean)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
