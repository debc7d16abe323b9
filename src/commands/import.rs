//! `ridgeline import neusight`: public kernel measurements into a kernel set.

use anyhow::Result;
use ridgeline_app::import;
use ridgeline_reports::Document;

use crate::cli::ImportNeusightArgs;
use crate::output;

pub(crate) fn neusight(args: &ImportNeusightArgs) -> Result<()> {
    let done = import::neusight(&args.dir, args.commit.as_deref(), &args.out)?;
    output::print(args.format.format, &done, |_| {
        let mut d = Document::new("NeuSight kernels imported")
            .summary("written", done.out.clone())
            .summary("commit", done.commit.clone());
        for (family, device, n) in &done.counts {
            let what = match family.as_str() {
                "labels" => "operators of training steps (validation only)",
                "steps" => "training steps (validation only)",
                _ => "kernels",
            };
            d = d.summary(format!("{family} on {device}"), format!("{n} {what}"));
        }
        d.note("FP32, PyTorch 2.1, cuDNN 8.9; MIT licence; provenance in SOURCE.toml")
    })
}
