//! `ridgeline manual`: the command line's reference, generated from its clap definitions (man
//! pages by clap_mangen, one Markdown page by clap-markdown). `docs/reference/` is this
//! command's output, and a test checks that it is current.

use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::{Cli, ManualArgs};

/// Writes `cli.md` and `man1/` under `--out`.
pub(crate) fn run(args: &ManualArgs) -> Result<()> {
    let man = args.out.join("man1");
    std::fs::create_dir_all(&man).with_context(|| {
        format!(
            "cannot create {}: choose a --out directory you can write",
            man.display()
        )
    })?;
    let command = Cli::command();
    clap_mangen::generate_to(command.clone(), &man)
        .with_context(|| format!("cannot write the man pages under {}", man.display()))?;
    let markdown = clap_markdown::help_markdown_command_custom(
        &command,
        &clap_markdown::MarkdownOptions::new()
            .title("Command-line reference".to_owned())
            .show_footer(false),
    );
    write(&args.out.join("cli.md"), &markdown)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| {
        format!(
            "cannot write {}: choose a --out directory you can write",
            path.display()
        )
    })
}
