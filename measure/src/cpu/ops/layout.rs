//! Kernels that move elements rather than compute them, forward and backward side by side:
//! narrowing, learned tokens put before a sequence, Swin's patch merging, the channel
//! shuffle, concatenation, tiling and nearest upsampling, and a channel gate's broadcast
//! product. A backward pass is the forward pass's moves reversed, summing where the forward
//! pass copied one element to several.

use rayon::prelude::*;

/// Channels `start .. start + len` of `c` at `vol` positions, for `n` samples.
pub(super) type Narrow = (usize, usize, usize, usize, usize);

/// Narrowing's forward pass.
pub(super) fn narrow_forward((n, c, start, len, vol): Narrow, x: &[f32], out: &mut [f32]) {
    for b in 0..n {
        out[b * len * vol..][..len * vol].copy_from_slice(&x[(b * c + start) * vol..][..len * vol]);
    }
}

/// Narrowing's backward pass: the kept channels' gradients, zero elsewhere.
pub(super) fn narrow_backward((n, c, start, len, vol): Narrow, dy: &[f32], d: &mut [f32]) {
    d.fill(0.0);
    for b in 0..n {
        d[(b * c + start) * vol..][..len * vol].copy_from_slice(&dy[b * len * vol..][..len * vol]);
    }
}

/// `tokens` learned tokens put before each of `n` sequences of `c` channels at `s`
/// positions.
pub(super) type Prepend = (usize, usize, usize, usize);

/// Prepending's forward pass: each channel's tokens, then the sequence.
pub(super) fn prepend_forward((n, c, s, t): Prepend, x: &[f32], tokens: &[f32], out: &mut [f32]) {
    for (row, o) in out.chunks_mut(s + t).take(n * c).enumerate() {
        let ch = row % c;
        o[..t].copy_from_slice(&tokens[ch * t..][..t]);
        o[t..].copy_from_slice(&x[row * s..][..s]);
    }
}

/// Prepending's backward pass: the tokens' gradient summed over the batch; the rest is the
/// input's.
pub(super) fn prepend_backward(
    (n, c, s, t): Prepend,
    dy: &[f32],
    dtokens: &mut [f32],
    dx: Option<&mut [f32]>,
) {
    dtokens.fill(0.0);
    for (row, g) in dy.chunks(s + t).take(n * c).enumerate() {
        let ch = row % c;
        for (d, v) in dtokens[ch * t..][..t].iter_mut().zip(&g[..t]) {
            *d += v;
        }
    }
    if let Some(d) = dx {
        for (row, g) in dy.chunks(s + t).take(n * c).enumerate() {
            d[row * s..][..s].copy_from_slice(&g[t..]);
        }
    }
}

/// For each element of patch merging's output in order, the input element it copies
/// (`ridgeline_model::graph::Op::PatchMerge`: part `p` of channel `c` is the block's
/// position `(p % 2, p / 2)`), for `n` maps of `c` channels at `h x w` positions.
pub(super) fn merged(n: usize, c: usize, h: usize, w: usize) -> impl Iterator<Item = usize> {
    let (oh, ow) = (h / 2, w / 2);
    (0..n).flat_map(move |b| {
        (0..4 * c).flat_map(move |oc| {
            let (part, ch) = (oc / c, oc % c);
            let (dy, dx) = (part % 2, part / 2);
            (0..oh * ow).map(move |p| {
                let (y, x) = (2 * (p / ow) + dy, 2 * (p % ow) + dx);
                ((b * c + ch) * h + y) * w + x
            })
        })
    })
}

/// Patch merging's forward pass: each 2 x 2 block of positions into the channels.
pub(super) fn merge_forward(
    (n, c, h, w): (usize, usize, usize, usize),
    x: &[f32],
    out: &mut [f32],
) {
    for (o, i) in merged(n, c, h, w).enumerate() {
        out[o] = x[i];
    }
}

/// Patch merging's backward pass: each output's gradient back to its position.
pub(super) fn merge_backward(
    (n, c, h, w): (usize, usize, usize, usize),
    dy: &[f32],
    d: &mut [f32],
) {
    for (o, i) in merged(n, c, h, w).enumerate() {
        d[i] = dy[o];
    }
}

