//! The `sendguard` command line: parses arguments and calls into the library (one file per
//! subcommand under `cli/`).

mod cli;

use std::process::ExitCode;

use clap::Parser;

/// A faster allocator than glibc's for the many small, short-lived allocations of a request.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match cli::Cli::parse().run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sendguard: {e}");
            ExitCode::FAILURE
        }
    }
}
