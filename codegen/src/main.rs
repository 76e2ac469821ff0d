//! The `contractgen` binary: parse arguments, run, exit with the library's code.
#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    let cli = match contractgen::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                contractgen::EXIT_USAGE
            } else {
                contractgen::EXIT_OK
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let code = contractgen::run(
        &cli,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}