/// Learned position embeddings' forward pass: the table (`elems` a sample) added to each
/// sample.
pub(super) fn positions_forward(elems: usize, x: &[f32], params: &[Vec<f32>], out: &mut [f32]) {
    out.par_chunks_mut(elems)
        .zip(x.par_chunks(elems))
        .for_each(|(o, xi)| {
            for ((o, v), p) in o.iter_mut().zip(xi).zip(&params[0]) {
                *o = v + p;
            }
        });
}

/// Learned position embeddings' backward pass: the table's gradient summed over the
/// samples, and `dy` itself as the input's where it needs one.
pub(super) fn positions_backward(
    elems: usize,
    dy: &[f32],
    dx: Option<&mut [f32]>,
    dparams: &mut [Vec<f32>],
) {
    dparams[0].fill(0.0);
    for g in dy.chunks(elems) {
        for (d, v) in dparams[0].iter_mut().zip(g) {
            *d += v;
        }
    }
    if let Some(d) = dx {
        d.copy_from_slice(dy);
    }
}

/// Where the channel shuffle of `c` channels in `groups` moves channel `ch`: channel
/// `i c / groups + j` to `j groups + i`.
pub(super) fn shuffled(ch: usize, c: usize, groups: usize) -> usize {
    let per = c / groups;
    (ch % per) * groups + ch / per
}

/// The channel shuffle of `c` channels in `groups` at `vol` positions, for `n` samples.
pub(super) type Shuffle = (usize, usize, usize, usize);

/// The shuffle's forward pass.
pub(super) fn shuffle_forward((n, c, groups, vol): Shuffle, x: &[f32], out: &mut [f32]) {
    for b in 0..n {
        for ch in 0..c {
            let to = shuffled(ch, c, groups);
            out[(b * c + to) * vol..][..vol].copy_from_slice(&x[(b * c + ch) * vol..][..vol]);
        }
    }
}

/// The shuffle's backward pass: each channel's gradient from where it went.
pub(super) fn shuffle_backward((n, c, groups, vol): Shuffle, dy: &[f32], d: &mut [f32]) {
    for b in 0..n {
        for ch in 0..c {
            let from = shuffled(ch, c, groups);
            d[(b * c + ch) * vol..][..vol].copy_from_slice(&dy[(b * c + from) * vol..][..vol]);
        }
    }
}

/// Concatenation's forward pass along channels: `channels` of each input at `vol`
/// positions, for `n` samples.
pub(super) fn concat_forward(
    n: usize,
    channels: &[usize],
    vol: usize,
    inputs: &[&[f32]],
    out: &mut [f32],
) {
    let total: usize = channels.iter().sum();
    for b in 0..n {
        let mut offset = 0;
        for (k, &ch) in channels.iter().enumerate() {
            out[(b * total + offset) * vol..][..ch * vol]
                .copy_from_slice(&inputs[k][b * ch * vol..][..ch * vol]);
            offset += ch;
        }
    }
}

/// Concatenation's backward pass: each wanted input's channels of the gradient.
pub(super) fn concat_backward(
    n: usize,
    channels: &[usize],
    vol: usize,
    dy: &[f32],
    dx: &mut [Option<&mut [f32]>],
) {
    let total: usize = channels.iter().sum();
    let mut offset = 0;
    for (k, &ch) in channels.iter().enumerate() {
        if let Some(d) = dx[k].as_deref_mut() {
            for b in 0..n {
                d[b * ch * vol..][..ch * vol]
                    .copy_from_slice(&dy[(b * total + offset) * vol..][..ch * vol]);
            }
        }
        offset += ch;
    }
}

/// The input position a tiled output position reads.
pub(super) fn map_tile(p: usize, input: &[usize; 3], output: &[usize; 3]) -> usize {
    let (od, oh, ow) = (
        p / (output[1] * output[2]),
        (p / output[2]) % output[1],
        p % output[2],
    );
    ((od % input[0]) * input[1] + oh % input[1]) * input[2] + ow % input[2]
}

/// The input position a nearest-upsampled output position reads.
pub(super) fn map_upsample(
    p: usize,
    input: &[usize; 3],
    output: &[usize; 3],
    factor: &[usize; 3],
) -> usize {
    let (od, oh, ow) = (
        p / (output[1] * output[2]),
        (p / output[2]) % output[1],
        p % output[2],
    );
    ((od / factor[0]) * input[1] + oh / factor[1]) * input[2] + ow / factor[2]
}

