//! The `contract-proxy` binary. SKELETON: only `contracts` works yet (issue 6 adds `run`).
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "contract-proxy",
    version,
    about = "Contract-aware inspecting proxy (skeleton: relaying is not implemented yet)"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List the built-in contracts and check that each loads.
    Contracts,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Contracts => {
            for (name, _) in contract::BUILTIN {
                let c = contract_proxy::contract_for(name)?;
                println!("{name}\t{}\t{} methods", c.title, c.methods.len());
            }
        }
    }
    Ok(())
}
