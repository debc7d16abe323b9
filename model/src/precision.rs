//! Training precisions and what each implies for bytes per element and for which peak a
//! device runs at.
//!
//! Mixed precision follows the recipe of Micikevicius et al., *Mixed Precision Training*
//! (ICLR 2018): 16-bit weights, activations and gradients for compute, plus an FP32 master
//! copy of the weights that the optimizer updates (its state is FP32 too).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The precision a training step runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// FP32 everywhere; matrix ops on FP32 units (vector units, or FP32 matrix units where a
    /// device has them, e.g. AMD MFMA).
    Fp32,
    /// FP32 storage; matrix ops on TF32 tensor cores.
    Tf32,
    /// Mixed precision with FP16 compute (FP32 master weights and optimizer state).
    AmpFp16,
    /// Mixed precision with BF16 compute (FP32 master weights and optimizer state).
    AmpBf16,
    /// BF16 mixed precision whose linear layers multiply in FP8 (Transformer Engine's
    /// recipe: E4M3 forward, E5M2 gradients, per-tensor scales; Micikevicius et al., *FP8
    /// Formats for Deep Learning*, arXiv:2209.05433). Which layers run FP8 is the software
    /// stack's (`[precision] fp8`); the others run BF16.
    Fp8,
}

/// The numeric format a peak is quoted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NumberFormat {
    /// IEEE double.
    Fp64,
    /// IEEE single.
    Fp32,
    /// NVIDIA TensorFloat-32 (tensor cores only).
    Tf32,
    /// IEEE half.
    Fp16,
    /// bfloat16.
    Bf16,
    /// 8-bit floating point (E4M3/E5M2; tensor cores only).
    Fp8,
}

impl Precision {
    /// Every precision, in the order they are listed to users.
    pub const ALL: [Precision; 5] = [
        Precision::Fp32,
        Precision::Tf32,
        Precision::AmpFp16,
        Precision::AmpBf16,
        Precision::Fp8,
    ];

    /// The name used on the command line and in files.
    pub const fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::AmpFp16 => "amp-fp16",
            Precision::AmpBf16 => "amp-bf16",
            Precision::Fp8 => "fp8",
        }
    }

    /// Bytes per element of activations, activation gradients and the compute copy of the
    /// weights and their gradients.
    pub const fn compute_bytes(self) -> u64 {
        match self {
            Precision::Fp32 | Precision::Tf32 => 4,
            Precision::AmpFp16 | Precision::AmpBf16 | Precision::Fp8 => 2,
        }
    }

    /// Whether an FP32 master copy of the weights is kept besides the compute copy.
    pub const fn has_master_weights(self) -> bool {
        matches!(
            self,
            Precision::AmpFp16 | Precision::AmpBf16 | Precision::Fp8
        )
    }

    /// The precision of the layers a stack does not run in a faster format: BF16 mixed
    /// precision for FP8 training, else itself.
    pub const fn base(self) -> Precision {
        match self {
            Precision::Fp8 => Precision::AmpBf16,
            p => p,
        }
    }

    /// The format matrix ops (convolution, dense) compute in (under FP8 training, the
    /// stack's FP8 layers; the others compute in [`Precision::base`]'s).
    pub const fn matrix_format(self) -> NumberFormat {
        match self {
            Precision::Fp32 => NumberFormat::Fp32,
            Precision::Tf32 => NumberFormat::Tf32,
            Precision::AmpFp16 => NumberFormat::Fp16,
            Precision::AmpBf16 => NumberFormat::Bf16,
            Precision::Fp8 => NumberFormat::Fp8,
        }
    }

    /// The format element-wise, pooling and normalisation ops compute in.
    pub const fn vector_format(self) -> NumberFormat {
        match self {
            Precision::Fp32 | Precision::Tf32 => NumberFormat::Fp32,
            Precision::AmpFp16 => NumberFormat::Fp16,
            Precision::AmpBf16 | Precision::Fp8 => NumberFormat::Bf16,
        }
    }
}

impl NumberFormat {
    /// Lower-case name, as used in data-file keys (`tflops_<name>` under `[peak]`).
    pub const fn name(self) -> &'static str {
        match self {
            NumberFormat::Fp64 => "fp64",
            NumberFormat::Fp32 => "fp32",
            NumberFormat::Tf32 => "tf32",
            NumberFormat::Fp16 => "fp16",
            NumberFormat::Bf16 => "bf16",
            NumberFormat::Fp8 => "fp8",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for NumberFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error for an unknown precision name; lists the valid ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPrecision(pub String);

impl fmt::Display for UnknownPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let valid: Vec<&str> = Precision::ALL.iter().map(|p| p.name()).collect();
        write!(
            f,
            "unknown precision `{}`; valid precisions: {}",
            self.0,
            valid.join(", ")
        )
    }
}

impl std::error::Error for UnknownPrecision {}

impl FromStr for Precision {
    type Err = UnknownPrecision;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Precision::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPrecision(s.to_owned()))
    }
}

/// The number format gradients travel in during the allreduce: FP32, or FP16 (gradient
/// compression).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GradientPrecision {
    /// 4 bytes per parameter.
    Fp32,
    /// 2 bytes per parameter.
    Fp16,
}

impl GradientPrecision {
    /// Bytes per parameter on the wire.
    pub const fn bytes(self) -> u64 {
        match self {
            GradientPrecision::Fp32 => 4,
            GradientPrecision::Fp16 => 2,
        }
    }
}

impl FromStr for GradientPrecision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fp32" => Ok(GradientPrecision::Fp32),
            "fp16" => Ok(GradientPrecision::Fp16),
            _ => Err(format!(
                "unknown gradient precision `{s}`; valid: fp32, fp16"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradient_precisions_have_their_width() {
        assert_eq!(
            "fp32".parse::<GradientPrecision>().map(|g| g.bytes()),
            Ok(4)
        );
        assert_eq!(
            "fp16".parse::<GradientPrecision>().map(|g| g.bytes()),
            Ok(2)
        );
        assert!(
            "bf8"
                .parse::<GradientPrecision>()
                .unwrap_err()
                .contains("fp32, fp16")
        );
    }

    #[test]
    fn names_round_trip() {
        for p in Precision::ALL {
            assert_eq!(p.name().parse::<Precision>(), Ok(p));
        }
    }

    #[test]
    fn unknown_precision_lists_valid_ones() {
        let err = "fp4".parse::<Precision>().unwrap_err().to_string();
        assert!(err.contains("fp32, tf32, amp-fp16, amp-bf16, fp8"), "{err}");
    }

    #[test]
    fn mixed_precision_halves_activation_bytes_and_keeps_master_weights() {
        assert_eq!(Precision::AmpFp16.compute_bytes(), 2);
        assert!(Precision::AmpBf16.has_master_weights());
        assert!(!Precision::Tf32.has_master_weights());
        assert_eq!(Precision::Tf32.compute_bytes(), 4);
    }
}
