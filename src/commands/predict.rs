//! `ridgeline predict`.

use anyhow::Result;
use ridgeline_app::predict;

use crate::cli::PredictArgs;
use crate::output::{self, Progress};

pub(crate) fn run(args: &PredictArgs) -> Result<()> {
    let view = predict::predict(&args.request(), &Progress::new())?;
    output::print(args.output.format.format, &view, |style| {
        view.document(style)
    })?;
    output::plots(&args.output.plot, || Ok(view.figures()))
}
