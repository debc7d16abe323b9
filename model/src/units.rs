//! Typed quantities used at every crate boundary: [`Flops`], [`Bytes`], [`Seconds`],
//! [`FlopRate`] and [`ByteRate`].
//!
//! Each is a thin wrapper around an `f64` in SI base units (FLOP, byte, second). Only the
//! operations that make physical sense exist: `Flops / FlopRate = Seconds`,
//! `Bytes / ByteRate = Seconds`, `Flops / Bytes` is an arithmetic intensity (a plain `f64`),
//! and quantities of the same kind add. Decimal and binary constructors are explicit
//! (`Bytes::from_gb` is 10^9 bytes, `Bytes::from_gib` is 2^30), following uom's rule that a
//! quantity is not a unit. Serialised as the bare number in base units so JSON consumers do
//! not need to know the wrapper.

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul};

use serde::{Deserialize, Serialize};

const KILO: f64 = 1e3;
const MEGA: f64 = 1e6;
const GIGA: f64 = 1e9;
const TERA: f64 = 1e12;
const KIB: f64 = 1024.0;
const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A quantity's value in base SI units, whatever its type: for range checks that apply
/// to every figure of a file alike.
pub trait Base {
    /// The value in base units.
    fn base(&self) -> f64;
}

impl Base for f64 {
    fn base(&self) -> f64 {
        *self
    }
}

macro_rules! quantity {
    ($(#[$doc:meta])* $name:ident, $unit:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(f64);

        impl $name {
            /// Zero of this quantity.
            pub const ZERO: Self = Self(0.0);

            /// The value in base units (
            #[doc = $unit]
            /// ).
            pub const fn value(self) -> f64 {
                self.0
            }

            /// The larger of two quantities.
            pub fn max(self, other: Self) -> Self {
                Self(self.0.max(other.0))
            }

            /// The smaller of two quantities.
            pub fn min(self, other: Self) -> Self {
                Self(self.0.min(other.0))
            }
        }

        impl Base for $name {
            fn base(&self) -> f64 {
                self.0
            }
        }

        impl Add for $name {
            type Output = Self;
            fn add(self, rhs: Self) -> Self {
                Self(self.0 + rhs.0)
            }
        }

        impl AddAssign for $name {
            fn add_assign(&mut self, rhs: Self) {
                self.0 += rhs.0;
            }
        }

        impl Mul<f64> for $name {
            type Output = Self;
            fn mul(self, rhs: f64) -> Self {
                Self(self.0 * rhs)
            }
        }

        impl Sum for $name {
            fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
                Self(iter.map(|q| q.0).sum())
            }
        }

        /// Ratio of two quantities of the same kind.
        impl Div for $name {
            type Output = f64;
            fn div(self, rhs: Self) -> f64 {
                self.0 / rhs.0
            }
        }
    };
}

quantity!(
    /// A count of floating-point operations (one fused multiply-add counts as two).
    Flops,
    "FLOP"
);
quantity!(
    /// An amount of data in bytes.
    Bytes,
    "bytes"
);
quantity!(
    /// A duration in seconds.
    Seconds,
    "s"
);
quantity!(
    /// A compute throughput in FLOP per second.
    FlopRate,
    "FLOP/s"
);
quantity!(
    /// A data throughput in bytes per second.
    ByteRate,
    "bytes/s"
);

quantity!(
    /// Energy in joules.
    Joules,
    "J"
);
quantity!(
    /// Power in watts.
    Watts,
    "W"
);
quantity!(
    /// A training or inference throughput in samples per second.
    SampleRate,
    "samples/s"
);

impl Joules {
    /// From joules.
    pub const fn new(joules: f64) -> Self {
        Self(joules)
    }

    /// In kilowatt-hours.
    pub fn as_kwh(self) -> f64 {
        self.0 / 3.6e6
    }
}

impl Watts {
    /// From watts.
    pub const fn new(watts: f64) -> Self {
        Self(watts)
    }
}

impl SampleRate {
    /// From samples per second.
    pub const fn new(rate: f64) -> Self {
        Self(rate)
    }
}

impl Mul<Seconds> for Watts {
    type Output = Joules;
    fn mul(self, time: Seconds) -> Joules {
        Joules(self.0 * time.0)
    }
}

impl Flops {
    /// From a raw FLOP count.
    pub const fn new(flops: f64) -> Self {
        Self(flops)
    }

