//! Built-in workloads: CosmoFlow (`cosmoflow`, v1.0+ with kernel 3; `cosmoflow-v07`, kernel
//! 2), DeepCAM (`deepcam`) and ResNet-50 v1.5 (`resnet50`), each parametric in input
//! spatial size and a width multiplier so that problem size can be scaled \[000\]; Swin-T
//! (`swin-t`, whose windows need a side of a multiple of 224); the
//! transformers `bert-large`, `gpt2-large`, `gpt3-xl`, `gpt3-2.7b`, `gpt3-175b`, `opt-1.3b`,
//! `llama3-8b`, `llama3-70b` and `mixtral-8x7b`
//! ([`transformer`], from their configurations, parametric in sequence length and width); and
//! a graph network, `gin` (nodes and width).
//!
//! Layer names, shapes, parameter and MAC counts match the reference tables in
//! `data/evidence/reference/` (checked by this module's tests). Builders add what the tables leave
//! out: the input node, the loss, and CosmoFlow's output `tanh`, which the table folds into
//! `dense_out`.

mod cosmoflow;
mod deepcam;
mod gnn;
mod naming;
mod resnet;
mod swin;
pub mod transformer;

use crate::error::{Error, Result};
use crate::graph::{Graph, LayerError};
use naming::Scale;

/// Largest accepted width multiplier.
pub const MAX_WIDTH: f64 = 16.0;
/// Largest accepted input extent along one spatial dimension.
pub const MAX_INPUT_EXTENT: usize = 16_384;

/// How to scale a built-in workload.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildOptions {
    /// Input spatial size; `None` for the reference size. One value is used for every
    /// spatial dimension.
    pub input_size: Option<Vec<usize>>,
    /// Multiplier on every inner channel count (input channels and outputs stay fixed).
    pub width: f64,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            input_size: None,
            width: 1.0,
        }
    }
}

/// A built-in workload.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// Name on the command line.
    pub name: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Reference input shape, channels first.
    pub input: &'static [usize],
    /// Whether the input is a sequence of token ids `[seq]` (the input size is its length)
    /// rather than a feature map `[C, spatial...]` (the input size is its spatial extent).
    pub sequence: bool,
    build: fn(&[usize], &Scale) -> Result<Graph, LayerError>,
    /// Extra constraint on the input size, checked before building.
    check_input: fn(&[usize]) -> Result<(), String>,
}

/// A built-in transformer: its configuration's file, and the builder's and input check's
/// functions.
macro_rules! transformer {
    ($name:literal, $file:literal, $seq:literal, $description:literal) => {{
        fn config() -> transformer::Config {
            let (_, text) = TRANSFORMER_CONFIGS
                .iter()
                .find(|(name, _)| *name == $name)
                .unwrap_or_else(|| unreachable!("every built-in transformer has a file"));
            transformer::Config::from_toml(text, concat!("data/catalog/transformers/", $file))
                .unwrap_or_else(|e| unreachable!("built-in configurations are tested: {e}"))
        }
        fn build(seq: &[usize], w: &Scale) -> Result<Graph, LayerError> {
            transformer::build($name, &config(), seq[0], w.0)
        }
        fn check(seq: &[usize]) -> Result<(), String> {
            let max = config().max_position_embeddings;
            if seq[0] > max {
                return Err(format!(
                    "sequences of {} tokens exceed the model's {max} positions",
                    seq[0]
                ));
            }
            Ok(())
        }
        Builtin {
            name: $name,
            description: $description,
            input: &[$seq],
            sequence: true,
            build,
            check_input: check,
        }
    }};
}

