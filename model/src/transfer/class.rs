//! The classes of the transferred kernel model: which set of coefficients times a kernel,
//! named as model files, kernel sets and reports name them (`gemm`, `conv-gemm`,
//! `gemm-tensor-16`, `conv-depthwise-forward-fp16`, `relu`).
//!
//! A class is a value of [`Class`] everywhere in the code; its name is read once, where a
//! file is (a model file's `class.name`, a kernel set's `op` column), and an unknown name is
//! an error there.

use std::cmp::Ordering;
use std::fmt;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::kernels::KernelPass;
use crate::precision::NumberFormat;

/// The features of a GEMM-like kernel, in order.
pub const GEMM_FEATURES: [&str; 6] = ["launch", "tiled", "waves", "l2", "hbm", "filters"];

/// The features of a vector kernel, in order.
pub const VECTOR_FEATURES: [&str; 4] = ["launch", "l2", "hbm", "elements"];

/// The features of a depthwise convolution ([`Class::Depthwise`]), in order: the launch, its
/// bytes (input, filters and output once each) at the device's memory bandwidth, seconds,
/// and its multiply-adds at one per SM per clock cycle, seconds.
pub const DEPTHWISE_FEATURES: [&str; 3] = ["launch", "hbm", "macs"];

/// Every class with its name in the order of their names, and each class's place in that
/// order by its index ([`Class::table`]).
type Table = (Vec<(Class, String)>, Vec<usize>);

/// A class of the transferred kernel model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Class {
    /// An FP32 matrix class: `gemm`, `conv` or `conv-gemm`.
    Matrix(Matrix),
    /// A product of a kernel set (`bmm`, `linear`), fitted and timed as `gemm`
    /// ([`Class::timed_by`]).
    Product(Product),
    /// A vector op of a kernel set (`relu`, `add`, `ln`, ...).
    Vector(VectorOp),
    /// A matrix class on tensor cores at a format's rate (`gemm-tensor-16`,
    /// `conv-gemm-tensor-tf32`): it scales its FP32 class ([`Class::base`]).
    Tensor(Matrix, TensorRate),
    /// A depthwise convolution's pass in a format (`conv-depthwise-forward-fp16`).
    ///
    /// Libraries run depthwise convolutions with kernels of their own, a product per channel
    /// that no GEMM or Winograd class describes, whose speed differs by format and pass far
    /// more than the units' peaks do (cuDNN 9 on a GH100, channels-last: 1.5-2 TB/s in
    /// fp16, under 0.1 TB/s in bf16), so each format and pass is a class, fitted on kernel
    /// records.
    Depthwise(KernelPass, NumberFormat),
}

/// An FP32 matrix class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Matrix {
    /// Every product of the data, batched and linear layers (`gemm`).
    Gemm,
    /// 2-D 3 x 3 forward convolutions of stride 1, the kind NeuSight measured, most of them
    /// run as Winograd kernels (`conv`).
    Conv,
    /// Convolutions run as implicit GEMMs (`conv-gemm`): every other kind, and every one on
    /// tensor cores.
    ConvGemm,
}

/// A product as a kernel set names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Product {
    /// A batched product (`torch.bmm`).
    Bmm,
    /// A linear layer (`torch.nn.Linear`, `addmm`).
    Linear,
}

/// A vector op as a kernel set names it: a unary op, a binary op, or its scalar form
/// (`addu`: `x + c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VectorOp {
    /// Sum of two tensors.
    Add,
    /// A tensor plus a scalar.
    Addu,
    /// Quotient of two tensors.
    Div,
    /// A tensor over a scalar.
    Divu,
    /// GELU.
    Gelu,
    /// Layer norm.
    Ln,
    /// Product of two tensors.
    Mul,
    /// A tensor times a scalar.
    Mulu,
    /// A tensor to a tensor's power.
    Pow,
    /// A tensor to a scalar power.
    Powu,
    /// ReLU.
    Relu,
    /// Softmax.
    Softmax,
    /// Tanh.
    Tanh,
}

/// The rate a tensor-core class runs at: FP16 and BF16 run at one rate on the same units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorRate {
    /// FP16 and BF16 (`16`).
    Half,
    /// TF32.
    Tf32,
    /// FP32 on matrix units (AMD's).
    Fp32,
    /// FP64.
    Fp64,
    /// FP8.
    Fp8,
}

