//! ONNX models into the layer-graph IR: the protobuf decoded by prost with ONNX's own schema
//! (`onnx/proto.rs`, generated from `onnx.proto`), shapes inferred by the IR's rules as each
//! layer is added.
//!
//! A model's one data input (the graph input that no initializer fills) is the sample; its
//! first dimension is the batch. Weights are initializers or computed from them
//! (`ConstantOfShape`, `Constant`, `Unsqueeze`, `Squeeze`, `Reshape`, `Identity` of
//! constants, as weight-less graphs hold them): only their shapes are read. Each operator on
//! activations becomes a layer, named after its node:
//! `Conv`, `ConvTranspose` (`auto_pad` `NOTSET`, `VALID` or `SAME_UPPER`), `Gemm` and a
//! `MatMul` of a feature vector by a weight (dense), `MaxPool` and `AveragePool`
//! (`ceil_mode` 0), `GlobalAveragePool`, `BatchNormalization`, a `Mul` by a per-channel
//! constant and the `Add` of a per-channel constant after it (channel affine), a `Mul` of
//! two activations, `Relu`,
//! `LeakyRelu`, `Tanh`, `Gelu`, `Softmax` over channels (a graph output's becomes the
//! training loss, softmax cross-entropy), `Add` and `Sum` of activations, `Concat` on
//! channels, `Dropout`, `Flatten` and a `Reshape` to a feature vector. Transformers'
//! sequences and the node chains that are one layer of theirs (embeddings, linear layers
//! over rows, unfused attention) are read by its `sequence` module; logits over a token table's
//! vocabulary get the language-model loss. Anything else is refused with the node and its
//! operator: nothing is guessed.

mod constants;
mod importer;
mod layers;
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    rustdoc::all
)]
mod proto;
mod sequence;
mod state;
mod value;

use prost::Message;

use crate::error::{Error, Result};
use crate::graph::Graph;
use proto::ModelProto;
use state::State;

/// Reads an ONNX model (`bytes` of the file `file`) into a graph named `name`.
pub fn import(bytes: &[u8], file: &str, name: &str) -> Result<Graph> {
    let model = ModelProto::decode(bytes).map_err(|e| Error::Parse {
        file: file.to_owned(),
        message: format!("not an ONNX model: {e}"),
    })?;
    let graph = model.graph.ok_or_else(|| Error::Parse {
        file: file.to_owned(),
        message: "the model has no graph".into(),
    })?;
    let mut state = State::new(&graph, file, name)?;
    for (index, node) in graph.node.iter().enumerate() {
        importer::node(&mut state, index, node)?;
    }
    importer::finish(state)
}

#[cfg(test)]
mod tests {
    use super::proto::{AttributeProto, NodeProto};
    use super::value::*;
    use super::*;
    use crate::cost::cost;
    use crate::graph::Op;
    use crate::graph::ScoreMask;
    use crate::precision::Precision;
    use crate::workloads::{self, BuildOptions};