/// The built-in transformers' configuration files (`data/catalog/transformers/`).
const TRANSFORMER_CONFIGS: [(&str, &str); 10] = [
    (
        "gpt2",
        include_str!("../../../data/catalog/transformers/gpt2.config.toml"),
    ),
    (
        "bert-large",
        include_str!("../../../data/catalog/transformers/bert-large.config.toml"),
    ),
    (
        "gpt2-large",
        include_str!("../../../data/catalog/transformers/gpt2-large.config.toml"),
    ),
    (
        "gpt3-xl",
        include_str!("../../../data/catalog/transformers/gpt3-xl.config.toml"),
    ),
    (
        "gpt3-2.7b",
        include_str!("../../../data/catalog/transformers/gpt3-2.7b.config.toml"),
    ),
    (
        "gpt3-175b",
        include_str!("../../../data/catalog/transformers/gpt3-175b.config.toml"),
    ),
    (
        "opt-1.3b",
        include_str!("../../../data/catalog/transformers/opt-1.3b.config.toml"),
    ),
    (
        "llama3-8b",
        include_str!("../../../data/catalog/transformers/llama3-8b.config.toml"),
    ),
    (
        "llama3-70b",
        include_str!("../../../data/catalog/transformers/llama3-70b.config.toml"),
    ),
    (
        "mixtral-8x7b",
        include_str!("../../../data/catalog/transformers/mixtral-8x7b.config.toml"),
    ),
];

/// Every built-in workload.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "cosmoflow",
        description: "CosmoFlow v1.0+ (MLPerf HPC reference): 3-D CNN, kernel 3, 4x128^3 input",
        input: &[4, 128, 128, 128],
        sequence: false,
        build: cosmoflow::build_v1,
        check_input: cosmoflow::check_input,
    },
    Builtin {
        name: "cosmoflow-v07",
        description: "CosmoFlow v0.7 (MLPerf HPC v0.7 reference): 3-D CNN, kernel 2, 4x128^3 input",
        input: &[4, 128, 128, 128],
        sequence: false,
        build: cosmoflow::build_v07,
        check_input: cosmoflow::check_input,
    },
    Builtin {
        name: "deepcam",
        description: "DeepCAM (MLPerf HPC reference): DeepLabv3+ with Xception, 16x768x1152 input",
        input: &[16, 768, 1152],
        sequence: false,
        build: deepcam::build,
        check_input: deepcam::check_input,
    },
    Builtin {
        name: "resnet50",
        description: "ResNet-50 v1.5 (torchvision layout), 3x224x224 input, 1000 classes",
        input: &[3, 224, 224],
        sequence: false,
        build: resnet::build,
        check_input: resnet::check_input,
    },
    Builtin {
        name: "swin-t",
        description: "Swin-T (torchvision layout): shifted-window vision transformer, 3x224x224 input, 28.3M parameters, 1000 classes",
        input: &[3, 224, 224],
        sequence: false,
        build: swin::build,
        check_input: swin::check_input,
    },
    transformer!(
        "bert-large",
        "bert-large.config.toml",
        512,
        "BERT-Large (Hugging Face BertForPreTraining): 24 layers, hidden 1024, 336M parameters, 512 tokens"
    ),
    transformer!(
        "gpt2",
        "gpt2.config.toml",
        1024,
        "GPT-2 (Hugging Face GPT2LMHeadModel): 12 layers, hidden 768, 124M parameters, 1024 tokens"
    ),
    transformer!(
        "gpt2-large",
        "gpt2-large.config.toml",
        1024,
        "GPT-2 Large (Hugging Face GPT2LMHeadModel): 36 layers, hidden 1280, 774M parameters, 1024 tokens"
    ),
    transformer!(
        "gpt3-xl",
        "gpt3-xl.config.toml",
        2048,
        "GPT-3 XL (Brown et al. 2020) as GPT-2: 24 layers, hidden 2048, 1.3B parameters, 2048 tokens"
    ),
    transformer!(
        "gpt3-2.7b",
        "gpt3-2.7b.config.toml",
        2048,
        "GPT-3 2.7B (Brown et al. 2020) as GPT-2: 32 layers, hidden 2560, 2.7B parameters, 2048 tokens"
    ),
    transformer!(
        "gpt3-175b",
        "gpt3-175b.config.toml",
        2048,
        "GPT-3 175B (Brown et al. 2020) as GPT-2: 96 layers, hidden 12288, 175B parameters, 2048 tokens (MLPerf's gpt3)"
    ),
    transformer!(
        "opt-1.3b",
        "opt-1.3b.config.toml",
        2048,
        "OPT-1.3B (Hugging Face OPTForCausalLM): 24 layers, hidden 2048, 1.3B parameters, 2048 tokens"
    ),
    transformer!(
        "llama3-8b",
        "llama3-8b.config.toml",
        8192,
        "Llama 3 8B (Hugging Face LlamaForCausalLM): 32 layers, hidden 4096, 8 key-value heads, 8.0B parameters, 8192 tokens"
    ),
    transformer!(
        "llama3-70b",
        "llama3-70b.config.toml",
        8192,
        "Llama 3 70B (Hugging Face LlamaForCausalLM): 80 layers, hidden 8192, 8 key-value heads, 70.6B parameters, 8192 tokens"
    ),
    transformer!(
        "mixtral-8x7b",
        "mixtral-8x7b.config.toml",
        4096,
        "Mixtral 8x7B (Hugging Face MixtralForCausalLM): 32 layers, hidden 4096, 8 experts of which 2 a token, 46.7B parameters (12.9B active), 4096 tokens"
    ),
    Builtin {
        name: "gin",
        description: "A graph isomorphism network (Xu et al. 2019): 5 layers of 300, 16 features on 64 nodes of degree 8",
        input: &[16, 64],
        sequence: false,
        build: gnn::build,
        check_input: gnn::check_input,
    },
];