    /// From an exact integer count.
    #[allow(clippy::cast_precision_loss)] // counts stay far below 2^53 for any real model
    pub const fn from_count(flops: u64) -> Self {
        Self(flops as f64)
    }

    /// In giga-FLOP (10^9).
    pub fn as_gflop(self) -> f64 {
        self.0 / GIGA
    }
}

impl Bytes {
    /// From a raw byte count.
    pub const fn new(bytes: f64) -> Self {
        Self(bytes)
    }

    /// From an exact integer count.
    #[allow(clippy::cast_precision_loss)]
    pub const fn from_count(bytes: u64) -> Self {
        Self(bytes as f64)
    }

    /// From decimal gigabytes (10^9 bytes).
    pub fn from_gb(gb: f64) -> Self {
        Self(gb * GIGA)
    }

    /// From binary gibibytes (2^30 bytes).
    pub fn from_gib(gib: f64) -> Self {
        Self(gib * GIB)
    }

    /// From binary mebibytes (2^20 bytes).
    pub fn from_mib(mib: f64) -> Self {
        Self(mib * MIB)
    }

    /// From binary kibibytes (2^10 bytes).
    pub fn from_kib(kib: f64) -> Self {
        Self(kib * KIB)
    }

    /// From decimal terabytes (10^12 bytes).
    pub fn from_tb(tb: f64) -> Self {
        Self(tb * TERA)
    }

    /// In binary gibibytes.
    pub fn as_gib(self) -> f64 {
        self.0 / GIB
    }
}

impl Seconds {
    /// From seconds.
    pub const fn new(seconds: f64) -> Self {
        Self(seconds)
    }
}

impl FlopRate {
    /// From FLOP per second.
    pub const fn new(rate: f64) -> Self {
        Self(rate)
    }

    /// From tera-FLOP per second (10^12).
    pub fn from_tflops(tflops: f64) -> Self {
        Self(tflops * TERA)
    }

    /// In tera-FLOP per second.
    pub fn as_tflops(self) -> f64 {
        self.0 / TERA
    }
}

impl ByteRate {
    /// From bytes per second.
    pub const fn new(rate: f64) -> Self {
        Self(rate)
    }

    /// From decimal gigabytes per second (10^9 bytes/s), the unit of datasheets.
    pub fn from_gbs(gbs: f64) -> Self {
        Self(gbs * GIGA)
    }

    /// In decimal gigabytes per second.
    pub fn as_gbs(self) -> f64 {
        self.0 / GIGA
    }
}

impl Div<FlopRate> for Flops {
    type Output = Seconds;
    fn div(self, rate: FlopRate) -> Seconds {
        Seconds(self.0 / rate.0)
    }
}

impl Div<ByteRate> for Bytes {
    type Output = Seconds;
    fn div(self, rate: ByteRate) -> Seconds {
        Seconds(self.0 / rate.0)
    }
}

impl Div<Seconds> for Flops {
    type Output = FlopRate;
    fn div(self, time: Seconds) -> FlopRate {
        FlopRate(self.0 / time.0)
    }
}

impl Div<Seconds> for Bytes {
    type Output = ByteRate;
    fn div(self, time: Seconds) -> ByteRate {
        ByteRate(self.0 / time.0)
    }
}

/// Arithmetic intensity: FLOP per byte.
impl Div<Bytes> for Flops {
    type Output = f64;
    fn div(self, bytes: Bytes) -> f64 {
        self.0 / bytes.0
    }
}

/// Machine balance: FLOP per byte at which a device turns compute-bound.
impl Div<ByteRate> for FlopRate {
    type Output = f64;
    fn div(self, bw: ByteRate) -> f64 {
        self.0 / bw.0
    }
}

/// Formats a value with an SI prefix and a unit, e.g. `7.25 G` + `FLOP`.
fn si(value: f64, unit: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let abs = value.abs();
    let (scaled, prefix) = if abs >= TERA * KILO {
        (value / (TERA * KILO), "P")
    } else if abs >= TERA {
        (value / TERA, "T")
    } else if abs >= GIGA {
        (value / GIGA, "G")
    } else if abs >= MEGA {
        (value / MEGA, "M")
    } else if abs >= KILO {
        (value / KILO, "k")
    } else {
        (value, "")
    };
    let precision = f.precision().unwrap_or(3);
    write!(f, "{scaled:.precision$} {prefix}{unit}")
}

