//! `ridgeline validate`: predictions against measured training steps, and the self-check
//! that runs the whole loop on this machine.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use ridgeline_app::inputs;
use ridgeline_app::tables;
use ridgeline_calibrate::comm::{CommPoint, validate_comm};
use ridgeline_calibrate::profile::{self, Options, RecordFile};
use ridgeline_calibrate::validate::{self, LayerPoint, StepPoint, Summary, Validation};
use ridgeline_measure::Case;
use ridgeline_model::precision::Precision;
use ridgeline_model::published::{Figure, LayerCheck, check_layers, table2};
use ridgeline_model::units::{Bytes, Seconds};
use ridgeline_model::workloads::{self, BuildOptions};
use ridgeline_reports::{Document, ImageFormat};
use serde::Serialize;

use super::measure::{self, Backends};
use crate::cli::{
    Format, FormatArg, MeasureArgs, MeasureSuiteArgs, ProtocolArgs, ThreadCount, ValidateArgs,
    ValidateCommArgs, ValidateCommand,
};
use crate::output::{self, Col, Style, num, text};

/// The self-check's workloads: the three reference workloads at three batch sizes each,
/// with inputs reduced so that a step takes about a second on a 2-core machine (CosmoFlow at
/// 64^3 of 128^3, DeepCAM at 96x144 of 768x1152, ResNet-50 at its full 224x224).
pub(crate) const SELF_CHECK_RUNS: [(&str, &[usize], [usize; 3]); 3] = [
    ("cosmoflow", &[64], [1, 2, 4]),
    ("deepcam", &[96, 144], [1, 2, 4]),
    ("resnet50", &[224], [1, 2, 4]),
];

/// Measured steps per workload run (before and after the suite each), after the executor's
/// warm-up step: ten, so that the median of the pooled twenty rides out a shared machine's
/// slow spells.
pub(crate) const SELF_CHECK_STEPS: usize = 10;

/// Share of the self-check's budget the micro-kernel suite gets; the workloads take the rest.
pub(crate) const SUITE_SHARE: f64 = 0.8;

/// What `--format json` prints.
#[derive(Serialize)]
struct Report<'a> {
    system: &'a str,
    steps: &'a [StepPoint],
    summary: &'a Summary,
    worst_layers: &'a [LayerPoint],
    #[serde(skip_serializing_if = "Option::is_none")]
    artifacts: Option<&'a Path>,
}

pub(crate) fn run(args: &ValidateArgs) -> Result<()> {
    match &args.what {
        Some(ValidateCommand::Comm(a)) => return comm(a),
        Some(ValidateCommand::Published(f)) => return published(f.format),
        None => {}
    }
    if args.self_check {
        return self_check(args);
    }
    let (Some(profile), Some(measured)) = (&args.profile, &args.measured) else {
        bail!("give --profile FILE and --measured FILE, or --self-check");
    };
    print(&validation(profile, measured)?, args, None)
}

/// The validation of the steps in `measured` against the calibrated `profile`.
pub(crate) fn validation(profile: &Path, measured: &Path) -> Result<Validation> {
    let system = inputs::system(&profile.display().to_string())?;
    if system.calibration.is_none() {
        bail!(
            "{}: not a calibrated profile (no [provenance]); make one with `ridgeline calibrate`",
            profile.display()
        );
    }
    let records = output::records(measured)?;
    Ok(validate::validate(
        &system,
        &records,
        &measured.display().to_string(),
    )?)
}

