//! The run protocol: how a kernel is timed (criterion's and hyperfine's practice).
//!
//! 1. **Timer resolution**: measured once, as the smallest non-zero step of
//!    [`std::time::Instant`].
//! 2. **Warm-up**: the kernel runs until [`WARMUP_TIME`] has passed (at least once), so
//!    caches, page tables and thread pools are warm.
//! 3. **Batching**: if one run takes less than [`MIN_RESOLUTIONS`] timer resolutions, each
//!    sample times several back-to-back runs and records the time per run.
//! 4. **Samples**: at least [`MIN_SAMPLES`] samples and at least [`MIN_TIME`] of them, but
//!    no more than [`MAX_SAMPLES`] or [`MAX_TIME`] (past the minimum count).
//!
//! Only raw samples come out; statistics belong to `ridgeline-calibrate`.

use std::time::{Duration, Instant};

use serde::Serialize;
use statrs::statistics::{Data, OrderStatistics};

/// Default warm-up time.
pub const WARMUP_TIME: Duration = Duration::from_millis(200);
/// Default minimum number of samples.
pub const MIN_SAMPLES: usize = 10;
/// Default minimum total sampling time.
pub const MIN_TIME: Duration = Duration::from_millis(500);
/// Default most samples.
pub const MAX_SAMPLES: usize = 1000;
/// Default most sampling time once the minimum count is reached.
pub const MAX_TIME: Duration = Duration::from_secs(5);
/// A sample must span at least this many timer resolutions.
pub const MIN_RESOLUTIONS: u32 = 1000;

/// How many times, and for how long, to run a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Protocol {
    /// Warm-up time.
    pub warmup: Duration,
    /// Minimum samples.
    pub min_samples: usize,
    /// Minimum sampling time.
    pub min_time: Duration,
    /// Maximum samples.
    pub max_samples: usize,
    /// Maximum sampling time past the minimum count.
    pub max_time: Duration,
    /// What the caches hold when each run starts (CPU kernels; a GPU's are timed as they
    /// come).
    pub cache: CacheState,
}

/// What the caches hold when a timed run starts.
///
/// Repeating a kernel on the same buffers leaves all its operands in the caches, so every
/// run after the first finds them there. Inside a training step only what the previous
/// kernel just wrote is near (a layer's input forward, its output gradient backward); its
/// weights, its saved activations and the buffer it writes were last touched long before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheState {
    /// Whatever the previous run left: every operand warm.
    Warm,
    /// Nothing: the caches are evicted before every run ([`evict_caches`]), which also
    /// empties the TLB and the instruction caches and lets the threads idle.
    Cold,
    /// As inside a training step: the operand the previous kernel just wrote is one buffer,
    /// warm; every other operand cycles through enough copies to exceed the last-level
    /// cache ([`rotations`]), so each run meets them cold, back to back.
    Step,
}

/// How many copies of the operands that are cold inside a training step (`bytes` of them
/// per run) a [`CacheState::Step`] measurement cycles through: enough that one pass over
/// them reads one and a half last-level caches, at least two, at most
/// [`MAX_ROTATIONS`]; one for the other states, and where no operand is cold.
pub fn rotations(cache: CacheState, bytes: usize) -> usize {
    if cache != CacheState::Step || bytes == 0 {
        // Nothing is cold: nothing to rotate.
        return 1;
    }
    let llc = crate::host::Caches::detect().llc;
    (3 * llc / 2 / bytes + 1).clamp(2, MAX_ROTATIONS)
}

/// Most copies a step-state measurement cycles through.
pub const MAX_ROTATIONS: usize = 4096;

impl CacheState {
    /// Its name on the command line and in records.
    pub const fn name(self) -> &'static str {
        match self {
            CacheState::Warm => "warm",
            CacheState::Cold => "cold",
            CacheState::Step => "step",
        }
    }
}

impl std::str::FromStr for CacheState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [CacheState::Warm, CacheState::Cold, CacheState::Step]
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown cache state `{s}`; valid: warm, cold, step"))
    }
}

impl Default for Protocol {
    fn default() -> Self {
        Protocol {
            warmup: WARMUP_TIME,
            min_samples: MIN_SAMPLES,
            min_time: MIN_TIME,
            max_samples: MAX_SAMPLES,
            max_time: MAX_TIME,
            cache: CacheState::Step,
        }
    }
}

impl Protocol {
    /// A short protocol for tests and quick looks: 3 samples, no minimum time.
    pub fn quick() -> Protocol {
        Protocol {
            warmup: Duration::ZERO,
            min_samples: 3,
            min_time: Duration::ZERO,
            max_samples: 3,
            max_time: Duration::from_secs(60),
            cache: CacheState::Warm,
        }
    }