impl Matrix {
    /// Every matrix class.
    pub const ALL: [Matrix; 3] = [Matrix::Gemm, Matrix::Conv, Matrix::ConvGemm];

    /// Its name.
    pub const fn name(self) -> &'static str {
        match self {
            Matrix::Gemm => "gemm",
            Matrix::Conv => "conv",
            Matrix::ConvGemm => "conv-gemm",
        }
    }
}

impl Product {
    /// Every product.
    pub const ALL: [Product; 2] = [Product::Bmm, Product::Linear];

    /// Its name.
    pub const fn name(self) -> &'static str {
        match self {
            Product::Bmm => "bmm",
            Product::Linear => "linear",
        }
    }
}

impl VectorOp {
    /// Every vector op.
    pub const ALL: [VectorOp; 13] = [
        VectorOp::Add,
        VectorOp::Addu,
        VectorOp::Div,
        VectorOp::Divu,
        VectorOp::Gelu,
        VectorOp::Ln,
        VectorOp::Mul,
        VectorOp::Mulu,
        VectorOp::Pow,
        VectorOp::Powu,
        VectorOp::Relu,
        VectorOp::Softmax,
        VectorOp::Tanh,
    ];

    /// Its name.
    pub const fn name(self) -> &'static str {
        match self {
            VectorOp::Add => "add",
            VectorOp::Addu => "addu",
            VectorOp::Div => "div",
            VectorOp::Divu => "divu",
            VectorOp::Gelu => "gelu",
            VectorOp::Ln => "ln",
            VectorOp::Mul => "mul",
            VectorOp::Mulu => "mulu",
            VectorOp::Pow => "pow",
            VectorOp::Powu => "powu",
            VectorOp::Relu => "relu",
            VectorOp::Softmax => "softmax",
            VectorOp::Tanh => "tanh",
        }
    }

    /// Arrays it reads and writes: a binary op reads two and writes one; a unary op, a
    /// scalar form, softmax and layer norm read one and write one.
    pub const fn arrays(self) -> u64 {
        match self {
            VectorOp::Add | VectorOp::Mul | VectorOp::Div | VectorOp::Pow => 3,
            _ => 2,
        }
    }
}

impl TensorRate {
    /// Every rate.
    pub const ALL: [TensorRate; 5] = [
        TensorRate::Half,
        TensorRate::Tf32,
        TensorRate::Fp32,
        TensorRate::Fp64,
        TensorRate::Fp8,
    ];

    /// The rate of a format.
    pub const fn of(format: NumberFormat) -> TensorRate {
        match format {
            NumberFormat::Fp16 | NumberFormat::Bf16 => TensorRate::Half,
            NumberFormat::Tf32 => TensorRate::Tf32,
            NumberFormat::Fp32 => TensorRate::Fp32,
            NumberFormat::Fp64 => TensorRate::Fp64,
            NumberFormat::Fp8 => TensorRate::Fp8,
        }
    }

    /// Its name in a class's (`16`, `tf32`).
    pub const fn name(self) -> &'static str {
        match self {
            TensorRate::Half => "16",
            TensorRate::Tf32 => "tf32",
            TensorRate::Fp32 => "fp32",
            TensorRate::Fp64 => "fp64",
            TensorRate::Fp8 => "fp8",
        }
    }
}

/// The formats a depthwise class may be of.
const DEPTHWISE_FORMATS: [NumberFormat; 6] = [
    NumberFormat::Fp64,
    NumberFormat::Fp32,
    NumberFormat::Tf32,
    NumberFormat::Fp16,
    NumberFormat::Bf16,
    NumberFormat::Fp8,
];

/// The passes a depthwise class may be of.
const DEPTHWISE_PASSES: [KernelPass; 4] = [
    KernelPass::Forward,
    KernelPass::BackwardData,
    KernelPass::BackwardFilter,
    KernelPass::Backward,
];

impl Class {
    /// Every product of the data (`gemm`).
    pub const GEMM: Class = Class::Matrix(Matrix::Gemm);
    /// 2-D 3 x 3 forward convolutions of stride 1 (`conv`).
    pub const CONV: Class = Class::Matrix(Matrix::Conv);
    /// Convolutions run as implicit GEMMs (`conv-gemm`).
    pub const CONV_GEMM: Class = Class::Matrix(Matrix::ConvGemm);

    /// How many classes there are: three matrix classes, two products, 13 vector ops, a
    /// tensor-core class per matrix class and rate, a depthwise class per pass and format.
    const COUNT: usize = 3 + 2 + 13 + 3 * 5 + 4 * 6;

