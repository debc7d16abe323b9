//! Finite-difference gradient checks of every op kind's backward kernel, on tiny shapes.
//!
//! For a layer `y = f(x, θ)` and a random linear functional `L = <r, y>`, the backward pass
//! given `dy = r` must return `dL/dx` and `dL/dθ`. Each is compared, element by element, with
//! the central difference `(L(v + h) - L(v - h)) / 2h`. Inputs are a shuffled grid of
//! distinct values away from zero, so no difference straddles a kink of ReLU or a tie of max
//! pooling.

use ridgeline_model::graph::{Attention, Conv, Graph, Op, Padding, Pool};

use super::ops::Kernel;
use super::random::{splitmix, uniform};
use super::saved::Aux;

const H: f32 = 1e-2;

/// Distinct values in (-1, 1), none within `1 / len` of zero, in a seeded shuffled order.
fn grid(len: usize, seed: u64) -> Vec<f32> {
    let mut v: Vec<f32> = (0..len)
        .map(|k| -1.0 + (2 * k + 1) as f32 / len as f32)
        .collect();
    for i in (1..len).rev() {
        let j = (splitmix(seed, i as u64) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

struct Check {
    graph: Graph,
    batch: usize,
    /// Whether the input gradients are checked (not for an embedding's ids).
    inputs: bool,
}

impl Check {
    fn new(input: &[usize], ops: &[(&str, Op)], batch: usize) -> Check {
        let mut graph = Graph::new("check", input.to_vec()).unwrap();
        for (name, op) in ops {
            if matches!(op, Op::Add | Op::Concat) {
                graph.push(*name, op.clone(), &[0, 0]).unwrap();
            } else {
                graph.then(*name, op.clone()).unwrap();
            }
        }
        Check {
            graph,
            batch,
            inputs: true,
        }
    }

    /// The last layer of `graph`, whatever it reads.
    fn graph(graph: Graph, batch: usize) -> Check {
        Check {
            graph,
            batch,
            inputs: true,
        }
    }

    fn run(self) {
        let layer = self.graph.layers().last().unwrap();
        let kernel = Kernel::new(&self.graph, layer, self.batch);
        let what = format!(
            "{} on {:?}",
            layer.op.kind(),
            self.graph.input_shape().dims()
        );
        // Parameters away from their initial zeros and ones, so every term matters.
        let mut params: Vec<Vec<f32>> = kernel
            .init_params(3)
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.iter()
                    .enumerate()
                    .map(|(j, v)| v + 0.3 * uniform(40 + i as u64, j as u64))
                    .collect()
            })
            .collect();
        let mut inputs: Vec<Vec<f32>> = layer
            .inputs
            .iter()
            .enumerate()
            .map(|(k, &j)| {
                let len = self.graph.layers()[j].output.elements() as usize * self.batch;
                grid(len, 10 + k as u64)
            })
            .collect();
        let out_len = layer.output.elements() as usize * self.batch;
        let r: Vec<f32> = (0..out_len as u64).map(|i| uniform(99, i)).collect();
        let loss = |inputs: &[Vec<f32>], params: &[Vec<f32>]| -> f64 {
            let views: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
            let mut out = vec![0.0; out_len];
            kernel.forward(&views, params, &mut out, &mut Aux::default(), 1, 7);
            out.iter()
                .zip(&r)
                .map(|(y, r)| f64::from(*y) * f64::from(*r))
                .sum()
        };

        let views: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let mut out = vec![0.0; out_len];
        let mut aux = Aux::default();
        kernel.forward(&views, &params, &mut out, &mut aux, 2, 7);
        let mut dx: Vec<Vec<f32>> = inputs.iter().map(|x| vec![f32::NAN; x.len()]).collect();
        let mut dparams: Vec<Vec<f32>> = params.iter().map(|p| vec![f32::NAN; p.len()]).collect();
        {
            let mut d: Vec<Option<&mut [f32]>> =
                dx.iter_mut().map(|v| Some(v.as_mut_slice())).collect();
            kernel.backward(&views, &out, &r, &params, &aux, &mut d, &mut dparams, 2, 7);
        }

        let close = |numeric: f64, analytic: f32, name: &str, i: usize| {
            let a = f64::from(analytic);
            assert!(
                (numeric - a).abs() <= 1e-2 + 1e-2 * numeric.abs(),
                "{what}: d{name}[{i}] analytic {a} vs finite difference {numeric}"
            );
        };
        let mut checked = 0;
        for k in (0..inputs.len()).filter(|_| self.inputs) {
            for i in 0..inputs[k].len() {
                let v = inputs[k][i];
                inputs[k][i] = v + H;
                let up = loss(&inputs, &params);
                inputs[k][i] = v - H;
                let down = loss(&inputs, &params);
                inputs[k][i] = v;
                close(
                    (up - down) / (2.0 * f64::from(H)),
                    dx[k][i],
                    &format!("x{k}"),
                    i,
                );
                checked += 1;
            }
        }
        for k in 0..params.len() {
            for i in 0..params[k].len() {
                let v = params[k][i];
                params[k][i] = v + H;
                let up = loss(&inputs, &params);
                params[k][i] = v - H;
                let down = loss(&inputs, &params);
                params[k][i] = v;
                close(
                    (up - down) / (2.0 * f64::from(H)),
                    dparams[k][i],
                    &format!("θ{k}"),
                    i,
                );
                checked += 1;
            }
        }
        assert!(checked > 0, "{what}: nothing checked");
    }
}

fn conv(c: Conv) -> Op {
    Op::conv(c)
}

#[test]
fn convolutions() {
    Check::new(
        &[2, 5, 6],
        &[("c", conv(Conv::new(3, &[3, 3]).pad(1).bias(true)))],
        2,
    )
    .run();
    Check::new(
        &[2, 7, 6],
        &[("c", conv(Conv::new(2, &[3, 2]).stride(2).bias(false)))],
        1,
    )
    .run();
    Check::new(
        &[2, 4, 4, 5],
        &[("c", conv(Conv::new(2, &[3, 3, 3]).pad(1)))],
        1,
    )
    .run();
    Check::new(
        &[4, 5, 5],
        &[("c", conv(Conv::new(4, &[3, 3]).pad(1).groups(2)))],
        1,
    )
    .run();
    Check::new(
        &[3, 7, 7],
        &[(
            "c",
            conv(Conv::new(3, &[3, 3]).pad(2).dilation(2).groups(3)),
        )],
        2,
    )
    .run();
    Check::new(&[2, 9], &[("c", conv(Conv::new(3, &[3])))], 2).run();
    Check::new(
        &[2, 5, 6],
        &[("c", conv(Conv::new(3, &[2, 2]).padding(Padding::Same)))],
        1,
    )
    .run();
}

#[test]
fn transposed_convolutions() {
    Check::new(
        &[3, 3, 4],
        &[(
            "t",
            Op::conv_transpose(Conv::new(2, &[3, 3]).stride(2).pad(1).bias(true)),
        )],
        2,
    )
    .run();
    Check::new(
        &[2, 3, 3, 2],
        &[("t", Op::conv_transpose(Conv::new(2, &[2, 2, 2]).stride(2)))],
        1,
    )
    .run();
    Check::new(
        &[4, 3, 3],
        &[(
            "t",
            Op::conv_transpose(Conv::new(4, &[3, 3]).pad(1).groups(2)),
        )],
        1,
    )
    .run();
}

#[test]
fn dense() {
    Check::new(
        &[6],
        &[(
            "d",
            Op::Dense {
                out_features: 4,
                bias: true,
            },
        )],
        3,
    )
    .run();
    Check::new(
        &[2, 3, 2],
        &[
            ("f", Op::Flatten),
            (
                "d",
                Op::Dense {
                    out_features: 3,
                    bias: false,
                },
            ),
        ],
        2,
    )
    .run();
}

#[test]
fn pooling() {
    Check::new(&[2, 6, 6], &[("p", Op::max_pool(Pool::new(&[2, 2])))], 2).run();
    let mut p = Pool::new(&[3, 3]);
    p.stride = [2, 2].into_iter().collect();
    p.padding = Padding::Explicit([[1, 1], [1, 1]].into_iter().collect());
    Check::new(&[2, 5, 5], &[("p", Op::max_pool(p.clone()))], 1).run();
    Check::new(&[2, 5, 5], &[("p", Op::avg_pool(p))], 1).run();
    Check::new(
        &[2, 4, 4, 4],
        &[("p", Op::max_pool(Pool::new(&[2, 2, 2])))],
        1,
    )
    .run();
    Check::new(
        &[2, 4, 4, 4],
        &[("p", Op::avg_pool(Pool::new(&[2, 2, 2])))],
        1,
    )
    .run();
    Check::new(&[3, 4, 5], &[("g", Op::GlobalAvgPool)], 2).run();
}

#[test]
fn normalisation() {
    Check::new(&[3, 4, 4], &[("bn", Op::BatchNorm)], 2).run();
    Check::new(&[2, 3, 3, 3], &[("bn", Op::BatchNorm)], 2).run();
    Check::new(&[3, 4, 4], &[("a", Op::ChannelAffine)], 2).run();
}

#[test]
fn element_wise() {
    for op in [
        Op::Relu,
        Op::LeakyRelu { alpha: 0.3 },
        Op::Tanh,
        Op::Scale { factor: -1.7 },
        Op::Dropout { rate: 0.4 },
    ] {
        Check::new(&[3, 4, 4], &[("e", op)], 2).run();
    }
    Check::new(&[3, 4, 4], &[("add", Op::Add)], 2).run();
    Check::new(&[3, 4, 4], &[("cat", Op::Concat)], 2).run();
    Check::new(&[2, 5], &[("f", Op::Flatten)], 2).run();
}

#[test]
fn shifts_powers_and_products() {
    for op in [
        Op::Shift { offset: 0.7 },
        Op::Pow { exponent: 3.0 },
        Op::Pow { exponent: 2.0 },
    ] {
        Check::new(&[3, 4, 4], &[("e", op)], 2).run();
    }
    // A product of two different activations: each input's gradient is the other input.
    let mut g = Graph::new("check", vec![3, 4]).unwrap();
    let t = g.then("t", Op::Tanh).unwrap();
    g.push("m", Op::Mul, &[0, t]).unwrap();
    Check::graph(g, 2).run();
}

#[test]
fn reshaping() {
    Check::new(
        &[2, 2, 3],
        &[(
            "t",
            Op::Tile {
                repeats: [2, 3].into_iter().collect(),
            },
        )],
        2,
    )
    .run();
    Check::new(
        &[2, 2, 3],
        &[(
            "u",
            Op::Upsample {
                factor: [2, 2].into_iter().collect(),
            },
        )],
        2,
    )
    .run();
    Check::new(
        &[2, 2, 2, 2],
        &[(
            "u",
            Op::Upsample {
                factor: [2, 1, 2].into_iter().collect(),
            },
        )],
        1,
    )
    .run();
}

#[test]
fn losses() {
    Check::new(&[4, 3, 3], &[("ce", Op::SoftmaxCrossEntropy)], 2).run();
    Check::new(&[5], &[("ce", Op::SoftmaxCrossEntropy)], 3).run();
    Check::new(&[3, 4], &[("mse", Op::MseLoss)], 2).run();
}

#[test]
fn linear_and_products() {
    let linear = |bias| Op::Linear {
        out_features: 3,
        bias,
        tied: false,
    };
    Check::new(&[4, 5], &[("l", linear(true))], 2).run();
    Check::new(&[2, 3, 2], &[("l", linear(false))], 1).run();
    Check::new(&[4], &[("l", linear(true))], 3).run();
    // [4 x 3] by [3 x 3]: m, k and n not all equal.
    let mut g = Graph::new("check", vec![4, 3]).unwrap();
    let b = g.then("b", linear(false)).unwrap();
    g.push("mm", Op::MatMul, &[0, b]).unwrap();
    Check::graph(g, 2).run();
    let mut g = Graph::new("check", vec![2, 3, 3]).unwrap();
    g.push("mm", Op::MatMul, &[0, 0]).unwrap();
    Check::graph(g, 1).run();
}

#[test]
fn embedding_table_gradient() {
    let op = Op::Embedding {
        num_embeddings: 7,
        embedding_dim: 3,
    };
    let mut c = Check::new(&[5], &[("e", op)], 2);
    c.inputs = false;
    c.run();
}

#[test]
fn sequence_element_wise_and_norms() {
    for op in [Op::LayerNorm, Op::RmsNorm, Op::Softmax, Op::Gelu, Op::Silu] {
        Check::new(&[4, 3], &[("e", op)], 2).run();
    }
}

#[test]
fn attention_every_form() {
    use ridgeline_model::graph::Attention;
    let attention =
        |causal, dropout, fused| Op::Attention(Attention::new(2, causal, dropout, fused));
    for (causal, dropout, fused) in [
        (false, 0.0, false),
        (true, 0.0, false),
        (true, 0.3, false),
        (false, 0.0, true),
        (true, 0.3, true),
    ] {
        Check::new(&[12, 4], &[("a", attention(causal, dropout, fused))], 2).run();
    }
    // Queries of 5 positions against 3 keys and values.
    for fused in [false, true] {
        let mut g = Graph::new("check", vec![4, 5]).unwrap();
        let kv = g.then("kv", Op::Gather { edges: 3 }).unwrap();
        g.push("a", attention(true, 0.0, fused), &[0, kv, kv])
            .unwrap();
        Check::graph(g, 2).run();
    }
}

/// Rotary embeddings, and grouped-query attention (two query heads a key and value head)
/// reading rotated queries and keys from their own projections.
#[test]
fn rotary_and_grouped_query_attention() {
    use ridgeline_model::graph::Attention;
    let rotary = Op::Rotary {
        heads: 2,
        theta: 10_000.0,
    };
    Check::new(&[8, 5], &[("r", rotary.clone())], 2).run();
    for (dropout, fused) in [(0.0, false), (0.3, false), (0.0, true)] {
        let mut g = Graph::new("check", vec![8, 5]).unwrap();
        let linear = |out_features| Op::Linear {
            out_features,
            bias: false,
            tied: false,
        };
        g.then("q", linear(8)).unwrap();
        let q = g
            .then(
                "q_rope",
                Op::Rotary {
                    heads: 4,
                    theta: 500_000.0,
                },
            )
            .unwrap();
        let k = g.push("k", linear(4), &[0]).unwrap();
        let k = g
            .push(
                "k_rope",
                Op::Rotary {
                    heads: 2,
                    theta: 500_000.0,
                },
                &[k],
            )
            .unwrap();
        let v = g.push("v", linear(4), &[0]).unwrap();
        let a = Attention {
            kv_heads: 2,
            ..Attention::new(4, true, dropout, fused)
        };
        g.push("a", Op::Attention(a), &[q, k, v]).unwrap();
        Check::graph(g, 2).run();
    }
}

/// A mixture of experts, gated and plain, dropless and with capacities that drop tokens:
/// its router's, experts' and input's gradients, through the top-k renormalisation and the
/// softmax.
#[test]
fn mixture_of_experts() {
    use ridgeline_model::graph::{ExpertActivation, Moe};
    for (gated, activation, capacity_factor) in [
        (true, ExpertActivation::Silu, None),
        (false, ExpertActivation::Gelu, Some(1.0)),
        (true, ExpertActivation::Silu, Some(0.75)),
    ] {
        let moe = Moe {
            experts: 4,
            local: 4,
            top_k: 2,
            ffn: 5,
            gated,
            activation,
            capacity_factor,
        };
        Check::new(&[6, 7], &[("moe", Op::Moe(moe))], 2).run();
    }
}

/// The activations of the mobile networks (ReLU6 as a clip, hard swish, hard sigmoid,
/// sigmoid) and a squeeze-and-excitation gate: a feature map times a per-channel factor
/// broadcast over its positions.
#[test]
fn mobile_activations_and_channel_gates() {
    Check::new(&[3, 2, 2], &[("scale", Op::ChannelScale)], 2).run();
    // Small maps, so that the grid's values lie at least `4 H` from the clip's bounds.
    for op in [
        Op::Sigmoid,
        Op::Clip { min: 0.0, max: 0.5 },
        Op::Clip { min: 0.0, max: 6.0 },
        Op::HardSwish,
        Op::HardSigmoid {
            alpha: 1.0 / 6.0,
            beta: 0.5,
        },
    ] {
        Check::new(&[3, 2, 2], &[("a", op)], 2).run();
    }
    let mut g = Graph::new("check", vec![4, 3, 5]).unwrap();
    let gate = g.push("pool", Op::GlobalAvgPool, &[0]).unwrap();
    g.push("gate", Op::Mul, &[0, gate]).unwrap();
    Check::graph(g, 2).run();
}

/// ViT's stem after its patch convolution: the map's positions as a sequence, a learned
/// class token before them, a learned position embedding added; and the tokens' layout.
#[test]
fn patches_class_token_and_positions() {
    Check::new(
        &[3, 2, 2],
        &[
            ("flat", Op::FlattenPositions),
            ("cls", Op::PrependTokens { tokens: 2 }),
            ("pos", Op::PositionEmbedding),
        ],
        2,
    )
    .run();
    // Channel `c` of the output is the tokens' channel `c`, then the input's positions.
    let mut g = Graph::new("cls", vec![2, 3]).unwrap();
    g.then("cls", Op::PrependTokens { tokens: 1 }).unwrap();
    let layer = g.layers().last().unwrap();
    let k = Kernel::new(&g, layer, 1);
    let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let mut out = vec![0.0; 8];
    k.forward(
        &[&x],
        &[vec![10.0, 20.0]],
        &mut out,
        &mut Aux::default(),
        1,
        0,
    );
    assert_eq!(out, [10.0, 0.0, 1.0, 2.0, 20.0, 3.0, 4.0, 5.0]);
}

/// Swin's shifted-window attention: windows of 2 x 2 on a 4 x 6 map of two heads,
/// unshifted and rolled by one (the mask between the roll's regions), with the relative
/// position bias's gradient.
#[test]
fn shifted_window_attention() {
    for shift in [0, 1] {
        let mut a = Attention::new(2, false, 0.0, false);
        a.window = 2;
        a.shift = shift;
        a.scale_queries = true;
        Check::new(&[12, 4, 6], &[("attn", Op::Attention(a))], 2).run();
    }
}

/// Swin's patch merging, and its order: torchvision's `x[0::2, 0::2]`, `x[1::2, 0::2]`,
/// `x[0::2, 1::2]`, `x[1::2, 1::2]` on the channels.
#[test]
fn patch_merging() {
    Check::new(&[2, 4, 2], &[("merge", Op::PatchMerge)], 2).run();
    let mut g = Graph::new("merge", vec![1, 2, 2]).unwrap();
    g.then("merge", Op::PatchMerge).unwrap();
    let layer = g.layers().last().unwrap();
    let k = Kernel::new(&g, layer, 1);
    // The map [[0, 1], [2, 3]]: (0, 0), (1, 0), (0, 1), (1, 1).
    let mut out = vec![0.0; 4];
    k.forward(
        &[&[0.0, 1.0, 2.0, 3.0]],
        &[],
        &mut out,
        &mut Aux::default(),
        1,
        0,
    );
    assert_eq!(out, [0.0, 2.0, 1.0, 3.0]);
}

/// ShuffleNetV2's data movement: a chunk of the channels and the channel shuffle.
#[test]
fn channel_narrow_and_shuffle() {
    Check::new(&[6, 2, 3], &[("n", Op::Narrow { start: 2, len: 3 })], 2).run();
    Check::new(&[6, 2, 3], &[("s", Op::ChannelShuffle { groups: 2 })], 2).run();
    Check::new(&[6, 2, 3], &[("s", Op::ChannelShuffle { groups: 3 })], 2).run();
    // PyTorch's `view(N, g, C / g, ...).transpose(1, 2)`: six channels in two groups.
    let g = Graph::new("shuffle", vec![6, 1]).unwrap();
    let mut g = g;
    g.then("s", Op::ChannelShuffle { groups: 2 }).unwrap();
    let layer = g.layers().last().unwrap();
    let k = Kernel::new(&g, layer, 1);
    let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let mut out = vec![0.0; 6];
    k.forward(&[&x], &[], &mut out, &mut Aux::default(), 1, 0);
    assert_eq!(out, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
}

#[test]
fn graph_row_ops() {
    Check::new(&[3, 5], &[("g", Op::Gather { edges: 8 })], 2).run();
    Check::new(&[3, 8], &[("s", Op::ScatterAdd { nodes: 5 })], 2).run();
    Check::new(&[3, 8], &[("s", Op::SegmentSum { segments: 3 })], 2).run();
}

#[test]
fn the_grid_is_distinct_and_away_from_zero() {
    let g = grid(100, 1);
    let mut s = g.clone();
    s.sort_by(f32::total_cmp);
    assert!(s.windows(2).all(|w| w[1] - w[0] > 0.019));
    assert!(g.iter().all(|v| v.abs() >= 0.0099));
}