/// Names of the built-in workloads.
pub fn names() -> Vec<String> {
    BUILTINS.iter().map(|b| b.name.to_owned()).collect()
}

/// The built-in workload called `name`.
pub fn find(name: &str) -> Result<&'static Builtin> {
    BUILTINS
        .iter()
        .find(|b| b.name == name)
        .ok_or_else(|| Error::UnknownName {
            kind: "workload",
            name: name.to_owned(),
            valid: names(),
        })
}

/// Builds the built-in workload `name` with `options`.
pub fn build(name: &str, options: &BuildOptions) -> Result<Graph> {
    find(name)?.build(options)
}

impl Builtin {
    /// Builds this workload with `options`.
    pub fn build(&self, options: &BuildOptions) -> Result<Graph> {
        let w = options.width;
        if !w.is_finite() || w <= 0.0 || w > MAX_WIDTH {
            return Err(Error::argument(
                "width",
                w,
                format!("the width multiplier must be greater than 0 and at most {MAX_WIDTH}"),
            ));
        }
        let sized = if self.sequence {
            self.input
        } else {
            &self.input[1..]
        };
        let rank = sized.len();
        let spatial = match &options.input_size {
            None => sized.to_vec(),
            Some(s) if s.len() == 1 => vec![s[0]; rank],
            Some(s) if s.len() == rank => s.clone(),
            Some(s) => {
                return Err(Error::argument(
                    "input-size",
                    fmt_size(s),
                    format!(
                        "{} has {rank} spatial dimensions; give 1 or {rank} values",
                        self.name
                    ),
                ));
            }
        };
        if let Some(&bad) = spatial.iter().find(|&&d| d == 0 || d > MAX_INPUT_EXTENT) {
            return Err(Error::argument(
                "input-size",
                fmt_size(&spatial),
                format!("extent {bad} must be between 1 and {MAX_INPUT_EXTENT}"),
            ));
        }
        (self.check_input)(&spatial)
            .map_err(|m| Error::argument("input-size", fmt_size(&spatial), m))?;
        (self.build)(&spatial, &Scale(w)).map_err(|e| Error::Layer {
            location: format!("workload `{}`", self.name),
            layer: e.layer,
            message: e.message,
        })
    }
}

impl Builtin {
    /// The configuration of a built-in transformer; `None` for the others.
    pub fn transformer_config(&self) -> Option<transformer::Config> {
        TRANSFORMER_CONFIGS
            .iter()
            .find(|(name, _)| *name == self.name)
            .and_then(|(name, text)| transformer::Config::from_toml(text, name).ok())
    }
}

