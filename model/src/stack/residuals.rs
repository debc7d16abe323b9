//! How far whole steps predicted under each built-in stack have come out from their
//! measurements: the step-level residuals of `data/catalog/stacks/residuals.csv`, and the 90 % band
//! of measured over predicted time that is a prediction's interval ([`band`]).
//!
//! A step's interval from its kernels alone (each fit's residuals, the transferred model's
//! held-out errors) says nothing of what the stack and the rest of the step add, and held
//! only 3 of 10 of ridgeline's own H100 steps. The residuals file lists every measured step
//! ridgeline validates, as `scripts/step-residuals.sh` predicts it: the stack it ran under,
//! the set it belongs to, its workload, device, precision and batch, the predicted and the
//! measured seconds. The band of a stack is a split-conformal interval on the ratio of
//! measured to predicted time over its steps (the 5th and 95th percentiles at the finite
//! sample's ranks), so a new step of the same population falls inside it nine times in ten.
//! It replaces the interval of the kernels alone, which the step-level residuals already
//! hold; that one remains where no band can be built.
//! Steps on GPUs and on CPUs are apart (`kind`): a CPU's host runs its kernels, a GPU's
//! issues them. A stack with fewer than [`MIN_STEPS`] steps of its own on the kind of device,
//! or a user's stack file, takes the band of every stack's steps on that kind pooled, and
//! says so; with fewer than that in all, there is no band. Only the interval's width comes
//! from these residuals: no prediction is fitted on them.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::Stack;
use crate::system::DeviceKind;

/// The residuals file, embedded.
const RESIDUALS: &str = include_str!("../../../data/catalog/stacks/residuals.csv");

/// Its path in the repository, for messages.
pub const RESIDUALS_PATH: &str = "data/catalog/stacks/residuals.csv";

/// The fewest steps a stack's own band is built from; with fewer, every stack's steps
/// pooled.
pub const MIN_STEPS: usize = 10;

/// One measured step, predicted.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Residual {
    /// The built-in stack it ran under.
    pub stack: String,
    /// The validation set it comes from (`own-h100`, `neusight-labels`, ...).
    pub set: String,
    /// The workload (with its split, as `gpt2_large tp4`).
    pub workload: String,
    /// The device (a catalog name, or the CPU a trace or a calibrated profile names).
    pub device: String,
    /// Its kind: `gpu` or `cpu`.
    pub kind: DeviceKind,
    /// The training precision.
    pub precision: String,
    /// The batch (per device).
    pub batch: u64,
    /// Predicted seconds a step.
    pub predicted_s: f64,
    /// Measured seconds a step.
    pub measured_s: f64,
}

impl Residual {
    /// Measured over predicted time.
    pub fn ratio(&self) -> f64 {
        self.measured_s / self.predicted_s
    }

    /// Whether it is the measurement `key` names.
    fn is(&self, key: &StepKey) -> bool {
        self.workload == key.workload
            && self.device == key.device
            && self.precision == key.precision
            && self.batch == key.batch
    }
}

/// A measured step, to leave its own residual out of the band its prediction is judged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepKey {
    /// Workload.
    pub workload: String,
    /// Device.
    pub device: String,
    /// Training precision.
    pub precision: String,
    /// Batch per device.
    pub batch: u64,
}

/// The 90 % band of measured over predicted step time under a stack.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepBand {
    /// Its lower end: the measured time at least this times the predicted.
    pub lo: f64,
    /// Its upper end.
    pub hi: f64,
    /// The steps it comes from.
    pub steps: usize,
    /// The stack it is the band of.
    pub stack: String,
    /// Whether the stack had too few steps of its own (or is a user's file), so every
    /// stack's steps on the kind of device were pooled.
    pub pooled: bool,
    /// The kind of device the steps ran on.
    pub kind: DeviceKind,
}

impl StepBand {
    /// The interval `[lo, hi]` of a step predicted at `t` seconds.
    pub fn around(&self, t: f64) -> [f64; 2] {
        [t * self.lo, t * self.hi]
    }

    /// One line for a person: where the band comes from.
    pub fn describe(&self) -> String {
        format!(
            "measured / predicted {:.2} to {:.2} over {} validated steps {} ({RESIDUALS_PATH})",
            self.lo,
            self.hi,
            self.steps,
            self.source()
        )
    }

