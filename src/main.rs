//! The `kiln` binary: parse the command line and dispatch; everything else lives in the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = kiln::cli::parse_args(std::env::args_os());
    match kiln::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", kiln::cli::error_message(&e));
            kiln::cli::exit_code_for(&e)
        }
    }
}
