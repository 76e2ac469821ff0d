//! `kernel-peer`: Rust reference peers of the kernel contract, for testing the
//! conformance suite against real processes (proxy/tests/conformance.rs). Not part of
//! the product: the suite's users bring their own implementations.

#![forbid(unsafe_code)]

mod peer;

use clap::Parser;

/// A kernel core or shell on the wire layer.
#[derive(Debug, Parser)]
#[command(name = "kernel-peer", version)]
struct Cli {
    /// Which peer.
    #[command(subcommand)]
    which: peer::PeerCmd,
}

fn main() {
    let cli = Cli::parse();
    let code = match tokio::runtime::Runtime::new() {
        Ok(rt) => match rt.block_on(peer::run(cli.which)) {
            Ok(code) => code,
            Err(peer::PeerError::Usage(e)) => {
                eprintln!("kernel-peer: {e}");
                2
            }
            Err(peer::PeerError::Failed(e)) => {
                eprintln!("kernel-peer: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("kernel-peer: cannot start the runtime: {e}");
            1
        }
    };
    std::process::exit(code);
}