    /// Whose steps they are: `on GPUs under tuned`, or `on GPUs under every stack (too few
    /// under tuned)`.
    pub fn source(&self) -> String {
        let on = match self.kind {
            DeviceKind::Gpu => "on GPUs",
            DeviceKind::Cpu => "on CPUs",
        };
        if self.pooled {
            format!("{on} under every stack (too few under {})", self.stack)
        } else {
            format!("{on} under {}", self.stack)
        }
    }
}

/// Every residual of the file, read once.
///
/// # Panics
/// Never on the shipped file: a test reads it.
pub fn residuals() -> &'static [Residual] {
    static ALL: OnceLock<Vec<Residual>> = OnceLock::new();
    ALL.get_or_init(|| {
        parse(RESIDUALS)
            .unwrap_or_else(|e| unreachable!("{RESIDUALS_PATH} is checked by a test: {e}"))
    })
}

/// The residuals in `text` (the file's form: `#` comments, a header, one step a row).
pub fn parse(text: &str) -> std::result::Result<Vec<Residual>, String> {
    let mut rows = Vec::new();
    let mut reader = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    for (i, row) in reader.deserialize::<Residual>().enumerate() {
        let r = row.map_err(|e| format!("row {}: {e}", i + 1))?;
        if !(r.predicted_s > 0.0 && r.measured_s > 0.0) {
            return Err(format!(
                "row {}: predicted_s and measured_s must be positive seconds",
                i + 1
            ));
        }
        rows.push(r);
    }
    Ok(rows)
}

/// The band of `stack` on devices of `kind`: from its own residuals there when it is a
/// built-in stack with at least [`MIN_STEPS`] of them, else from every stack's; `leave_out`
/// names a measured step whose residual (any with its workload, device, precision and
/// batch) is left out, so a validation judges each step by the others. `None` where there
/// are too few steps.
pub fn band(stack: &Stack, kind: DeviceKind, leave_out: Option<&StepKey>) -> Option<StepBand> {
    band_of(residuals(), stack, kind, leave_out)
}

fn band_of(
    all: &[Residual],
    stack: &Stack,
    kind: DeviceKind,
    leave_out: Option<&StepKey>,
) -> Option<StepBand> {
    let kept = |r: &&Residual| r.kind == kind && leave_out.is_none_or(|k| !r.is(k));
    let builtin = stack.file == format!("data/catalog/stacks/{}.toml", stack.name);
    let own: Vec<f64> = all
        .iter()
        .filter(kept)
        .filter(|r| builtin && r.stack == stack.name)
        .map(Residual::ratio)
        .collect();
    let (ratios, pooled) = if own.len() >= MIN_STEPS {
        (own, false)
    } else {
        (all.iter().filter(kept).map(Residual::ratio).collect(), true)
    };
    let [lo, hi] = conformal_90(ratios.clone())?;
    Some(StepBand {
        lo,
        hi,
        steps: ratios.len(),
        stack: stack.name.clone(),
        pooled,
        kind,
    })
}

