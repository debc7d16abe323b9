//! `ridgeline stack list|show`.

use anyhow::Result;
use ridgeline_app::{catalog, inputs};
use ridgeline_model::catalog::DEFAULT_STACK;
use ridgeline_reports::Document;

use crate::cli::{FormatArg, StackShowArgs};
use crate::output;

pub(crate) fn list(args: &FormatArg) -> Result<()> {
    let rows = catalog::stack_listing()?;
    let cols = catalog::stack_listing_cols();
    output::print(args.format, &rows, |style| {
        Document::new(format!(
            "Software stacks (--stack NAME, or a stack file; the default is {DEFAULT_STACK})"
        ))
        .table(output::table(&rows, &cols, style))
    })
}

pub(crate) fn show(args: &StackShowArgs) -> Result<()> {
    let stack = inputs::stack(Some(&args.stack))?;
    let rows = catalog::stack_figures(&stack);
    let cols = catalog::figure_cols();
    output::print(args.format.format, &stack, |style| {
        Document::new(format!("Stack {}", stack.name))
            .summary("description", stack.description.clone())
            .table(output::table(&rows, &cols, style))
    })
}
