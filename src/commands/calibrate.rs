//! `ridgeline calibrate`.

use anyhow::Result;
use ridgeline_app::calibration;
use ridgeline_app::views::calibrate as views;

use crate::cli::CalibrateArgs;
use crate::output::{self, Progress};

pub(crate) fn run(args: &CalibrateArgs) -> Result<()> {
    let c = calibration::calibrate(
        &args.records,
        &args.system,
        args.threads.map(|t| t as usize),
        args.comm_level.choice(),
        &args.out,
        &Progress::new(),
    )?;
    output::say(&format!("wrote {}", args.out.display()));
    output::print(args.format.format, &c.profile, |style| {
        views::calibration(&c, style)
    })
}
