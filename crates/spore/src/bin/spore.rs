//! The `spore` command-line tool. Run `spore --help`.

use std::process::ExitCode;

use spore::cli::{args, execute};

fn main() -> ExitCode {
    // The command is an application, so it may tune the process's allocator for eager
    // mode (a library embedding Spore leaves that to its host); `SPORE_MALLOC_TUNING=0`
    // turns it off.
    spore::kernels::arena::set_malloc_tuning(
        std::env::var("SPORE_MALLOC_TUNING").as_deref() != Ok("0"),
    );
    let invocation = match args::parse(std::env::args_os()) {
        Ok(i) => i,
        // Help and version requests exit 0, mistakes 2, each printed as clap prints them.
        Err(e) => e.exit(),
    };
    match execute(&invocation) {
        Ok(text) => {
            // Under mpirun only rank 0 reports; the other ranks return nothing.
            if !text.is_empty() {
                println!("{}", text.trim_end());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