fn fmt_size(s: &[usize]) -> String {
    let parts: Vec<String> = s.iter().map(usize::to_string).collect();
    parts.join("x")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::cost;
    use crate::graph::{Graph, Op};
    use crate::precision::Precision;

    fn check_against_reference(workload: &str) {
        let c = crate::published::check_layers(workload).unwrap();
        assert!(
            c.mismatches.is_empty(),
            "{workload}:\n{}",
            c.mismatches.join("\n")
        );
        assert_eq!(c.layers, c.reference_layers, "{workload}: layer count");
        assert_eq!(c.params, c.reference_params, "{workload}: parameters");
        assert_eq!(c.macs_fwd, c.reference_macs_fwd, "{workload}: MACs");
    }

    #[test]
    fn cosmoflow_matches_reference_layer_by_layer() {
        check_against_reference("cosmoflow");
        let g = build("cosmoflow", &BuildOptions::default()).unwrap();
        assert_eq!(cost(&g, 1, Precision::Fp32).params, 8_907_556);
    }

    #[test]
    fn cosmoflow_v07_matches_reference_layer_by_layer() {
        check_against_reference("cosmoflow-v07");
        let g = build("cosmoflow-v07", &BuildOptions::default()).unwrap();
        assert_eq!(cost(&g, 1, Precision::Fp32).params, 5_597_604);
    }

    #[test]
    fn deepcam_matches_reference_layer_by_layer() {
        check_against_reference("deepcam");
        let g = build("deepcam", &BuildOptions::default()).unwrap();
        assert_eq!(cost(&g, 1, Precision::Fp32).params, 56_454_720);
    }

    /// Swin-T has torchvision's parameters and the forward FLOPs torch's
    /// `FlopCounterMode` counts (`data/evidence/reference/torchvision.toml`) exactly; its windows
    /// refuse a size they do not tile, and a non-square input.
    #[test]
    fn swin_t_has_torchs_counts() {
        let reference: toml::Table = toml::from_str(include_str!(
            "../../../data/evidence/reference/torchvision.toml"
        ))
        .unwrap();
        let g = build("swin-t", &BuildOptions::default()).unwrap();
        let c = cost(&g, 1, Precision::Fp32);
        let want = &reference["swin_t"];
        assert_eq!(c.params, want["params"].as_integer().unwrap() as u64);
        assert_eq!(
            2 * c.macs_fwd,
            want["forward_flops"].as_integer().unwrap() as u128
        );
        // Stage 4's 7 x 7 map is one window: no roll there, as torchvision sets it.
        let shifts: Vec<usize> = g
            .layers()
            .iter()
            .filter_map(|l| match &l.op {
                Op::Attention(a) => Some(a.shift),
                _ => None,
            })
            .collect();
        assert_eq!(shifts, [0, 3, 0, 3, 0, 3, 0, 3, 0, 3, 0, 0]);
        let big = BuildOptions {
            input_size: Some(vec![448]),
            ..BuildOptions::default()
        };
        assert!(build("swin-t", &big).is_ok());
        for side in [256, 200] {
            let o = BuildOptions {
                input_size: Some(vec![side]),
                ..BuildOptions::default()
            };
            let e = build("swin-t", &o).unwrap_err().to_string();
            assert!(e.contains("224"), "{e}");
        }
    }

    #[test]
    fn resnet50_matches_reference_layer_by_layer() {
        check_against_reference("resnet50");
        let g = build("resnet50", &BuildOptions::default()).unwrap();
        assert_eq!(cost(&g, 1, Precision::Fp32).params, 25_557_032);
    }

    #[test]
    fn published_mac_totals() {
        // reference/README.md: 34.431, 10.205, 327.669 and 4.089 GMAC per sample.
        for (name, gmac) in [
            ("cosmoflow", 34.431),
            ("cosmoflow-v07", 10.205),
            ("deepcam", 327.669),
            ("resnet50", 4.089),
        ] {
            let g = build(name, &BuildOptions::default()).unwrap();
            let macs = cost(&g, 1, Precision::Fp32).macs_fwd as f64 / 1e9;
            assert!(
                (macs - gmac).abs() < 0.0005,
                "{name}: {macs} GMAC, reference {gmac}"
            );
        }
    }

    #[test]
    fn input_size_and_width_rescale() {
        let small = BuildOptions {
            input_size: Some(vec![64]),
            width: 0.5,
        };
        let g = build("cosmoflow", &small).unwrap();
        assert_eq!(g.input_shape().dims(), &[4, 64, 64, 64]);
        let conv = &g.layers()[g.find("conv3d").unwrap()];
        assert_eq!(conv.output.dims(), &[16, 64, 64, 64]);
        let out = &g.layers()[g.find("dense_out").unwrap()];
        assert_eq!(out.output.dims(), &[4], "outputs do not scale with width");
    }

    #[test]
    fn bad_options_are_refused_with_the_reason() {
        let err = build(
            "deepcam",
            &BuildOptions {
                input_size: Some(vec![100, 100]),
                width: 1.0,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("multiple of 16"), "{err}");
        let err = build(
            "resnet50",
            &BuildOptions {
                input_size: None,
                width: 0.0,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("width = 0"), "{err}");
        let err = build(
            "cosmoflow",
            &BuildOptions {
                input_size: Some(vec![8]),
                width: 1.0,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("at least 32"), "{err}");
        let err = build(
            "cosmoflow",
            &BuildOptions {
                input_size: Some(vec![64, 64]),
                width: 1.0,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("give 1 or 3 values"), "{err}");
    }

    #[test]
    fn unknown_workload_lists_valid_names() {
        let err = build("bert", &BuildOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cosmoflow, cosmoflow-v07, deepcam, resnet50"),
            "{err}"
        );
    }

    /// A width multiplier `w` multiplies both channel counts of an inner dense convolution,
    /// so its FLOPs scale by `w^2`; a depthwise convolution (one input channel per group)
    /// scales by `w`; layers at the fixed input or output scale by `w`.
    #[test]
    fn width_scales_inner_conv_flops_quadratically() {
        let cnns = ["cosmoflow", "cosmoflow-v07", "deepcam", "resnet50"];
        for name in cnns {
            let base = build(name, &BuildOptions::default()).unwrap();
            for w in [0.5, 2.0, 3.0] {
                let wide = build(
                    name,
                    &BuildOptions {
                        input_size: None,
                        width: w,
                    },
                )
                .unwrap();
                let (c0, c1) = (
                    cost(&base, 1, Precision::Fp32),
                    cost(&wide, 1, Precision::Fp32),
                );
                let mut inner = 0;
                for ((l0, l1), (r0, r1)) in base
                    .layers()
                    .iter()
                    .zip(wide.layers())
                    .zip(c0.layers.iter().zip(&c1.layers))
                {
                    let Op::Conv(conv) = &l0.op else { continue };
                    let ratio = r1.flops_fwd.value() / r0.flops_fwd.value();
                    let c_in = |g: &Graph, l: &crate::graph::Layer| {
                        g.layers()[l.inputs[0]].output.channels() as f64
                    };
                    let in_scaled = c_in(&wide, l1) / c_in(&base, l0);
                    let out_scaled = l1.output.channels() as f64 / l0.output.channels() as f64;
                    let expected = if conv.groups == 1 {
                        in_scaled * out_scaled
                    } else {
                        out_scaled
                    };
                    assert!(
                        (ratio - expected).abs() < 1e-12,
                        "{name} {}: {ratio} vs {expected}",
                        l0.name
                    );
                    if conv.groups == 1 && in_scaled == w && out_scaled == w {
                        assert!((ratio - w * w).abs() < 1e-12);
                        inner += 1;
                    }
                }
                assert!(inner > 3, "{name}: only {inner} inner convolutions");
            }
        }
    }
}