    /// Times `run` by this protocol; returns the seconds of one run, per sample.
    pub fn measure(&self, mut run: impl FnMut()) -> Vec<f64> {
        let resolution = timer_resolution();
        let timed = self.measure_timed(resolution, |batch| {
            if self.cache == CacheState::Cold {
                // One run at a time, each after an eviction that is not timed.
                let mut took = Duration::ZERO;
                for _ in 0..batch {
                    evict_caches();
                    let t = Instant::now();
                    run();
                    took += t.elapsed();
                }
                return Ok::<_, std::convert::Infallible>(took);
            }
            let t = Instant::now();
            for _ in 0..batch {
                run();
            }
            Ok::<_, std::convert::Infallible>(t.elapsed())
        });
        match timed {
            Ok(samples) => samples,
            Err(never) => match never {},
        }
    }

    /// Times work that times itself: `run(batch)` runs the kernel `batch` times back to back
    /// and returns how long that took by its own clock (CUDA events on a GPU) whose finest
    /// step is `resolution`. Warm-up learns one run's time; short kernels are batched so that
    /// a sample spans at least [`MIN_RESOLUTIONS`] clock steps. Returns the seconds of one run,
    /// per sample; the first error stops the measurement.
    pub fn measure_timed<E>(
        &self,
        resolution: Duration,
        mut run: impl FnMut(u32) -> Result<Duration, E>,
    ) -> Result<Vec<f64>, E> {
        // Warm up (at least once), learning how long one run takes.
        let start = Instant::now();
        let (mut runs, mut busy) = (0u32, Duration::ZERO);
        loop {
            busy += run(1)?;
            runs += 1;
            if start.elapsed() >= self.warmup {
                break;
            }
        }
        let per_run = busy / runs;
        let floor = resolution * MIN_RESOLUTIONS;
        let batch = if per_run >= floor || per_run.is_zero() {
            1
        } else {
            (floor.as_nanos() / per_run.as_nanos().max(1)).clamp(1, 1_000_000) as u32 + 1
        };
        let mut samples = Vec::with_capacity(self.min_samples);
        let sampling = Instant::now();
        while samples.len() < self.max_samples.max(1) {
            let took = run(batch)?;
            samples.push(took.as_secs_f64() / f64::from(batch));
            let elapsed = sampling.elapsed();
            let enough = samples.len() >= self.min_samples && elapsed >= self.min_time;
            let too_long = samples.len() >= self.min_samples && elapsed >= self.max_time;
            if enough || too_long {
                break;
            }
        }
        Ok(samples)
    }
}

impl Protocol {
    /// Runs `step` by this protocol without batching, for work that times itself (a whole
    /// training step, which reports per-layer times): `step` returns its own seconds and
    /// what it measured. Warm-up runs are discarded; the measured runs' results come back.
    pub fn steps<T>(&self, mut step: impl FnMut() -> (f64, T)) -> Vec<T> {
        match self.try_steps(|| Ok::<_, std::convert::Infallible>(step())) {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// [`Protocol::steps`] for a step that can fail: the first error ends the run.
    pub fn try_steps<T, E>(
        &self,
        mut step: impl FnMut() -> Result<(f64, T), E>,
    ) -> Result<Vec<T>, E> {
        let start = Instant::now();
        loop {
            step()?;
            if start.elapsed() >= self.warmup {
                break;
            }
        }
        let mut out = Vec::with_capacity(self.min_samples);
        let mut spent = 0.0;
        while out.len() < self.max_samples.max(1) {
            let (seconds, result) = step()?;
            out.push(result);
            spent += seconds;
            let enough = out.len() >= self.min_samples && spent >= self.min_time.as_secs_f64();
            let too_long = out.len() >= self.min_samples && spent >= self.max_time.as_secs_f64();
            if enough || too_long {
                break;
            }
        }
        Ok(out)
    }
}

/// Evicts this machine's caches: every thread of the current rayon pool reads a buffer of
/// twice the last-level cache (sysfs), line by line, so what the next run touches comes
/// from memory. Reads, not writes: nothing dirty is left to be written back inside the
/// next timed run.
pub fn evict_caches() {
    static BUFFER: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    let buffer = BUFFER.get_or_init(|| {
        let llc = crate::host::Caches::detect().llc;
        // Distinct values, so no page is shared with another (zero pages would be).
        (0..(2 * llc / 8) as u64).collect()
    });
    rayon::broadcast(|_| {
        // One word per 64-byte line.
        let sum = buffer
            .iter()
            .step_by(8)
            .fold(0u64, |s, v| s.wrapping_add(*v));
        std::hint::black_box(sum);
    });
}

/// The smallest non-zero step of the monotonic clock, measured.
pub fn timer_resolution() -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..100 {
        let a = Instant::now();
        let mut b = Instant::now();
        while b == a {
            b = Instant::now();
        }
        best = best.min(b - a);
    }
    best
}

/// The median of timing samples (statrs's; NaN for none): the one median of raw samples,
/// here where they are taken and re-exported as `ridgeline_calibrate::stats::median`.
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    Data::new(samples.to_vec()).median()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device clock that says each run takes 2 us, with 1 us steps: runs are batched so a
    /// sample spans at least MIN_RESOLUTIONS steps, and per-run times come out exact.
    #[test]
    fn self_timed_work_is_batched_to_the_clock_resolution() {
        let mut batches = Vec::new();
        let p = Protocol::quick();
        let samples = p
            .measure_timed(Duration::from_micros(1), |batch| {
                batches.push(batch);
                Ok::<_, String>(Duration::from_micros(2) * batch)
            })
            .unwrap();
        assert_eq!(samples.len(), 3);
        assert!(
            samples.iter().all(|s| (s - 2e-6).abs() < 1e-12),
            "{samples:?}"
        );
        assert_eq!(batches[0], 1, "warm-up runs once");
        assert!(
            batches[1..].iter().all(|&b| 2 * b >= MIN_RESOLUTIONS),
            "{batches:?}"
        );
        let err = p
            .measure_timed(Duration::from_micros(1), |_| {
                Err::<Duration, _>("launch failed")
            })
            .unwrap_err();
        assert_eq!(err, "launch failed");
    }