impl fmt::Display for Flops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        si(self.0, "FLOP", f)
    }
}

impl fmt::Display for FlopRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        si(self.0, "FLOP/s", f)
    }
}

impl fmt::Display for ByteRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        si(self.0, "B/s", f)
    }
}

/// Bytes print in binary units (KiB, MiB, GiB), as memory capacities are quoted.
impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let abs = self.0.abs();
        let (scaled, unit) = if abs >= GIB * MIB {
            (self.0 / (GIB * MIB), "PiB")
        } else if abs >= GIB * KIB {
            (self.0 / (GIB * KIB), "TiB")
        } else if abs >= GIB {
            (self.0 / GIB, "GiB")
        } else if abs >= MIB {
            (self.0 / MIB, "MiB")
        } else if abs >= KIB {
            (self.0 / KIB, "KiB")
        } else {
            (self.0, "B")
        };
        let precision = f.precision().unwrap_or(3);
        write!(f, "{scaled:.precision$} {unit}")
    }
}

/// Seconds print with the most readable unit (s, ms, us, ns).
impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let abs = self.0.abs();
        let (scaled, unit) = if abs >= 2.0 * 86_400.0 {
            (self.0 / 86_400.0, "d")
        } else if abs >= 2.0 * 3600.0 {
            (self.0 / 3600.0, "h")
        } else if abs >= 2.0 * 60.0 {
            (self.0 / 60.0, "min")
        } else if abs >= 1.0 || abs == 0.0 {
            (self.0, "s")
        } else if abs >= 1e-3 {
            (self.0 * 1e3, "ms")
        } else if abs >= 1e-6 {
            (self.0 * 1e6, "us")
        } else {
            (self.0 * 1e9, "ns")
        };
        let precision = f.precision().unwrap_or(3);
        write!(f, "{scaled:.precision$} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flops_over_rate_is_seconds() {
        let t = Flops::new(2e12) / FlopRate::from_tflops(1.0);
        assert_eq!(t, Seconds::new(2.0));
    }

    #[test]
    fn bytes_over_rate_is_seconds() {
        let t = Bytes::from_gb(900.0) / ByteRate::from_gbs(900.0);
        assert_eq!(t, Seconds::new(1.0));
    }

    #[test]
    fn decimal_and_binary_constructors_differ() {
        assert_eq!(Bytes::from_gb(1.0).value(), 1e9);
        assert_eq!(Bytes::from_gib(1.0).value(), 1_073_741_824.0);
        assert_eq!(Bytes::from_mib(1.0).value(), 1_048_576.0);
    }

    #[test]
    fn machine_balance_of_v100_fp16_tensor_matches_paper() {
        // [004] §III-B: 125 TFLOP/s over 900 GB/s is "approximately 138 FP16 FLOPs per byte".
        let balance = FlopRate::from_tflops(125.0) / ByteRate::from_gbs(900.0);
        assert!((balance - 138.9).abs() < 0.1, "{balance}");
    }

    #[test]
    fn display_uses_si_and_binary_prefixes() {
        assert_eq!(Flops::new(7.25e9).to_string(), "7.250 GFLOP");
        assert_eq!(Bytes::from_gib(1.5).to_string(), "1.500 GiB");
        assert_eq!(Seconds::new(0.0021).to_string(), "2.100 ms");
        assert_eq!(Seconds::new(90.0).to_string(), "90.000 s");
        assert_eq!(Seconds::new(180.0).to_string(), "3.000 min");
        assert_eq!(Seconds::new(5.5 * 3600.0).to_string(), "5.500 h");
        assert_eq!(format!("{:.1}", ByteRate::from_gbs(900.0)), "900.0 GB/s");
    }

    #[test]
    fn quantities_serialise_as_bare_numbers() {
        let json = serde_json_free_roundtrip(Bytes::new(12.0));
        assert_eq!(json, "12.0");
    }

    fn serde_json_free_roundtrip(b: Bytes) -> String {
        // The toml serializer needs a table at the top level; wrap and read back the value.
        #[derive(Serialize)]
        struct W {
            b: Bytes,
        }
        let text = toml::to_string(&W { b }).expect("serialise");
        text.trim().trim_start_matches("b = ").to_owned()
    }
}
