//! What `calibrate` prints: the profile's fits, bandwidths, ceilings and LogGP levels.

use ridgeline_calibrate::profile::Calibration;
use ridgeline_model::profile::KernelFit;
use ridgeline_reports::Document;

use crate::columns::{Col, Style, num, table, text};

/// A calibration: the fits, bandwidths and ceilings, and what was not fitted.
pub fn calibration(c: &Calibration, style: Style) -> Document {
    let p = &c.profile;
    let cols: [Col<KernelFit>; 8] = [
        text("class", "class", |f, _| match &f.op {
            Some(op) => format!("{} ({op})", f.class.name()),
            None => f.class.name().to_owned(),
        }),
        text("pass", "pass", |f, _| f.pass.name().to_owned()),
        text("precision", "precision", |f, _| f.precision.clone()),
        num("points", "points", |f, _| f.points.to_string()),
        num("asymptote", "asymptote_flops", |f, s| {
            f.asymptotic_flop_rate()
                .map_or_else(|| "-".into(), |r| s.flop_rate(r))
        }),
        num("fixed", "fixed_s", |f, s| s.seconds(f.fixed())),
        num("R²", "r_squared", |f, s| s.number(Some(f.r_squared), 3)),
        num("rms error", "rms_rel_error", |f, s| {
            s.number(Some(100.0 * f.rms_rel_error), 1)
        }),
    ];
    let title = if p.device.starts_with("cuda") {
        format!(
            "Calibrated profile: {} ({}) on {}",
            p.device, p.provenance.device_model, p.provenance.host
        )
    } else {
        format!(
            "Calibrated profile: {} on {} threads of {} ({})",
            p.device, p.threads, p.provenance.host, p.provenance.device_model
        )
    };
    let mut d = Document::new(title)
        .summary("overlays", p.system.clone())
        .summary(
            "records",
            p.provenance
                .files
                .iter()
                .map(|f| format!("{} ({} used)", f.path, f.records))
                .collect::<Vec<_>>()
                .join(", "),
        )
        .summary(
            "measured",
            format!(
                "{} .. {}",
                p.provenance.measured_from, p.provenance.measured_to
            ),
        );
    for b in &p.bandwidth {
        d = d.summary(
            format!("bandwidth {}", b.level),
            format!(
                "{:.1} ± {:.1} GB/s ({} points)",
                b.bandwidth_gbs, b.std_error_gbs, b.points
            ),
        );
    }
    for ceiling in &p.ceilings {
        d = d.summary(
            format!("ceiling {} {}", ceiling.kind, ceiling.precision),
            format!("{:.1} GFLOP/s", ceiling.tflops * 1e3),
        );
    }
    for l in &p.comm {
        d = d.summary(
            format!("LogGP {}", l.level.name()),
            format!(
                "L {:.2} us, o {:.2} us, g {:.2} us, G {:.3} ns/B ({:.2} GB/s); exchange in {} band(s), reduction in {} ({})",
                l.latency_s * 1e6,
                l.overhead_s * 1e6,
                l.gap_s * 1e6,
                l.gap_per_byte_s * 1e9,
                if l.gap_per_byte_s > 0.0 { 1e-9 / l.gap_per_byte_s } else { f64::INFINITY },
                l.exchange.len(),
                l.reduction.len(),
                l.transport
            ),
        );
    }
    if !p.kernels.is_empty() {
        d = d
            .table(table(&p.kernels, &cols, style))
            .note("Each class and pass: t = c0 + c1 F + c2 |A| + c3 |B| + c4 |C| (matrix) or c0 + c1 F + c2 bytes (vector), least squares on error relative to the fitted time with c >= 0; asymptote = 1 / c1, fixed = c0; rms error in %.");
    }
    if !p.comm.is_empty() {
        d = d.note("LogGP by the Netgauge method (L, o, g, G from round trips and message trains, with standard errors in the profile); the exchange step and reduction kernel as lines per size band.");
    }
    for s in &c.skipped {
        d = d.note(format!("not fitted: {s}"));
    }
    d
}
