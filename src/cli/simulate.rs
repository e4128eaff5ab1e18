//! `sendguard simulate`: generated traffic through every algorithm, next to an exact window.

use clap::Args;
use sendguard::limiter::simulate;

use super::Format;

#[derive(Args)]
pub struct SimulateArgs {
    /// Requests allowed per window.
    #[arg(long, default_value_t = 100)]
    limit: u64,
    /// Window length in seconds.
    #[arg(long, default_value_t = 3600)]
    window: u64,
    /// How many windows each trace lasts.
    #[arg(long, default_value_t = 6)]
    windows: u64,
    /// Seed of the random traces.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

pub fn run(args: &SimulateArgs) {
    let cfg = simulate::SimConfig {
        limit: args.limit,
        window_secs: args.window,
        windows: args.windows,
        seed: args.seed,
    };
    let rows = simulate::run(&cfg);
    match args.format {
        Format::Csv => print!("{}", simulate::to_csv(&rows)),
        Format::Table => {
            print!("{}", simulate::to_text(&rows));
            println!("\nWhich default rule catches each sender, after how many invites:\n");
            print!("{}", sendguard::rules::simulate::to_text());
            println!("\nMany accounts, one payload: after how many senders each rule acts:\n");
            print!("{}", sendguard::rules::simulate::campaign::to_text());
        }
    }
}