    /// A model of the ONNX backend tests' weight-less zoo (`tests/fixtures/onnx/`).
    fn load(name: &str) -> Result<Graph> {
        let path = format!(
            "{}/../tests/fixtures/onnx/light_{name}.onnx",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        import(&bytes, &format!("light_{name}.onnx"), name)
    }

    fn counts(g: &Graph) -> (u64, u128) {
        let c = cost(g, 1, Precision::Fp32);
        (c.params, c.macs_fwd)
    }

    /// ResNet-50 as ONNX has the built-in ResNet-50's parameters and multiply-accumulates.
    #[test]
    fn resnet50_is_the_built_in_one() {
        let g = load("resnet50").unwrap();
        let builtin = workloads::build("resnet50", &BuildOptions::default()).unwrap();
        assert_eq!(counts(&g), counts(&builtin));
        assert_eq!(g.input_shape().dims(), &[3, 224, 224]);
        assert!(matches!(
            g.layers().last().unwrap().op,
            Op::SoftmaxCrossEntropy
        ));
    }

    /// VGG-19: 143,667,240 parameters (Simonyan and Zisserman 2015, Table 2: 144M;
    /// torchvision's `vgg19` to the unit) and 19.6 billion multiply-adds (He et al. 2016,
    /// section 3.3: "VGG-19 (19.6 billion FLOPs)", FLOPs there being multiply-adds);
    /// SqueezeNet 1.1: 1,235,496
    /// parameters and 0.35 GFLOPs (torchvision's model table, multiply-adds).
    #[test]
    fn vgg19_and_squeezenet_match_published_counts() {
        let (params, macs) = counts(&load("vgg19").unwrap());
        assert_eq!(params, 143_667_240);
        assert!((macs as f64 / 19.6e9 - 1.0).abs() < 0.005, "{macs}");
        let (params, macs) = counts(&load("squeezenet").unwrap());
        assert_eq!(params, 1_235_496);
        assert!((macs as f64 / 0.35e9 - 1.0).abs() < 0.01, "{macs}");
    }

    /// DenseNet-121's 1,746 nodes (its batch norms followed by a per-channel scale and shift,
    /// as Caffe2 wrote it) import.
    #[test]
    fn a_graph_of_1746_nodes_imports() {
        let g = load("densenet121").unwrap();
        assert_eq!(g.layers().len(), 548);
        let affine = g
            .layers()
            .iter()
            .filter(|l| matches!(l.op, Op::ChannelAffine))
            .count();
        assert_eq!(affine, 121);
    }

    /// The exporter's GPT-2 (`scripts/export-onnx.py`: Hugging Face's 124M configuration,
    /// 64 tokens, weights stripped).
    fn gpt2_bytes() -> Vec<u8> {
        fixture("gpt2-seq64")
    }

    /// The bytes of the exporter's fixture `name` (`tests/fixtures/onnx/NAME.onnx`).
    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../tests/fixtures/onnx/{name}.onnx",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The ONNX model `bytes` imported, and the built-in workload `name` at its 64
    /// tokens; their parameters and multiply-accumulates checked equal.
    fn with_builtin(bytes: &[u8], name: &str) -> (Graph, Graph) {
        let g = import(bytes, &format!("{name}.onnx"), name).unwrap();
        let options = BuildOptions {
            input_size: Some(vec![64]),
            ..BuildOptions::default()
        };
        let builtin = workloads::build(name, &options).unwrap();
        assert_eq!(counts(&g), counts(&builtin), "{name}");
        (g, builtin)
    }

    /// Layers of op `kind` in `g`.
    fn ops(g: &Graph, kind: &str) -> usize {
        g.layers().iter().filter(|l| l.op.kind() == kind).count()
    }

    /// GPT-2 as ONNX is the built-in GPT-2: the same parameters (the head tied to the token
    /// table) and multiply-accumulates, twelve unfused causal attention layers of twelve
    /// heads, and GELU as its eight kernels.
    #[test]
    fn gpt2_is_the_built_in_one() {
        let (g, builtin) = with_builtin(&gpt2_bytes(), "gpt2");
        assert_eq!(counts(&g).0, 124_439_808);
        for kind in [
            "embedding",
            "layer-norm",
            "linear",
            "attention",
            "scale",
            "pow",
            "tanh",
            "shift",
            "mul",
            "add",
            "softmax-cross-entropy",
        ] {
            assert_eq!(ops(&g, kind), ops(&builtin, kind), "{kind}");
        }
        let attention: Vec<_> = g
            .layers()
            .iter()
            .filter_map(|l| match &l.op {
                Op::Attention(a) => Some(*a),
                _ => None,
            })
            .collect();
        assert_eq!(attention.len(), 12);
        assert!(
            attention
                .iter()
                .all(|a| a.heads == 12 && a.causal && !a.fused && a.mask == ScoreMask::Select)
        );
        let head = &g.layers()[g.last() - 1];
        assert!(
            matches!(
                head.op,
                Op::Linear {
                    out_features: 50257,
                    tied: true,
                    ..
                }
            ),
            "{:?}",
            head.op
        );
        // Without the tie (a head of its own) it would own the table's 38.6M parameters.
        assert_eq!(g.input_shape().dims(), [64]);
    }

    /// BERT-Large as ONNX (`BertForPreTraining`, 64 tokens) is the built-in BERT-Large:
    /// three projections per attention layer with BERT's additive mask, the exact GELU as
    /// one layer, the pooler and both heads with their losses, the masked-LM decoder tied.
    #[test]
    fn bert_large_is_the_built_in_one() {
        let (g, builtin) = with_builtin(&fixture("bert-large-seq64"), "bert-large");
        assert_eq!(counts(&g).0, 336_226_108);
        for kind in [
            "embedding",
            "layer-norm",
            "linear",
            "attention",
            "gelu",
            "gather",
            "tanh",
            "softmax-cross-entropy",
        ] {
            assert_eq!(ops(&g, kind), ops(&builtin, kind), "{kind}");
        }
        for l in g.layers() {
            if let Op::Attention(a) = &l.op {
                assert_eq!((a.heads, a.causal, a.mask), (16, false, ScoreMask::Add));
                assert_eq!(l.inputs.len(), 3, "query, key and value");
            }
        }
        assert!(g.layers().iter().any(|l| matches!(
            l.op,
            Op::Linear {
                out_features: 30522,
                bias: true,
                tied: true
            }
        )));
    }

    /// torchvision's Swin-T as ONNX is the built-in `swin-t`: the same layers in the same
    /// order (the ONNX head reads the pool through a `Flatten`), each window attention of
    /// the same heads, window, roll and scaled queries.
    #[test]
    fn swin_t_is_the_built_in_one() {
        let g = import(&fixture("tv-swin_t"), "tv-swin_t.onnx", "swin").unwrap();
        let builtin = workloads::build("swin-t", &BuildOptions::default()).unwrap();
        assert_eq!(counts(&g), counts(&builtin));
        let layers = |g: &Graph| -> Vec<Op> {
            g.layers()
                .iter()
                .map(|l| l.op.clone())
                .filter(|op| !op.is_view())
                .collect()
        };
        assert_eq!(layers(&g), layers(&builtin));
        let windows: Vec<(usize, usize, usize)> = g
            .layers()
            .iter()
            .filter_map(|l| match &l.op {
                Op::Attention(a) => Some((a.heads, a.window, a.shift)),
                _ => None,
            })
            .collect();
        assert_eq!(windows.len(), 12);
        assert_eq!(windows[1], (3, 7, 3));
        assert_eq!(windows[11], (24, 7, 0));
    }

    /// Constant slices and transposes follow ONNX's rules: a pad's pairs reversed and
    /// transposed as torch writes them, a shape of any size followed without listing it.
    #[test]
    fn constant_slices_and_transposes_follow_onnx() {
        // [[1, 2], [3, 4], [5, 6]] with the rows reversed, then transposed.
        let (dims, v) = slice_constant(
            &[3, 2],
            Some(&[1, 2, 3, 4, 5, 6]),
            &[-1],
            &[i64::MIN + 1],
            Some(vec![0]),
            Some(vec![-1]),
        )
        .unwrap();
        assert_eq!(
            (dims.as_slice(), v.as_deref()),
            ([3, 2].as_slice(), Some([5, 6, 3, 4, 1, 2].as_slice()))
        );
        let (dims, v) = transpose_constant(&[3, 2], v.as_deref(), &[1, 0]).unwrap();
        assert_eq!(
            (dims.as_slice(), v.as_deref()),
            ([2, 3].as_slice(), Some([5, 3, 1, 6, 4, 2].as_slice()))
        );
        // Every second entry from 1, of an axis of 2^62: a shape, nothing listed.
        let (dims, v) =
            slice_constant(&[1 << 62], None, &[1], &[i64::MAX], None, Some(vec![2])).unwrap();
        assert_eq!((dims, v), (vec![1 << 61], None));
        assert_eq!(slice_axis(5, 0, 3, 0), None);
    }

    /// A Swin or ViT export changed where the importer reads its windows, roll, patch
    /// merging or class token is refused, naming the node and the op.
    #[test]
    fn windows_and_tokens_that_are_not_swins_or_vits_are_refused_with_their_node() {
        type Edit = fn(&mut NodeProto);
        let cases: [(&str, &str, Edit, &str); 4] = [
            (
                "tv-swin_t",
                "/features/features.1/features.1.0/attn/Transpose_2",
                |n| n.attribute[0].ints = vec![0, 3, 1, 2, 4, 5],
                "op `Transpose`",
            ),
            (
                "tv-swin_t",
                "/features/features.1/features.1.1/attn/Concat_3",
                |n| n.attribute[0].i = Some(2),
                "roll's halves",
            ),
            (
                "tv-swin_t",
                "/features/features.2/Concat_3",
                |n| n.input.swap(1, 2),
                "patch merging",
            ),
            (
                "tv-vit_tiny",
                "/Concat_2",
                |n| n.attribute[0].i = Some(2),
                "learned tokens",
            ),
        ];
        for (file, at, edit, want) in cases {
            let mut model = ModelProto::decode(fixture(file).as_slice()).unwrap();
            let graph = model.graph.as_mut().unwrap();
            let (index, node) = graph
                .node
                .iter_mut()
                .enumerate()
                .find(|(_, n)| n.name.as_deref() == Some(at))
                .unwrap_or_else(|| panic!("{at}"));
            edit(node);
            let e = import(&model.encode_to_vec(), "m.onnx", "m")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("m.onnx, node {index}")) && e.contains(want),
                "{at}: {e}"
            );
        }
    }

    /// OPT-1.3B as ONNX (`OPTForCausalLM`, 64 tokens) is the built-in OPT-1.3B: its
    /// queries scaled before the product, the causal mask added and the scores clamped,
    /// products of batch and heads merged (`bmm`), the feed-forward over rows.
    #[test]
    fn opt_is_the_built_in_one() {
        let (g, builtin) = with_builtin(&fixture("opt-1.3b-seq64"), "opt-1.3b");
        assert_eq!(counts(&g).0, 1_315_758_080);
        for kind in [
            "embedding",
            "layer-norm",
            "linear",
            "attention",
            "relu",
            "add",
        ] {
            assert_eq!(ops(&g, kind), ops(&builtin, kind), "{kind}");
        }
        let attention = |g: &Graph| -> Vec<crate::graph::Attention> {
            g.layers()
                .iter()
                .filter_map(|l| match &l.op {
                    Op::Attention(a) => Some(*a),
                    _ => None,
                })
                .collect()
        };
        // The same flags, but the dropout (an eval export has none).
        for (a, b) in attention(&g).iter().zip(attention(&builtin)) {
            assert_eq!(*a, crate::graph::Attention { dropout: 0.0, ..b });
        }
    }

    /// An op on a sequence that is none of the importer's is refused with its node.
    #[test]
    fn an_unknown_op_on_a_sequence_is_refused_with_its_node() {
        let mut model = ModelProto::decode(gpt2_bytes().as_slice()).unwrap();
        let graph = model.graph.as_mut().unwrap();
        let (index, node) = graph
            .node
            .iter_mut()
            .enumerate()
            .find(|(_, n)| n.op_type.as_deref() == Some("Tanh"))
            .unwrap();
        node.op_type = Some("Erf".into());
        let name = node.name.clone().unwrap();
        let e = import(&model.encode_to_vec(), "g.onnx", "g")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("g.onnx, node {index}"))
                && e.contains(&name)
                && e.contains("op `Erf`"),
            "{e}"
        );
    }

    /// Issue 43, item 16: attributes that contradict the node or the ONNX specification,
    /// custom-domain ops and an empty graph are refused, naming the node.
    #[test]
    fn contradictions_are_refused_with_their_node() {
        let path = format!(
            "{}/../tests/fixtures/onnx/light_resnet50.onnx",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(path).unwrap();
        let first_conv = |model: &mut ModelProto| -> usize {
            model
                .graph
                .as_ref()
                .unwrap()
                .node
                .iter()
                .position(|n| n.op_type.as_deref() == Some("Conv"))
                .unwrap()
        };
        let set = |name: &str, ints: Vec<i64>, i: Option<i64>| {
            let name = name.to_owned();
            move |node: &mut NodeProto| {
                node.attribute.retain(|a| a.name.as_deref() != Some(&name));
                node.attribute.push(AttributeProto {
                    name: Some(name.clone()),
                    ints: ints.clone(),
                    i,
                    ..AttributeProto::default()
                });
            }
        };
        type Edit = Box<dyn Fn(&mut NodeProto)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(set("kernel_shape", vec![0, 0], None)),
                "kernel_shape",
            ),
            (
                Box::new(set("kernel_shape", vec![3, 3], None)),
                "contradicts its weight",
            ),
            (Box::new(set("group", vec![], Some(0))), "`group` 0"),
            (
                Box::new(set("group", vec![], Some(2))),
                "contradicts its input",
            ),
            (Box::new(set("pads", vec![-1, 3, 3, 3], None)), "`pads`"),
            (Box::new(set("strides", vec![0, 2], None)), "`strides`"),
            (
                Box::new(|n: &mut NodeProto| n.domain = Some("com.example".into())),
                "domain `com.example`",
            ),
        ];
        for (edit, want) in cases {
            let mut model = ModelProto::decode(bytes.as_slice()).unwrap();
            let at = first_conv(&mut model);
            edit(&mut model.graph.as_mut().unwrap().node[at]);
            let e = import(&model.encode_to_vec(), "r.onnx", "r")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("r.onnx, node {at}")) && e.contains(want),
                "want {want}: {e}"
            );
        }
        // No node at all: nothing to time (was 0 FLOPs and a NaN intensity).
        let mut model = ModelProto::decode(bytes.as_slice()).unwrap();
        model.graph.as_mut().unwrap().node.clear();
        let e = import(&model.encode_to_vec(), "r.onnx", "r")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("r.onnx") && e.contains("no layer to time"),
            "{e}"
        );
    }

    /// torchvision's classification zoo as `scripts/export-torchvision.py` exports it:
    /// against `data/evidence/reference/torchvision.toml` (PyTorch's own counts), each model that
    /// imports has its parameters and its matrix FLOPs forward (convolutions, linear layers,
    /// products) exactly; the others are refused naming their node and op. Imported:
    /// ResNet-50, MobileNetV2 (ReLU6 as `clip`), MobileNetV3 (hard swish, hard sigmoid gates),
    /// EfficientNet-B0 and RegNetY (sigmoid gates broadcast over the feature map),
    /// DenseNet-121 (a one-input `Concat` is its input), ShuffleNetV2 (its chunks as
    /// `narrow`, its shuffle's reshape, transpose and reshape as one `channel-shuffle`, the
    /// shape computed from the layer's, the mean over the map a global average pool),
    /// ConvNeXt-T (its channels-last layer norms and linear layers as a sequence of the
    /// map's positions, its layer scale a `channel-scale`).
    #[test]
    fn torchvision_models_have_torchs_parameters_and_flops() {
        let reference: toml::Table = toml::from_str(include_str!(
            "../../data/evidence/reference/torchvision.toml"
        ))
        .unwrap();
        let imported = [
            "resnet50",
            "mobilenet_v2",
            "mobilenet_v3_large",
            "efficientnet_b0",
            "regnet_y_400mf",
            "densenet121",
            "shufflenet_v2_x1_0",
            "convnext_tiny",
            "vit_b_16",
            "vit_tiny",
            "swin_t",
        ];
        assert_eq!(imported.len(), reference.len());
        let read = |name: &str| {
            let file = format!("tv-{name}.onnx");
            let path = format!(
                "{}/../tests/fixtures/onnx/{file}",
                env!("CARGO_MANIFEST_DIR")
            );
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            import(&bytes, &file, name)
        };
        for name in imported {
            let g = read(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            let c = cost(&g, 1, Precision::Fp32);
            // torch counts the products (`2 m n k`), as ridgeline's MACs; attention's
            // softmax and scale are FLOPs of ridgeline's attention layer it does not count.
            let matrix = 2.0 * c.macs_fwd as f64;
            let want = &reference[name];
            assert_eq!(
                c.params,
                want["params"].as_integer().unwrap() as u64,
                "{name}"
            );
            assert_eq!(
                matrix,
                want["forward_flops"].as_integer().unwrap() as f64,
                "{name}"
            );
        }
    }

    #[test]
    fn an_op_the_ir_lacks_is_refused_with_its_node() {
        let e = load("bvlc_alexnet").unwrap_err().to_string();
        assert!(
            e.contains("light_bvlc_alexnet.onnx, node 18") && e.contains("op `LRN`"),
            "{e}"
        );
        // The model zoo's ShuffleNet (v1, Caffe2): its 16 channel shuffles, each a 5-d
        // `Reshape`, a `Transpose` and a `Reshape` back, are one layer each.
        let g = load("shufflenet").unwrap();
        let shuffles = g
            .layers()
            .iter()
            .filter(|l| matches!(l.op, Op::ChannelShuffle { groups: 4 }))
            .count();
        assert_eq!(shuffles, 16);
    }

    #[test]
    fn bytes_that_are_not_a_model_name_the_file() {
        let path = format!(
            "{}/../tests/fixtures/onnx/light_vgg19.onnx",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(path).unwrap();
        let e = import(&bytes[..bytes.len() / 3], "cut.onnx", "cut")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cut.onnx") && e.contains("not an ONNX model"),
            "{e}"
        );
        let e = import(b"not a model at all", "text.onnx", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("text.onnx"), "{e}");
    }
}
