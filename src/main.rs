//! The `kiln` binary: parse the command line and dispatch; everything else lives in the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = kiln::cli::parse_args(std::env::args_os());
    match kiln::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