    #[test]
    fn timer_resolution_is_small_and_positive() {
        let r = timer_resolution();
        assert!(r > Duration::ZERO && r < Duration::from_millis(1), "{r:?}");
    }

    #[test]
    fn quick_protocol_takes_its_samples() {
        let mut calls = 0;
        let s = Protocol::quick().measure(|| {
            calls += 1;
            std::hint::black_box((0..1000).sum::<u64>());
        });
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|&x| x > 0.0));
        assert!(calls >= 4, "one warm-up run at least");
    }

    #[test]
    fn tiny_kernels_are_batched_above_the_timer_resolution() {
        let p = Protocol {
            min_samples: 5,
            max_samples: 5,
            ..Protocol::quick()
        };
        let s = p.measure(|| {
            std::hint::black_box(1 + 1);
        });
        // Per-run times far below the resolution come out as sub-resolution averages (the
        // median: a sample the scheduler preempted may not, on a loaded machine).
        let mut sorted = s.clone();
        sorted.sort_by(f64::total_cmp);
        assert!(
            sorted[sorted.len() / 2] < timer_resolution().as_secs_f64() * 10.0,
            "{s:?}"
        );
    }

    #[test]
    fn steps_are_not_batched_and_warm_up_is_discarded() {
        let mut calls = 0;
        let p = Protocol {
            min_samples: 3,
            max_samples: 3,
            ..Protocol::quick()
        };
        let out = p.steps(|| {
            calls += 1;
            (1e-9, calls)
        });
        assert_eq!(out, vec![2, 3, 4]);
    }

    #[test]
    fn step_state_rotates_past_the_last_level_cache() {
        assert_eq!(rotations(CacheState::Warm, 1 << 10), 1);
        assert_eq!(rotations(CacheState::Cold, 1 << 10), 1);
        // Operands larger than any cache: two copies, so no run meets the previous one's.
        assert_eq!(rotations(CacheState::Step, 1 << 40), 2);
        let llc = crate::host::Caches::detect().llc;
        assert_eq!(
            rotations(CacheState::Step, 0),
            1,
            "nothing cold, nothing rotated"
        );
        for bytes in [1, 4096, 1 << 20, llc / 3, llc] {
            let r = rotations(CacheState::Step, bytes);
            assert!((2..=MAX_ROTATIONS).contains(&r), "{bytes} B: {r}");
            if r < MAX_ROTATIONS {
                assert!(r * bytes >= 3 * llc / 2, "{bytes} B: {r} copies");
            }
        }
        assert_eq!("step".parse::<CacheState>(), Ok(CacheState::Step));
        let err = "hot".parse::<CacheState>().unwrap_err();
        assert!(err.contains("warm, cold, step"), "{err}");
    }

    #[test]
    fn cold_runs_are_timed_one_at_a_time_without_the_eviction() {
        let p = Protocol {
            min_samples: 3,
            max_samples: 3,
            cache: CacheState::Cold,
            ..Protocol::quick()
        };
        let mut calls = 0;
        let s = p.measure(|| {
            calls += 1;
            std::thread::sleep(Duration::from_millis(1));
        });
        assert_eq!(s.len(), 3);
        // Each sample is one run of about a millisecond: the eviction before it is not in it.
        assert!(s.iter().all(|&x| (0.001..0.5).contains(&x)), "{s:?}");
        assert!(calls >= 3);
    }

    #[test]
    fn sampling_stops_at_the_minimum_once_time_is_reached() {
        let p = Protocol {
            warmup: Duration::ZERO,
            min_samples: 4,
            min_time: Duration::ZERO,
            max_samples: 100,
            max_time: Duration::from_secs(10),
            cache: CacheState::Warm,
        };
        let s = p.measure(|| std::thread::sleep(Duration::from_millis(2)));
        assert_eq!(s.len(), 4);
        assert!(s.iter().all(|&x| x >= 0.002));
    }
}