    /// Its place among every class, one to one with `0..COUNT`.
    const fn index(self) -> usize {
        match self {
            Class::Matrix(m) => m as usize,
            Class::Product(p) => 3 + p as usize,
            Class::Vector(v) => 5 + v as usize,
            Class::Tensor(m, r) => 18 + 5 * m as usize + r as usize,
            Class::Depthwise(p, f) => 33 + 6 * p as usize + f as usize,
        }
    }

    /// Every class with its name, in the order of their names, and each class's place in
    /// that order by [`Class::index`].
    fn table() -> &'static Table {
        static TABLE: OnceLock<Table> = OnceLock::new();
        TABLE.get_or_init(|| {
            let mut all: Vec<(Class, String)> = Matrix::ALL
                .map(Class::Matrix)
                .into_iter()
                .chain(Product::ALL.map(Class::Product))
                .chain(VectorOp::ALL.map(Class::Vector))
                .chain(
                    Matrix::ALL
                        .into_iter()
                        .flat_map(|m| TensorRate::ALL.map(|r| Class::Tensor(m, r))),
                )
                .chain(
                    DEPTHWISE_PASSES
                        .into_iter()
                        .flat_map(|p| DEPTHWISE_FORMATS.map(|f| Class::Depthwise(p, f))),
                )
                .map(|c| (c, c.spelled()))
                .collect();
            all.sort_by(|a, b| a.1.cmp(&b.1));
            let mut rank = vec![0; Class::COUNT];
            for (i, (c, _)) in all.iter().enumerate() {
                rank[c.index()] = i;
            }
            (all, rank)
        })
    }

    /// Its name, written out.
    fn spelled(self) -> String {
        match self {
            Class::Matrix(m) => m.name().to_owned(),
            Class::Product(p) => p.name().to_owned(),
            Class::Vector(v) => v.name().to_owned(),
            Class::Tensor(m, r) => format!("{}-tensor-{}", m.name(), r.name()),
            Class::Depthwise(p, f) => format!("conv-depthwise-{}-{}", p.name(), f.name()),
        }
    }

    /// Its place among every class's names ([`Class::table`]).
    fn rank(self) -> usize {
        Class::table().1[self.index()]
    }

    /// Its name in model files, kernel sets and reports.
    pub fn name(self) -> &'static str {
        &Class::table().0[self.rank()].1
    }

    /// The class named `name`.
    pub fn parse(name: &str) -> Option<Class> {
        Class::table()
            .0
            .iter()
            .find(|(_, n)| n == name)
            .map(|(c, _)| *c)
    }

    /// The class of a depthwise convolution's pass in a format.
    pub const fn depthwise(pass: KernelPass, format: NumberFormat) -> Class {
        Class::Depthwise(pass, format)
    }

    /// The class whose model times this one: `gemm` for a product of a kernel set, itself
    /// for any other.
    ///
    /// A linear layer runs the same library GEMMs as a batched product, so every product of
    /// a set (`bmm` and `linear`) is fitted together as `gemm`, and every GEMM is timed by
    /// it. Leaving one GPU out, the pooled fit predicts the held-out GPUs' linear layers at a
    /// median |error| of 21 % (bias +3 %), where a fit on the batched products alone
    /// predicted them at 26 % (-16 %); the batched products lose half a point.
    pub const fn timed_by(self) -> Class {
        match self {
            Class::Product(_) => Class::GEMM,
            other => other,
        }
    }

    /// The FP32 class a tensor-core class scales (`conv-gemm` of `conv-gemm-tensor-16`); a
    /// class that is not one is its own.
    pub const fn base(self) -> Class {
        match self {
            Class::Tensor(m, _) => Class::Matrix(m),
            other => other,
        }
    }

    /// The tensor-core class of a matrix class in a format (`gemm` in fp16:
    /// `gemm-tensor-16`); `None` for a class that is not a matrix class.
    pub const fn on_tensor_cores(self, format: NumberFormat) -> Option<Class> {
        match self {
            Class::Matrix(m) => Some(Class::Tensor(m, TensorRate::of(format))),
            _ => None,
        }
    }

    /// Whether it is a tensor-core class: one that scales its FP32 class ([`Class::base`]),
    /// fitted on scaled work rather than coefficients of its own.
    pub const fn is_tensor(self) -> bool {
        matches!(self, Class::Tensor(..))
    }

    /// Whether it is a depthwise convolution class.
    pub const fn is_depthwise(self) -> bool {
        matches!(self, Class::Depthwise(..))
    }

    /// The vector op it is, if it is one.
    pub const fn vector(self) -> Option<VectorOp> {
        match self {
            Class::Vector(v) => Some(v),
            _ => None,
        }
    }

    /// Whether its time is a GEMM's (a matrix, product or tensor-core class), whose
    /// features are [`GEMM_FEATURES`].
    pub const fn is_gemm_like(self) -> bool {
        matches!(
            self,
            Class::Matrix(_) | Class::Product(_) | Class::Tensor(..)
        )
    }

    /// The names of its features, in order.
    pub const fn features(self) -> &'static [&'static str] {
        match self {
            Class::Matrix(_) | Class::Product(_) | Class::Tensor(..) => &GEMM_FEATURES,
            Class::Depthwise(..) => &DEPTHWISE_FEATURES,
            Class::Vector(_) => &VECTOR_FEATURES,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Classes order by name, as reports list them.
impl Ord for Class {
    fn cmp(&self, other: &Class) -> Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl PartialOrd for Class {
    fn partial_cmp(&self, other: &Class) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What reading an unknown class name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownClass(pub String);

impl fmt::Display for UnknownClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is no kernel class; one of `gemm`, `conv`, `conv-gemm`, `bmm`, `linear`, a \
             vector op ({}), a tensor-core class (`gemm-tensor-16`, `conv-gemm-tensor-tf32`, \
             ...) or a depthwise one (`conv-depthwise-forward-fp16`, ...)",
            self.0,
            VectorOp::ALL.map(VectorOp::name).join(", ")
        )
    }
}

impl std::error::Error for UnknownClass {}

impl TryFrom<String> for Class {
    type Error = UnknownClass;

    fn try_from(name: String) -> Result<Class, UnknownClass> {
        Class::parse(&name).ok_or(UnknownClass(name))
    }
}

impl From<Class> for String {
    fn from(c: Class) -> String {
        c.name().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_reads_back_from_its_name_and_names_are_unique() {
        let (table, _) = Class::table();
        assert_eq!(table.len(), Class::COUNT);
        let mut indices: Vec<usize> = table.iter().map(|(c, _)| c.index()).collect();
        indices.sort_unstable();
        assert_eq!(indices, (0..Class::COUNT).collect::<Vec<_>>());
        for (c, name) in table {
            assert_eq!(Class::parse(name), Some(*c), "{name}");
            assert_eq!(c.name(), name);
        }
        let mut names: Vec<&str> = table.iter().map(|(_, n)| n.as_str()).collect();
        names.dedup();
        assert_eq!(names.len(), table.len());
    }

    #[test]
    fn names_are_those_of_the_model_files() {
        assert_eq!(Class::CONV_GEMM.name(), "conv-gemm");
        let half = Class::GEMM.on_tensor_cores(NumberFormat::Bf16).unwrap();
        assert_eq!(half.name(), "gemm-tensor-16");
        assert_eq!(half.base(), Class::GEMM);
        assert!(half.is_tensor() && !Class::CONV_GEMM.is_tensor());
        let dw = Class::depthwise(KernelPass::BackwardData, NumberFormat::Fp16);
        assert_eq!(dw.name(), "conv-depthwise-backward-data-fp16");
        assert_eq!(Class::Product(Product::Linear).timed_by(), Class::GEMM);
        assert_eq!(
            Class::parse("conv-tensor-tf32").map(Class::base),
            Some(Class::CONV)
        );
        assert!(Class::parse("relu-tensor-16").is_none() && Class::parse("sub").is_none());
    }

    #[test]
    fn classes_order_by_name() {
        let mut classes = [
            Class::Vector(VectorOp::Add),
            Class::CONV_GEMM,
            Class::GEMM,
            Class::CONV,
            Class::depthwise(KernelPass::Forward, NumberFormat::Fp16),
        ];
        classes.sort();
        let names: Vec<&str> = classes.iter().map(|c| c.name()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
    }

    #[test]
    fn an_unknown_name_is_an_error_that_lists_the_classes() {
        let e = Class::try_from("lstm".to_owned()).unwrap_err().to_string();
        assert!(
            e.contains("`lstm` is no kernel class") && e.contains("softmax"),
            "{e}"
        );
    }
}
