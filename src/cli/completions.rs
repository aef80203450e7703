//! `kiln completions SHELL`: a completion script for the shell, printed to stdout
//! (`kiln completions bash > ~/.local/share/bash-completion/completions/kiln`).

use std::process::ExitCode;

use anyhow::Result;
use clap::CommandFactory;
use clap_complete::Shell;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: CompletionsArgs) -> Result<ExitCode> {
    let mut cmd = super::Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "kiln", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