/// A copy from `input` spatial dims to `output` ones where output position `p` reads input
/// position `from(p)`, per plane: forward.
pub(super) fn gather_forward(
    input: &[usize; 3],
    output: &[usize; 3],
    from: impl Fn(usize) -> usize + Sync,
    x: &[f32],
    out: &mut [f32],
) {
    let (iv, ov) = (
        input.iter().product::<usize>(),
        output.iter().product::<usize>(),
    );
    out.par_chunks_mut(ov)
        .zip(x.par_chunks(iv))
        .for_each(|(o, xi)| {
            for (p, v) in o.iter_mut().enumerate() {
                *v = xi[from(p)];
            }
        });
}

/// [`gather_forward`]'s backward pass: each input position sums the gradients of the
/// output positions that read it.
pub(super) fn gather_backward(
    input: &[usize; 3],
    output: &[usize; 3],
    from: impl Fn(usize) -> usize + Sync,
    dy: &[f32],
    d: &mut [f32],
) {
    let (iv, ov) = (
        input.iter().product::<usize>(),
        output.iter().product::<usize>(),
    );
    d.par_chunks_mut(iv)
        .zip(dy.par_chunks(ov))
        .for_each(|(di, g)| {
            di.fill(0.0);
            for (p, v) in g.iter().enumerate() {
                di[from(p)] += v;
            }
        });
}

/// Where each element of a sample of `a` dims finds its factor in a second input of `b` dims
/// broadcast to it (extent 1 where they differ).
pub(super) struct Broadcast {
    a_len: usize,
    b_len: usize,
    /// Per dimension, from the last: `a`'s extent, and `b`'s stride (zero where broadcast).
    dims: Vec<(usize, usize)>,
}

impl Broadcast {
    pub(super) fn new(a: &[usize], b: &[usize]) -> Broadcast {
        let mut dims = Vec::with_capacity(a.len());
        let mut stride = 1;
        for (&ea, &eb) in a.iter().zip(b).rev() {
            dims.push((ea, if eb == 1 { 0 } else { stride }));
            stride *= eb;
        }
        Broadcast {
            a_len: a.iter().product(),
            b_len: b.iter().product(),
            dims,
        }
    }

    fn b_index(&self, mut i: usize) -> usize {
        let mut j = 0;
        for &(extent, stride) in &self.dims {
            j += (i % extent) * stride;
            i /= extent;
        }
        j
    }

    /// The gate's forward pass over `n` samples: `x` times the second input `xb`
    /// broadcast.
    pub(super) fn forward(&self, n: usize, x: &[f32], xb: &[f32], out: &mut [f32]) {
        let (va, vb) = (self.a_len, self.b_len);
        for s in 0..n {
            let (xa, xb) = (&x[s * va..][..va], &xb[s * vb..][..vb]);
            for (i, o) in out[s * va..][..va].iter_mut().enumerate() {
                *o = xa[i] * xb[self.b_index(i)];
            }
        }
    }

    /// The gate's backward pass: the first input's gradient is `dy` times the second
    /// broadcast; the second's sums `dy` times the first over what was broadcast.
    pub(super) fn backward(
        &self,
        n: usize,
        x: &[f32],
        xb: &[f32],
        dy: &[f32],
        dx: &mut [Option<&mut [f32]>],
    ) {
        let (va, vb) = (self.a_len, self.b_len);
        let (da, db) = dx.split_at_mut(1);
        if let Some(d) = da[0].as_deref_mut() {
            for s in 0..n {
                let xb = &xb[s * vb..][..vb];
                let g = &dy[s * va..][..va];
                for (i, o) in d[s * va..][..va].iter_mut().enumerate() {
                    *o = g[i] * xb[self.b_index(i)];
                }
            }
        }
        if let Some(d) = db[0].as_deref_mut() {
            d.fill(0.0);
            for s in 0..n {
                let xa = &x[s * va..][..va];
                let g = &dy[s * va..][..va];
                let ds = &mut d[s * vb..][..vb];
                for i in 0..va {
                    ds[self.b_index(i)] += g[i] * xa[i];
                }
            }
        }
    }
}