/// The 5th and 95th percentiles of `v` at the ranks of a split-conformal interval: the
/// `floor(0.05 (n + 1))`-th and `ceil(0.95 (n + 1))`-th smallest (clamped to the sample).
fn conformal_90(mut v: Vec<f64>) -> Option<[f64; 2]> {
    if v.len() < MIN_STEPS {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let rank = |q: f64, up: bool| {
        let k = q * (n + 1) as f64;
        let k = if up { k.ceil() } else { k.floor() } as usize;
        k.clamp(1, n) - 1
    };
    Some([v[rank(0.05, false)], v[rank(0.95, true)]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    const GPU: DeviceKind = DeviceKind::Gpu;

    fn row(stack: &str, workload: &str, ratio: f64) -> Residual {
        Residual {
            stack: stack.to_owned(),
            set: "test".to_owned(),
            workload: workload.to_owned(),
            device: "h100-sxm5-80gb".to_owned(),
            kind: DeviceKind::Gpu,
            precision: "fp32".to_owned(),
            batch: 8,
            predicted_s: 1.0,
            measured_s: ratio,
        }
    }

    #[test]
    fn the_shipped_residuals_parse_and_each_names_a_built_in_stack() {
        let all = residuals();
        assert!(!all.is_empty());
        let names = catalog::stack_names();
        for r in all {
            assert!(names.contains(&r.stack), "{r:?}");
        }
    }

    #[test]
    fn the_band_takes_the_conformal_ranks_of_the_ratios() {
        // 19 ratios 0.1 .. 1.9: ranks floor(1) = 1st and ceil(19) = 19th.
        let eager = catalog::stack("pytorch-eager").unwrap();
        let rows: Vec<Residual> = (1..=19)
            .map(|i| row("pytorch-eager", &format!("w{i}"), f64::from(i) / 10.0))
            .collect();
        let b = band_of(&rows, &eager, GPU, None).unwrap();
        assert_eq!([b.lo, b.hi], [0.1, 1.9]);
        assert!(!b.pooled);
        assert_eq!(b.steps, 19);
        // 39 ratios: floor(2) = 2nd and ceil(38) = 38th.
        let rows: Vec<Residual> = (1..=39)
            .map(|i| row("pytorch-eager", &format!("w{i}"), f64::from(i)))
            .collect();
        let b = band_of(&rows, &eager, GPU, None).unwrap();
        assert_eq!([b.lo, b.hi], [2.0, 38.0]);
        assert_eq!(b.around(2.0), [4.0, 76.0]);
    }

    #[test]
    fn a_step_left_out_drops_from_its_own_band() {
        let eager = catalog::stack("pytorch-eager").unwrap();
        let mut rows: Vec<Residual> = (0..12)
            .map(|i| row("pytorch-eager", &format!("w{i}"), 1.0))
            .collect();
        rows.push(row("pytorch-eager", "far", 5.0));
        assert_eq!(band_of(&rows, &eager, GPU, None).unwrap().hi, 5.0);
        let key = StepKey {
            workload: "far".to_owned(),
            device: "h100-sxm5-80gb".to_owned(),
            precision: "fp32".to_owned(),
            batch: 8,
        };
        let b = band_of(&rows, &eager, GPU, Some(&key)).unwrap();
        assert_eq!((b.hi, b.steps), (1.0, 12));
    }

    #[test]
    fn too_few_steps_or_a_users_stack_pool_every_stacks_steps() {
        let mut rows: Vec<Residual> = (0..12)
            .map(|i| row("ridgeline-executor", &format!("w{i}"), 2.0))
            .collect();
        rows.push(row("tuned", "x", 1.0));
        let tuned = catalog::stack("tuned").unwrap();
        let b = band_of(&rows, &tuned, GPU, None).unwrap();
        assert!(b.pooled);
        assert_eq!(b.steps, 13);
        assert!(
            b.describe()
                .contains("on GPUs under every stack (too few under tuned)"),
            "{}",
            b.describe()
        );
        // The executor's own file, copied as a user's: pooled too.
        let mut mine = catalog::stack("ridgeline-executor").unwrap();
        mine.file = "mine.toml".to_owned();
        assert!(band_of(&rows, &mine, GPU, None).unwrap().pooled);
        let own = catalog::stack("ridgeline-executor").unwrap();
        assert!(!band_of(&rows, &own, GPU, None).unwrap().pooled);
        // Fewer than MIN_STEPS in all: no band; and none of these steps ran on a CPU.
        assert!(band_of(&rows[..5], &tuned, GPU, None).is_none());
        assert!(band_of(&rows, &own, DeviceKind::Cpu, None).is_none());
    }

    #[test]
    fn bad_rows_are_refused_with_their_row() {
        let head = "stack,set,workload,device,kind,precision,batch,predicted_s,measured_s\n";
        let e = parse(&format!("{head}tuned,s,w,d,gpu,fp32,8,0,1\n")).unwrap_err();
        assert!(e.contains("row 1") && e.contains("positive"), "{e}");
        let e = parse(&format!("# note\n{head}tuned,s,w,d,gpu,fp32,eight,1,1\n")).unwrap_err();
        assert!(e.contains("row 1"), "{e}");
        let e = parse(&format!("{head}tuned,s,w,d,tpu,fp32,8,1,1\n")).unwrap_err();
        assert!(e.contains("row 1"), "{e}");
    }
}