/// `ridgeline validate comm`: the collective model against measured allreduce.
fn comm(args: &ValidateCommArgs) -> Result<()> {
    let path = args.profile.display().to_string();
    let system = inputs::system(&path)?;
    let Some(profile) = system.calibration.as_deref() else {
        bail!(
            "{path}: not a calibrated profile (no [provenance]); make one with `ridgeline calibrate`"
        );
    };
    if profile.comm.is_empty() {
        bail!(
            "{path}: the profile has no communication levels; calibrate it from ping-pong \
             records (`mpirun -np 2 ridgeline measure comm pingpong --out FILE`)"
        );
    }
    let records = output::records(&args.measured)?;
    let v = validate_comm(
        profile,
        &records,
        &args.measured.display().to_string(),
        args.level.choice(),
    )?;
    if args.format.format == Format::Json {
        return output::emit(&format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let cols: [Col<CommPoint>; 6] = [
        text("algorithm", "algorithm", |p, _| p.algorithm.clone()),
        num("ranks", "ranks", |p, s| s.count(u64::from(p.ranks))),
        num("bytes", "bytes", |p, s| s.bytes(Bytes::new(p.bytes as f64))),
        num("predicted", "predicted_s", |p, s| {
            s.seconds(Seconds::new(p.predicted_s))
        }),
        num("measured", "measured_s", |p, s| {
            s.seconds(Seconds::new(p.measured_s))
        }),
        num("error", "rel_error", |p, s| {
            tables::signed_percent(p.rel_error, s)
        }),
    ];
    output::print(args.format.format, &v.points, |style| {
        let pct = |x: f64| format!("{:.1}%", 100.0 * x);
        let mut d = Document::new("Allreduce: predicted from LogGP vs measured")
            .summary("profile", path.clone())
            .summary("measured", args.measured.display().to_string())
            .summary(
                "all",
                format!(
                    "geometric mean |error| {}, median {}, max {}, bias {:+.1}% over {} points",
                    pct(v.summary.geomean_abs_rel_error),
                    pct(v.summary.median_abs_rel_error),
                    pct(v.summary.max_abs_rel_error),
                    100.0 * v.summary.bias,
                    v.summary.points
                ),
            );
        for a in &v.algorithms {
            d = d.summary(
                a.algorithm.clone(),
                format!(
                    "geometric mean |error| {}, max {} over {} points",
                    pct(a.summary.geomean_abs_rel_error),
                    pct(a.summary.max_abs_rel_error),
                    a.summary.points
                ),
            );
        }
        for l in &profile.comm {
            d = d.summary(format!("level {}", l.level.name()), l.transport.clone());
        }
        let mut d = d.table(output::table(&v.points, &cols, style)).note(
            "error = (predicted - measured) / measured; measured = median of the samples, each the slowest rank's time",
        );
        for n in &v.not_predicted {
            d = d.note(format!("not predicted: {n}"));
        }
        d
    })
}

/// `validate published`: the model's counts against the reference layer tables and \[004\]
/// Table II.
fn published(format: Format) -> Result<()> {
    #[derive(Serialize)]
    struct Published {
        layers: Vec<LayerCheck>,
        table2: Vec<Figure>,
    }
    let layers = ridgeline_model::reference::workloads()
        .into_iter()
        .map(check_layers)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let v = Published {
        layers,
        table2: table2()?,
    };
    let cols: [Col<Figure>; 6] = [
        text("workload", "workload", |f, _| {
            if f.paper_workload.eq_ignore_ascii_case(&f.workload) {
                f.workload.clone()
            } else {
                format!("{} ({})", f.workload, f.paper_workload)
            }
        }),
        text("quantity", "quantity", |f, _| f.quantity.to_owned()),
        num("published", "published", |f, s| figure(f, f.published, s)),
        num("model", "model", |f, s| figure(f, f.model, s)),
        num("model / published", "ratio", |f, s| match s {
            Style::Raw => f.ratio.to_string(),
            Style::Human => format!("{:.2}", f.ratio),
        }),
        text("unit", "unit", |f, _| f.unit.to_owned()),
    ];
    output::print(format, &v, |style| {
        let mut d = Document::new("The model against published figures");
        for c in &v.layers {
            d = d.summary(
                c.workload.clone(),
                format!(
                    "{} of {} layers as data/reference/ lists them ({} mismatched); {} parameters (reference {}), {:.3} GMAC/sample (reference {:.3})",
                    c.layers - c.mismatches.len().min(c.layers),
                    c.reference_layers,
                    c.mismatches.len(),
                    style.count(c.params),
                    style.count(c.reference_params),
                    c.macs_fwd as f64 / 1e9,
                    c.reference_macs_fwd as f64 / 1e9
                ),
            );
        }
        let mut d = d.table(output::table(&v.table2, &cols, style)).note(
            "Published: [004] Table II and §IV-A, measured on V100 with TensorFlow 2.5 and automatic mixed precision (data/reference/ibrahim2021-table2.toml). Model: 16-bit activations, one sample; the published FLOPs and HBM bytes are profiler measurements, which count what the framework and cuDNN add to the layers' own work.",
        );
        for c in &v.layers {
            for m in &c.mismatches {
                d = d.note(format!("{}: {m}", c.workload));
            }
        }
        d
    })
}

/// A published or modelled figure in its unit.
fn figure(f: &Figure, x: f64, s: Style) -> String {
    match (f.unit, s) {
        (_, Style::Raw) => x.to_string(),
        ("bytes", _) => s.bytes(Bytes::new(x)),
        ("FLOP", _) => format!("{:.1} GFLOP", x / 1e9),
        _ => format!("{x:.0}"),
    }
}

fn self_check(args: &ValidateArgs) -> Result<()> {
    // Fail fast (issue 17): everything the last steps need is checked before the minutes of
    // measurement start: the system the profile overlays, and a directory to write in.
    inputs::system(ridgeline_model::catalog::LOCAL_NAME)
        .context("the self-check calibrates `local`, this machine")?;
    let dir = &args.dir;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory `{}`", dir.display()))?;
    let probe = dir.join(".ridgeline-write-check");
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .with_context(|| format!("cannot write in directory `{}`", dir.display()))?;
    let suite_file = dir.join("suite.jsonl");
    let workload_file = dir.join("workloads.jsonl");
    let measure_args = |out: &PathBuf| MeasureArgs {
        device: "cpu".into(),
        threads: None,
        out: Some(out.clone()),
        resume: out.exists(),
        protocol: ProtocolArgs::default(),
        format: FormatArg {
            format: Format::Table,
        },
    };

    let before_file = dir.join("workloads-before.jsonl");
    let after_file = dir.join("workloads-after.jsonl");
    let runs = SELF_CHECK_RUNS.iter().map(|r| r.2.len()).sum::<usize>();
    eprintln!(
        "self-check 1/5: {runs} workload runs before the suite -> {}",
        before_file.display()
    );
    run_workloads(&measure_args(&before_file))?;

    eprintln!(
        "self-check 2/5: micro-kernel suite -> {}",
        suite_file.display()
    );
    measure::run_suite(
        &MeasureSuiteArgs {
            budget: args.budget.mul_f64(SUITE_SHARE),
            measure: measure_args(&suite_file),
        },
        &[ThreadCount::All],
    )?;

    eprintln!("self-check 3/5: calibration from the suite alone");
    let calibration = profile::calibrate(
        &[RecordFile {
            path: suite_file.display().to_string(),
            records: output::records(&suite_file)?,
        }],
        &Options {
            system: "local".into(),
            threads: None,
            created: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            comm_level: ridgeline_calibrate::loggp::LevelChoice::Auto,
        },
    )?;
    let profile_file = dir.join("profile.toml");
    ridgeline_app::atomic::write(&profile_file, calibration.profile.to_toml())?;

    eprintln!(
        "self-check 4/5: the {runs} workload runs again after the suite -> {}",
        after_file.display()
    );
    run_workloads(&measure_args(&after_file))?;
    let pooled = pool_runs(
        output::records(&before_file)?,
        output::records(&after_file)?,
    );
    let mut lines = String::new();
    for r in &pooled {
        lines.push_str(&serde_json::to_string(r)?);
        lines.push('\n');
    }
    ridgeline_app::atomic::write(&workload_file, lines)?;

    eprintln!("self-check 5/5: predict and compare");
    let system = inputs::system(&profile_file.display().to_string())?;
    let v = validate::validate(
        &system,
        &output::records(&workload_file)?,
        &workload_file.display().to_string(),
    )?;
    let validation_file = dir.join("validation.json");
    ridgeline_app::atomic::write(&validation_file, serde_json::to_string_pretty(&v)?)?;
    let report = ridgeline_app::report::validation_report(
        &v,
        format!(
            "ridgeline {} validate --self-check --dir {}",
            env!("CARGO_PKG_VERSION"),
            dir.display()
        ),
    );
    ridgeline_app::report::write_to(&report, &dir.join("report"), ImageFormat::Svg, &|_| {
        Ok(Vec::new())
    })?;
    print(&v, args, Some(dir))
}

/// Measures the self-check's workload runs into the file of `m`.
fn run_workloads(m: &MeasureArgs) -> Result<()> {
    let mut backends = Backends::new(m, &[ThreadCount::All])?;
    let threads = backends.threads()[0];
    let mut cases = Vec::new();
    for (name, input, batches) in SELF_CHECK_RUNS {
        let graph = workloads::build(
            name,
            &BuildOptions {
                input_size: Some(input.to_vec()),
                width: 1.0,
            },
        )?;
        for b in batches {
            cases.push((
                threads,
                Case::Workload(Box::new(graph.clone()), b, Precision::Fp32),
            ));
        }
    }
    let mut w = measure::writer(m)?;
    measure::run_cases(
        &mut backends,
        &mut w,
        &cases,
        &measure::steps_protocol(SELF_CHECK_STEPS),
        1,
        None,
    )?;
    Ok(())
}

/// The workload runs measured before and after the suite as one measurement each: the
/// samples (and per-step update times) of the records with the same id pooled, so the exam
/// brackets the calibration in time, as `scripts/bench-cpu` brackets each measurement with
/// its reference. A slow spell of the machine during one half moves the pooled median by
/// less than it moves that half. Records only one run has are kept as they are.
fn pool_runs(
    before: Vec<ridgeline_measure::Record>,
    after: Vec<ridgeline_measure::Record>,
) -> Vec<ridgeline_measure::Record> {
    let mut pooled = before;
    for r in after {
        match pooled.iter_mut().find(|p| p.id == r.id) {
            Some(p) => {
                p.samples_s.extend(&r.samples_s);
                let updates = |x: &Option<serde_json::Value>| {
                    x.as_ref()
                        .and_then(|e| e.get("update_s"))
                        .and_then(|u| u.as_array())
                        .cloned()
                };
                if let (Some(mut a), Some(b), Some(extra)) =
                    (updates(&p.extra), updates(&r.extra), p.extra.as_mut())
                {
                    a.extend(b);
                    extra["update_s"] = serde_json::Value::Array(a);
                }
                if let (Some(a), Some(b)) = (
                    p.extra.as_mut().and_then(|e| e.get_mut("peak_bytes")),
                    r.extra.as_ref().and_then(|e| e.get("peak_bytes")),
                ) && b.as_u64() > a.as_u64()
                {
                    *a = b.clone();
                }
            }
            None => pooled.push(r),
        }
    }
    pooled
}

fn print(v: &Validation, args: &ValidateArgs, artifacts: Option<&Path>) -> Result<()> {
    let worst = &v.worst_layers[..args.top.min(v.worst_layers.len())];
    let report = Report {
        system: &v.system,
        steps: &v.steps,
        summary: &v.summary,
        worst_layers: worst,
        artifacts,
    };
    let step_cols = tables::step_cols();
    let layer_cols = tables::layer_cols();
    output::print(args.format.format, &report, |style| {
        let mut d = Document::new(format!(
            "Validation: predicted vs measured training steps on {}",
            v.system
        ));
        for (k, val) in tables::summary_lines(v) {
            d = d.summary(k, val);
        }
        if let Some(dir) = artifacts {
            d = d.summary(
                "artifacts",
                format!(
                    "{} (workloads-before.jsonl, suite.jsonl, profile.toml, workloads-after.jsonl, workloads.jsonl, validation.json, report/)",
                    dir.display()
                ),
            );
        }
        d.table(output::table(&v.steps, &step_cols, style))
            .note("Predictions from the calibrated profile alone (micro-kernel records); the workload measurements are never fitted. Error = (predicted - measured) / measured.")
    })?;
    if args.format.format == Format::Table {
        // The worst layers as a second table under the steps.
        output::print(args.format.format, &report, |style| {
            Document::new("Layer passes furthest off, in seconds").table(output::table(
                worst,
                &layer_cols,
                style,
            ))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use ridgeline_measure::{Env, Record, SCHEMA_VERSION};
    use serde_json::json;

    use super::*;

    fn record(id: &str, samples: &[f64], updates: &[f64], peak: u64) -> Record {
        Record {
            schema_version: SCHEMA_VERSION,
            id: id.into(),
            kind: "workload-step".into(),
            shape: json!({}),
            precision: "fp32".into(),
            device: "cpu".into(),
            threads: 2,
            samples_s: samples.to_vec(),
            flops: 1.0,
            bytes: 1.0,
            env: Env::capture(),
            extra: Some(json!({ "update_s": updates, "peak_bytes": peak })),
        }
    }

    #[test]
    fn bracketing_runs_pool_their_samples_per_record() {
        let before = vec![
            record("a", &[1.0, 1.1], &[0.1, 0.1], 100),
            record("b", &[2.0], &[0.2], 200),
        ];
        let after = vec![
            record("b", &[3.0, 3.5], &[0.3, 0.3], 150),
            record("c", &[4.0], &[0.4], 10),
        ];
        let pooled = pool_runs(before, after);
        let ids: Vec<&str> = pooled.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(pooled[0].samples_s, [1.0, 1.1]);
        assert_eq!(pooled[1].samples_s, [2.0, 3.0, 3.5]);
        let extra = pooled[1].extra.as_ref().unwrap();
        assert_eq!(extra["update_s"], json!([0.2, 0.3, 0.3]));
        assert_eq!(extra["peak_bytes"], json!(200), "the larger peak stays");
        assert_eq!(pooled[2].samples_s, [4.0]);
    }
}
