//! The `contract-proxy` binary: parse the command line, run it, exit with its code.
#![forbid(unsafe_code)]

use clap::Parser;
use contract_proxy::cli::{Cli, Outcome, dispatch};

fn main() {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("contract-proxy: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let outcome = rt.block_on(dispatch(cli));
    // Stdin readers live on blocking threads that never end by themselves.
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    match outcome {
        Ok(Outcome::Code(c)) => std::process::exit(c),
        Ok(Outcome::Child(st)) => contract_transport::endpoint::process::exit_like(st),
        Err(e) => {
            eprintln!("contract-proxy: {e}");
            std::process::exit(e.exit_code());
        }
    }
}
