//! Gradient allreduce under LogGP (docs/ARCHITECTURE.md "Formulas"; Thakur, Rabenseifner and Gropp,
//! *Optimization of Collective Communication Operations in MPICH*, IJHPCA 2005; Sanders,
//! Speck and Träff, *Two-tree algorithms for full bandwidth broadcast, reduction and scan*,
//! Parallel Computing 2009).
//!
//! Notation: p devices (k per node on n nodes), S bytes, `alpha = L + 2o` per message,
//! `beta = G` seconds per byte, `gamma` seconds per byte of reduction arithmetic.
//!
//! - **ring**: `2(p-1) alpha + 2((p-1)/p) S beta + ((p-1)/p) S gamma` (each of the 2(p-1)
//!   steps at least `g` long);
//! - **tree** (pipelined double binary tree, [`DoubleTree`]): two binary trees, each
//!   reducing and then broadcasting half the vector in segments of `c` =
//!   [`TREE_SEGMENT_BYTES`], pipelined in rounds: `n + L - 1` rounds for `n` segments per
//!   tree and `L` stages (the root's height plus the deepest leaf's depth); each steady
//!   round a step of the most bytes a rank sends in it (`c` per message, at most 4
//!   messages: 2S beta in all for large p), the `2(L-1)` rounds that fill and drain the
//!   pipeline half that, plus `n` reductions of a segment per child;
//! - **rhd** (recursive halving-doubling, p a power of two):
//!   `sum over rounds of 2 (alpha + m_r beta_r) + ((p-1)/p) S gamma`, round r moving
//!   `m_r = S / 2^r` between ranks `p / 2^r` apart;
//! - **rd** (recursive doubling, p a power of two): `log2(p)` rounds, each exchanging the
//!   whole vector with a partner `1, 2, ..., p/2` apart and adding it:
//!   `log2(p) (alpha + S beta + S gamma)` — the small-message algorithm of MPI libraries;
//! - **hier**: reduce-scatter in the node `(k-1)(alpha_i + (S/k) beta_i)`, a ring allreduce
//!   of `S/k` bytes among the n nodes run by all k devices at once, all-gather in the node
//!   `(k-1)(alpha_i + (S/k) beta_i)`, plus the reductions.
//!
//! Links: inside a node, the device fabric (NVLink; PCIe peer-to-peer when there is none).
//! Between nodes, ranks are placed node by node; a ring or tree crosses each node boundary
//! on `min(nics, k)` parallel channels (as NCCL does), so its bottleneck is
//! `max(beta_intra, 1 / (min(nics, k) x nic_bw))`; where all k devices of a node exchange
//! with other nodes at once (rhd's long-distance rounds, hier's inter-node stage) each gets
//! `1/k` of the node's network. The reduction is memory-bound: `gamma = 3 / HBM bandwidth`
//! (read two operands, write one).
//!
//! Measured links ([`Banded`]): a calibrated profile replaces `alpha + m beta` by the measured
//! cost of one exchange step — both ranks sending and receiving `m` bytes at once, as every
//! step of these algorithms does — fitted per message-size band (MPI libraries switch
//! protocols, and copies fall out of caches, as messages grow; Netgauge reports LogGP per
//! size range for the same reason), and `S gamma` by the measured reduction kernel per band.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::units::{Bytes, Seconds};

/// An allreduce algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Ring.
    Ring,
    /// Pipelined double binary tree.
    Tree,
    /// Recursive halving-doubling (Rabenseifner).
    Rhd,
    /// Recursive doubling: whole-vector exchanges, log2(p) rounds.
    Rd,
    /// Hierarchical: reduce-scatter in the node, allreduce across nodes, all-gather.
    Hier,
    /// Whichever of the above is fastest.
    Best,
}

impl Algorithm {
    /// Every concrete algorithm (`best` chooses among these).
    pub const CONCRETE: [Algorithm; 5] = [
        Algorithm::Ring,
        Algorithm::Tree,
        Algorithm::Rhd,
        Algorithm::Rd,
        Algorithm::Hier,
    ];

    /// Name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Tree => "tree",
            Algorithm::Rhd => "rhd",
            Algorithm::Rd => "rd",
            Algorithm::Hier => "hier",
            Algorithm::Best => "best",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Algorithm::CONCRETE
            .into_iter()
            .chain([Algorithm::Best])
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                format!("unknown collective `{s}`; valid: ring, tree, rhd, rd, hier, best")
            })
    }
}

/// Most bands of a [`Banded`] cost.
pub const MAX_BANDS: usize = 6;

/// One size band of a [`Banded`] cost: `fixed_s + m per_byte_s` for `m <= max_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Band {
    /// Largest size in the band (infinite for the last).
    pub max_bytes: f64,
    /// Seconds at any size.
    pub fixed_s: f64,
    /// Seconds per byte.
    pub per_byte_s: f64,
}

/// A cost linear in the bytes within each of a few size bands (fitted from measurements).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Banded {
    len: usize,
    bands: [Band; MAX_BANDS],
}

impl Banded {
    /// The bands, smallest sizes first; `None` if there are none, more than [`MAX_BANDS`],
    /// or their sizes do not increase.
    pub fn new(bands: &[Band]) -> Option<Banded> {
        if bands.is_empty()
            || bands.len() > MAX_BANDS
            || bands.windows(2).any(|w| w[0].max_bytes >= w[1].max_bytes)
        {
            return None;
        }
        let mut b = Banded {
            len: bands.len(),
            bands: [Band {
                max_bytes: f64::INFINITY,
                fixed_s: 0.0,
                per_byte_s: 0.0,
            }; MAX_BANDS],
        };
        b.bands[..bands.len()].copy_from_slice(bands);
        Some(b)
    }

    /// The bands.
    pub fn bands(&self) -> &[Band] {
        &self.bands[..self.len]
    }

    /// The cost of `m` bytes: the band holding `m` (the last beyond every band).
    pub fn at(&self, m: f64) -> f64 {
        let bands = self.bands();
        let b = bands
            .iter()
            .find(|b| m <= b.max_bytes)
            .unwrap_or(&bands[bands.len() - 1]);
        b.fixed_s + m * b.per_byte_s
    }

    /// The same bands with every per-byte cost times `factor` (a shared link).
    fn scaled(mut self, factor: f64) -> Banded {
        for b in &mut self.bands[..self.len] {
            b.per_byte_s *= factor;
        }
        self
    }
}

/// Start-up, per-byte and per-message costs of one kind of link.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinkCost {
    /// `L + 2o` per message.
    pub alpha: f64,
    /// Seconds per byte (`G`).
    pub beta: f64,
    /// The least time between a sender's messages (`g`).
    pub g: f64,
    /// The measured cost of one exchange step, where a calibrated profile gives it: it
    /// replaces `alpha + m beta`.
    pub exchange: Option<Banded>,
}

impl LinkCost {
    /// One step of an algorithm that sends one `m`-byte message: `L + 2o + m G` (or the
    /// measured exchange), and at least `g` after the previous one.
    fn step(self, m: f64) -> f64 {
        let t = match self.exchange {
            Some(x) => x.at(m),
            None => self.alpha + m * self.beta,
        };
        t.max(self.g)
    }

    /// The link shared by `factor` senders: every per-byte cost times `factor`.
    fn shared(self, factor: f64) -> LinkCost {
        LinkCost {
            beta: self.beta * factor,
            exchange: self.exchange.map(|x| x.scaled(factor)),
            ..self
        }
    }
}

/// The start-up of one step of a collective over a link whose system file gives no latency:
/// NCCL's tuning model's hardware latency of a ring step for the low-latency protocol its
/// tuner picks for the short messages where a start-up matters (NVIDIA/nccl
/// `src/graph/tuning.cc`, `hwLat`, Ring/LL: NVLink 0.6 us, PCI 1.0 us, network 2.7 us; v2.30.7-1,
/// commit 73cf1122). Bulk transfers are bandwidth-bound, and the predictions that use these
/// say so.
pub const STEP_LATENCY_NVLINK_S: f64 = 0.6e-6;
/// A PCIe step's ([`STEP_LATENCY_NVLINK_S`]).
pub const STEP_LATENCY_PCIE_S: f64 = 1.0e-6;
/// A network step's ([`STEP_LATENCY_NVLINK_S`]).
pub const STEP_LATENCY_NETWORK_S: f64 = 2.7e-6;

/// The start-up of one collective call where the system file gives no link latency: NCCL's
/// tuning model's base latency of a ring allreduce for the low-latency protocol
/// (NVIDIA/nccl `src/graph/tuning.cc`, `baseLatencies`, Ring/LL: 6.6 us; v2.30.7-1, commit
/// 73cf1122), which its model adds once a call to the steps' hardware latencies
/// ([`STEP_LATENCY_NVLINK_S`]).
pub const CALL_LATENCY_S: f64 = 6.6e-6;

/// What an allreduce among the devices of a job runs on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fabric {
    /// Devices per node.
    pub k: u32,
    /// Nodes.
    pub n: u32,
    /// Between devices of a node (absent for one device per node).
    pub intra: Option<LinkCost>,
    /// Between nodes, one channel on one NIC (absent on one node).
    pub nic: Option<LinkCost>,
    /// NICs per node.
    pub nics: u32,
    /// Seconds per byte of reduction.
    pub gamma: f64,
    /// The measured reduction kernel, where a calibrated profile gives it: it replaces
    /// `m gamma`.
    pub reduction: Option<Banded>,
    /// Whether every latency used came from the system file (else NCCL's defaults,
    /// [`STEP_LATENCY_NVLINK_S`]).
    pub latencies_known: bool,
    /// The start-up of each collective call, seconds: NCCL's ([`CALL_LATENCY_S`]) where a
    /// latency is not in the system file, else none (a measured latency holds it).
    pub call_latency: f64,
}

impl Fabric {
    /// Total devices.
    pub fn devices(&self) -> u64 {
        u64::from(self.k) * u64::from(self.n)
    }

    /// Cost of a link that crosses node boundaries on parallel channels, as rings and
    /// trees do: the slower of the intra-node link and `min(nics, k)` NICs. A measured
    /// network exchange (spread over the channels) stands for the whole step: the node
    /// boundary is what paces a ring across nodes.
    fn boundary(&self) -> LinkCost {
        match (self.intra, self.nic) {
            (intra, Some(nic)) => {
                let channels = f64::from(self.nics.min(self.k).max(1));
                let wide = nic.shared(1.0 / channels);
                LinkCost {
                    alpha: wide.alpha.max(intra.map_or(0.0, |i| i.alpha)),
                    beta: wide.beta.max(intra.map_or(0.0, |i| i.beta)),
                    g: wide.g.max(intra.map_or(0.0, |i| i.g)),
                    exchange: wide.exchange,
                }
            }
            (Some(intra), None) => intra,
            (None, None) => LinkCost {
                alpha: 0.0,
                beta: 0.0,
                g: 0.0,
                exchange: None,
            },
        }
    }

    /// The link to a partner `distance` ranks away. Ranks are placed node by node:
    /// partners share a node only when the distance is below k (and k is a power of two,
    /// so they do); otherwise every device of the node talks across at once.
    fn partner(&self, distance: u64) -> Option<LinkCost> {
        let k = u64::from(self.k);
        if distance >= k || !k.is_power_of_two() {
            self.shared_nic().or(self.intra)
        } else {
            self.intra
        }
    }

    /// Seconds to reduce `m` bytes into a buffer.
    fn reduce(&self, m: f64) -> f64 {
        match self.reduction {
            Some(r) => r.at(m),
            None => m * self.gamma,
        }
    }

    /// A node's network shared by all k devices sending at once: `beta = k / (nics x bw)`.
    fn shared_nic(&self) -> Option<LinkCost> {
        self.nic
            .map(|nic| nic.shared(f64::from(self.k) / f64::from(self.nics.max(1))))
    }
}

/// The time of an allreduce and the algorithm that achieves it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Allreduce {
    /// The algorithm used (never `best`).
    pub algorithm: Algorithm,
    /// Its time.
    pub time: Seconds,
}

/// Segment of the pipelined double binary tree: each message of the tree carries at most
/// this many bytes (MPI libraries' segmented trees use segments of this order; NCCL's
/// chunks are 128 KiB to 512 KiB).
pub const TREE_SEGMENT_BYTES: f64 = 131_072.0;

/// An in-order binary tree over ranks `0..p`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryTree {
    parent: Vec<Option<usize>>,
    children: Vec<Vec<usize>>,
    height: Vec<usize>,
    depth: Vec<usize>,
}

impl BinaryTree {
    /// The in-order tree on positions `1..=p` (Sanders, Speck and Träff): position `x`
    /// with lowest set bit `b` has children `x - b/2` and `x + b/2` (descending left while
    /// past `p`); odd positions are leaves. Rank `label(x - 1)` sits at position `x`.
    fn in_order(p: usize, label: impl Fn(usize) -> usize) -> BinaryTree {
        let low = |x: usize| x & x.wrapping_neg();
        let mut parent = vec![None; p];
        let mut children = vec![Vec::new(); p];
        for x in 1..=p {
            let b = low(x);
            if b == 1 {
                continue;
            }
            let mut kids = vec![x - b / 2];
            let mut c = x + b / 2;
            while c > p && low(c) > 1 {
                c -= low(c) / 2;
            }
            if c <= p {
                kids.push(c);
            }
            for k in kids {
                children[label(x - 1)].push(label(k - 1));
                parent[label(k - 1)] = Some(label(x - 1));
            }
        }
        let mut height = vec![0; p];
        // Children sit at lower positions' levels: visit by increasing lowest bit.
        let mut order: Vec<usize> = (1..=p).collect();
        order.sort_by_key(|&x| low(x));
        for x in order {
            let r = label(x - 1);
            height[r] = children[r]
                .iter()
                .map(|&c| height[c] + 1)
                .max()
                .unwrap_or(0);
        }
        let mut depth = vec![0; p];
        order = (1..=p).collect();
        order.sort_by_key(|&x| std::cmp::Reverse(low(x)));
        for x in order {
            let r = label(x - 1);
            depth[r] = parent[r].map_or(0, |q| depth[q] + 1);
        }
        BinaryTree {
            parent,
            children,
            height,
            depth,
        }
    }

    /// The parent of rank `r`.
    pub fn parent(&self, r: usize) -> Option<usize> {
        self.parent[r]
    }

    /// The children of rank `r` (none, one or two).
    pub fn children(&self, r: usize) -> &[usize] {
        &self.children[r]
    }

    /// The height of rank `r` (leaves 0).
    pub fn height(&self, r: usize) -> usize {
        self.height[r]
    }

    /// The depth of rank `r` (the root 0).
    pub fn depth(&self, r: usize) -> usize {
        self.depth[r]
    }

    /// The root's height.
    pub fn top(&self) -> usize {
        self.height.iter().copied().max().unwrap_or(0)
    }

    /// The deepest leaf's depth.
    pub fn bottom(&self) -> usize {
        self.depth.iter().copied().max().unwrap_or(0)
    }
}

/// The two trees of a double binary tree over `p` ranks: the in-order tree, and the same
/// mirrored (`p` even) or shifted by one rank (`p` odd), so that a rank is an inner node
/// of at most one of them. Each reduces and broadcasts half the vector.
///
/// The schedule, in rounds: a rank of height `h` sends segment `k` to its parent in round
/// `k + h` (after adding its children's, received in the rounds before); the root has
/// segment `k` at the end of round `k + H - 1`, and a rank at depth `d` receives it on the
/// way down in round `k + H + d - 1` and passes it on in the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoubleTree {
    /// The two trees.
    pub trees: [BinaryTree; 2],
}

impl DoubleTree {
    /// The trees over `p` ranks.
    pub fn new(p: usize) -> DoubleTree {
        let first = BinaryTree::in_order(p, |i| i);
        let second = if p.is_multiple_of(2) {
            BinaryTree::in_order(p, |i| p - 1 - i)
        } else {
            BinaryTree::in_order(p, |i| (i + 1) % p)
        };
        DoubleTree {
            trees: [first, second],
        }
    }

    /// Rounds of the schedule for `segments` segments per tree.
    pub fn rounds(&self, segments: usize) -> usize {
        self.trees
            .iter()
            .map(|t| (segments + t.top() + t.bottom()).saturating_sub(1))
            .max()
            .unwrap_or(0)
    }

    /// The most messages a rank sends in one round: to its parent and its children, in
    /// both trees.
    pub fn most_messages(&self) -> usize {
        let p = self.trees[0].parent.len();
        (0..p)
            .map(|r| {
                self.trees
                    .iter()
                    .map(|t| t.children(r).len() + usize::from(t.parent(r).is_some()))
                    .sum::<usize>()
            })
            .max()
            .unwrap_or(0)
    }

    /// The most children a rank has in the two trees together (the segments it adds per
    /// round).
    pub fn most_children(&self) -> usize {
        let p = self.trees[0].parent.len();
        (0..p)
            .map(|r| {
                self.trees
                    .iter()
                    .map(|t| t.children(r).len())
                    .sum::<usize>()
            })
            .max()
            .unwrap_or(0)
    }
}

/// Segments per tree of the double binary tree for an `s`-byte vector, and the bytes of
/// each.
pub fn segments(s: f64) -> (usize, f64) {
    let half = s / 2.0;
    let n = (half / TREE_SEGMENT_BYTES).ceil().max(1.0);
    (n as usize, half / n)
}

/// What the time of a double binary tree depends on, by rank count, in closed form (a
/// sweep asks for thousands of counts; [`DoubleTree`] builds the trees and the tests check
/// the two agree). Both trees have the in-order tree's shape: the root at position
/// `2^floor(log2 p)` of height `floor(log2 p)`, and the leftmost leaf as deep as the root
/// is high; position 2 has two children and a parent once `p >= 4`, and is a leaf of the
/// other tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TreeShape {
    /// Pipeline stages: a tree's root height plus its deepest leaf's depth.
    stages: usize,
    /// [`DoubleTree::most_messages`].
    messages: usize,
    /// [`DoubleTree::most_children`].
    children: usize,
}

impl TreeShape {
    fn of(p: usize) -> TreeShape {
        let height = p.max(1).ilog2() as usize;
        let (messages, children) = match p {
            0 | 1 => (0, 0),
            2 => (2, 1),
            3 => (3, 2),
            _ => (4, 2),
        };
        TreeShape {
            stages: (2 * height).max(1),
            messages,
            children,
        }
    }
}

/// Like [`allreduce`] with plain numbers and no error text: `None` where the algorithm
/// does not apply. The sweep's hot path.
pub fn allreduce_time(fabric: &Fabric, bytes: f64, algorithm: Algorithm) -> Option<Allreduce> {
    if algorithm == Algorithm::Best {
        let mut best: Option<Allreduce> = None;
        for a in Algorithm::CONCRETE {
            if let Some(t) = time(fabric, bytes, a)
                && best.is_none_or(|b| t < b.time.value())
            {
                best = Some(Allreduce {
                    algorithm: a,
                    time: Seconds::new(t),
                });
            }
        }
        return best;
    }
    time(fabric, bytes, algorithm).map(|t| Allreduce {
        algorithm,
        time: Seconds::new(t),
    })
}

/// Time of an all-to-all among every device of `fabric` in which each device sends `bytes`,
/// an equal share to every device (its own share stays), as NCCL runs one (every pair's
/// send and receive at once, in one group): the shares to the node's other devices cross the
/// device link, those to other nodes the node's NICs, which `busy` devices of the node share
/// (its `k`, or more where other groups exchange at the same time), both at once; the
/// slower sets the time, after the call's start-up:
/// `max(alpha_d + (k - 1) / p S beta_d, alpha_n + (p - k) / p S beta_n busy / nics)`.
pub fn alltoall_time(fabric: &Fabric, bytes: f64, busy: u32) -> f64 {
    let p = fabric.devices();
    if p <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let (k, pf) = (f64::from(fabric.k), p as f64);
    let share = bytes / pf;
    let inside = match fabric.intra {
        Some(l) if fabric.k > 1 => l.step((k - 1.0) * share),
        _ => 0.0,
    };
    let across = match fabric.nic {
        Some(l) if fabric.n > 1 => l
            .shared(f64::from(busy.max(fabric.k)) / f64::from(fabric.nics.max(1)))
            .step((pf - k) * share),
        _ => 0.0,
    };
    fabric.call_latency + inside.max(across)
}

/// Time of an allreduce of `bytes` among every device of `fabric` with `algorithm`.
/// `Rhd` and `Rd` need a power-of-two device count; with `Best` it is skipped otherwise, and asked
/// for directly it is an error.
pub fn allreduce(fabric: &Fabric, bytes: Bytes, algorithm: Algorithm) -> Result<Allreduce> {
    allreduce_time(fabric, bytes.value(), algorithm).ok_or_else(|| {
        Error::argument(
            "collective",
            algorithm,
            format!(
                "{algorithm} needs a power-of-two device count, not {}; choose ring, tree, \
                 hier or best",
                fabric.devices()
            ),
        )
    })
}

/// The seconds of one algorithm (the call's start-up and its steps), or `None` where it
/// does not apply.
fn time(f: &Fabric, s: f64, algorithm: Algorithm) -> Option<f64> {
    let p = f.devices();
    if p <= 1 || s <= 0.0 {
        return Some(0.0);
    }
    steps_time(f, s, algorithm).map(|t| f.call_latency + t)
}

/// The seconds of one algorithm's steps.
#[allow(clippy::cast_precision_loss)]
fn steps_time(f: &Fabric, s: f64, algorithm: Algorithm) -> Option<f64> {
    let p = f.devices();
    let pf = p as f64;
    let frac = (pf - 1.0) / pf;
    Some(match algorithm {
        Algorithm::Ring => {
            // 2(p - 1) steps, each one message of S/p bytes; p - 1 of them reduce it.
            let l = f.boundary();
            let chunk = s / pf;
            2.0 * (pf - 1.0) * l.step(chunk) + (pf - 1.0) * f.reduce(chunk)
        }
        Algorithm::Tree => {
            let shape = TreeShape::of(usize::try_from(p).unwrap_or(usize::MAX));
            let (n, segment) = segments(s);
            let l = f.boundary();
            // Every stage busy in the steady rounds; the pipeline's filling and draining
            // rounds carry at most half as many messages.
            let steady = n.saturating_sub(shape.stages - 1);
            let edges = n + shape.stages - 1 - steady;
            let full = shape.messages as f64;
            steady as f64 * l.step(segment * full)
                + edges as f64 * l.step(segment * (full / 2.0).max(1.0))
                + n as f64 * shape.children as f64 * f.reduce(segment)
        }
        Algorithm::Rhd => {
            if !p.is_power_of_two() {
                return None;
            }
            let mut total = 0.0;
            let mut distance = p / 2;
            let mut message = s / 2.0;
            while distance >= 1 {
                // A reduce-scatter round and its all-gather round.
                total += 2.0 * f.partner(distance)?.step(message) + f.reduce(message);
                distance /= 2;
                message /= 2.0;
            }
            total
        }
        Algorithm::Rd => {
            if !p.is_power_of_two() {
                return None;
            }
            let mut total = 0.0;
            let mut distance = 1;
            while distance < p {
                total += f.partner(distance)?.step(s) + f.reduce(s);
                distance *= 2;
            }
            total
        }
        Algorithm::Hier => {
            let k = f64::from(f.k);
            let n = f64::from(f.n);
            let shard = s / k;
            // Reduce-scatter and all-gather in the node: k - 1 steps of S/k bytes each.
            let intra = f.intra.map_or(0.0, |i| 2.0 * (k - 1.0) * i.step(shard));
            // A ring among the nodes on each device's shard: 2(n - 1) steps of S/(k n).
            let inter = match f.shared_nic() {
                Some(l) if f.n > 1 => 2.0 * (n - 1.0) * l.step(shard / n),
                _ => 0.0,
            };
            intra + inter + f.reduce(frac * s)
        }
        Algorithm::Best => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    fn fabric(k: u32, n: u32, nics: u32) -> Fabric {
        Fabric {
            k,
            n,
            intra: (k > 1).then_some(LinkCost {
                alpha: 2e-6,
                beta: 1.0 / 150e9,
                g: 0.0,
                exchange: None,
            }),
            nic: (n > 1).then_some(LinkCost {
                alpha: 5e-6,
                beta: 1.0 / 12.5e9,
                g: 0.0,
                exchange: None,
            }),
            nics,
            gamma: 3.0 / 900e9,
            reduction: None,
            latencies_known: true,
            call_latency: 0.0,
        }
    }

    /// An all-to-all inside a node moves `(k - 1) / k` of each buffer over the device link;
    /// across nodes, the share leaving the node crosses NICs its devices share; one device
    /// moves nothing.
    #[test]
    fn alltoall_moves_the_shares_that_leave_each_device() {
        let s = 64e6;
        let node = fabric(8, 1, 0);
        let intra = node.intra.unwrap();
        let t = alltoall_time(&node, s, 8);
        assert!(
            (t - (intra.alpha + 7.0 / 8.0 * s * intra.beta)).abs() < 1e-12,
            "{t}"
        );
        let two = fabric(8, 2, 8);
        let nic = two.nic.unwrap();
        let t = alltoall_time(&two, s, 8);
        // Half of each buffer leaves the node; eight devices share eight NICs.
        let across = nic.alpha + 0.5 * s * nic.beta;
        assert!((t - across).abs() < 1e-12, "{t} vs {across}");
        assert!(t > alltoall_time(&node, s, 8));
        // Four of a node's devices in the group, all eight exchanging: the NICs shared by
        // eight still.
        let four = Fabric { k: 4, n: 2, ..two };
        let t = alltoall_time(&four, s, 8);
        let across = nic.alpha + 0.5 * s * nic.beta;
        assert!((t - across).abs() < 1e-12, "{t} vs {across}");
        assert_eq!(alltoall_time(&fabric(1, 1, 0), s, 1), 0.0);
    }

    #[test]
    fn one_device_needs_no_allreduce() {
        let t = allreduce(&fabric(1, 1, 0), Bytes::from_gb(1.0), Algorithm::Best).unwrap();
        assert_eq!(t.time, Seconds::ZERO);
    }

    #[test]
    fn ring_matches_the_formula_inside_a_node() {
        let f = fabric(8, 1, 0);
        let s = 100e6;
        let t = allreduce(&f, Bytes::new(s), Algorithm::Ring)
            .unwrap()
            .time
            .value();
        let expected =
            2.0 * 7.0 * 2e-6 + 2.0 * (7.0 / 8.0) * s / 150e9 + (7.0 / 8.0) * s * 3.0 / 900e9;
        assert!((t - expected).abs() < 1e-15, "{t} vs {expected}");
    }

    #[test]
    fn ring_tends_to_two_s_over_bandwidth() {
        // One device per node, one NIC: beta = 1 / 12.5 GB/s; gamma off to see 2 S G.
        let mut f = fabric(1, 2, 1);
        f.gamma = 0.0;
        let s = 1e9;
        let limit = 2.0 * s / 12.5e9;
        let mut last = 0.0;
        for n in [2u32, 8, 64, 512, 4096] {
            f.n = n;
            let t = allreduce(&f, Bytes::new(s), Algorithm::Ring)
                .unwrap()
                .time
                .value();
            let bandwidth_term = t - 2.0 * f64::from(n - 1) * 5e-6;
            assert!(bandwidth_term > last, "grows with p");
            assert!(bandwidth_term < limit);
            last = bandwidth_term;
        }
        assert!((limit - last) / limit < 1e-3, "{last} -> {limit}");
    }

    #[test]
    fn double_trees_make_every_rank_inner_in_at_most_one() {
        for p in 1..=33 {
            let d = DoubleTree::new(p);
            for t in &d.trees {
                let roots = (0..p).filter(|&r| t.parent(r).is_none()).count();
                assert_eq!(roots, 1, "p = {p}");
                for r in 0..p {
                    assert!(t.children(r).len() <= 2);
                    for &c in t.children(r) {
                        assert_eq!(t.parent(c), Some(r));
                        assert!(t.height(c) < t.height(r));
                        assert_eq!(t.depth(c), t.depth(r) + 1);
                    }
                }
                assert!(t.top() <= (p as f64).log2().floor() as usize);
            }
            for r in 0..p {
                let inner = d.trees.iter().filter(|t| !t.children(r).is_empty()).count();
                assert!(inner <= 1, "p = {p}: rank {r} is inner in both trees");
            }
        }
        for p in 1..=300 {
            let d = DoubleTree::new(p);
            let shape = TreeShape::of(p);
            let stages = d.trees.iter().map(|t| t.top() + t.bottom()).max().unwrap();
            assert_eq!(shape.stages, stages.max(1), "p = {p}");
            assert_eq!(shape.messages, d.most_messages(), "p = {p}");
            assert_eq!(shape.children, d.most_children(), "p = {p}");
        }
        // Eight ranks: positions 1..8, root 8 (rank 7) with children 4 and 12 -> 4 only.
        let t = &DoubleTree::new(8).trees[0];
        assert_eq!(t.children(7), &[3]);
        assert_eq!(t.children(3), &[1, 5]);
        assert_eq!((t.top(), t.bottom()), (3, 3));
    }

    #[test]
    fn tree_time_follows_its_schedule() {
        // Two ranks: each the root of one tree and the leaf of the other. With two
        // segments per tree: one up; one down and one up; one down.
        let mut f = fabric(2, 1, 0);
        f.gamma = 0.0;
        let s = 4.0 * TREE_SEGMENT_BYTES;
        let t = allreduce(&f, Bytes::new(s), Algorithm::Tree)
            .unwrap()
            .time
            .value();
        let expected =
            (2e-6 + 2.0 * TREE_SEGMENT_BYTES / 150e9) + 2.0 * (2e-6 + TREE_SEGMENT_BYTES / 150e9);
        assert!((t - expected).abs() < 1e-15, "{t} vs {expected}");
        // Many ranks: 2 S beta for large vectors, as for the ring, plus a start-up per
        // segment.
        let mut f = fabric(64, 1, 0);
        f.gamma = 0.0;
        let s = 1e9;
        let tree = allreduce(&f, Bytes::new(s), Algorithm::Tree)
            .unwrap()
            .time
            .value();
        let bound = 2.0 * s / 150e9 + (s / 2.0 / TREE_SEGMENT_BYTES).ceil() * 2e-6;
        assert!(tree > bound && tree < 1.05 * bound, "{tree} vs {bound}");
    }

    #[test]
    fn rd_exchanges_the_whole_vector_log2_p_times() {
        let f = fabric(8, 1, 0);
        let s = 1e6;
        let t = allreduce(&f, Bytes::new(s), Algorithm::Rd)
            .unwrap()
            .time
            .value();
        let expected = 3.0 * (2e-6 + s / 150e9 + s * 3.0 / 900e9);
        assert!((t - expected).abs() < 1e-15, "{t} vs {expected}");
        assert!(allreduce(&fabric(6, 1, 0), Bytes::new(s), Algorithm::Rd).is_err());
    }

    #[test]
    fn measured_bands_replace_alpha_beta_and_gamma() {
        let exchange = Banded::new(&[
            Band {
                max_bytes: 1e4,
                fixed_s: 1e-6,
                per_byte_s: 1e-10,
            },
            Band {
                max_bytes: f64::INFINITY,
                fixed_s: 5e-6,
                per_byte_s: 2e-10,
            },
        ])
        .unwrap();
        assert_eq!(exchange.at(1e3), 1e-6 + 1e-7);
        assert_eq!(exchange.at(1e6), 5e-6 + 2e-4);
        let reduction = Banded::new(&[Band {
            max_bytes: f64::INFINITY,
            fixed_s: 0.0,
            per_byte_s: 1e-10,
        }]);
        let mut f = fabric(2, 1, 0);
        f.intra = f.intra.map(|l| LinkCost {
            exchange: Some(exchange),
            ..l
        });
        f.reduction = reduction;
        // Two ranks: ring = two steps of S/2 and one reduction of S/2.
        let s = 2e6;
        let t = allreduce(&f, Bytes::new(s), Algorithm::Ring)
            .unwrap()
            .time
            .value();
        let expected = 2.0 * exchange.at(1e6) + 1e6 * 1e-10;
        assert!((t - expected).abs() < 1e-15, "{t} vs {expected}");
        // Bands must grow.
        let b = exchange.bands()[0];
        assert!(Banded::new(&[b, b]).is_none());
        assert!(Banded::new(&[]).is_none());
    }

    #[test]
    fn rhd_needs_a_power_of_two() {
        let err = allreduce(&fabric(6, 1, 0), Bytes::new(1e6), Algorithm::Rhd).unwrap_err();
        assert!(err.to_string().contains("power-of-two"), "{err}");
        let best = allreduce(&fabric(6, 1, 0), Bytes::new(1e6), Algorithm::Best).unwrap();
        assert_ne!(best.algorithm, Algorithm::Rhd);
    }

    #[test]
    fn best_is_the_fastest() {
        let f = fabric(8, 16, 4);
        for s in [1e3, 1e6, 1e9] {
            let best = allreduce(&f, Bytes::new(s), Algorithm::Best).unwrap();
            for a in Algorithm::CONCRETE {
                let t = allreduce(&f, Bytes::new(s), a).unwrap();
                assert!(best.time <= t.time, "{a} beat best at {s} bytes");
            }
        }
    }

    #[test]
    fn small_messages_favour_log_p_algorithms() {
        let f = fabric(8, 64, 4);
        let small = allreduce(&f, Bytes::new(64.0), Algorithm::Best).unwrap();
        assert!(
            matches!(
                small.algorithm,
                Algorithm::Tree | Algorithm::Rhd | Algorithm::Rd
            ),
            "{small:?}"
        );
    }

    #[test]
    fn catalog_fabric_needs_a_network_for_several_nodes() {
        let err = Fabric::of(&catalog::system("h100-sxm5-80gb").unwrap(), 2).unwrap_err();
        assert!(err.to_string().contains("no network"), "{err}");
        let f = Fabric::of(&catalog::system("cori-gpu").unwrap(), 4).unwrap();
        assert_eq!((f.k, f.n, f.nics), (8, 4, 4));
        assert!(
            !f.latencies_known,
            "Cori GPU's NVLink latency is not in the file"
        );
        // NCCL's start-up once a call, on top of its steps; none with measured latencies.
        assert_eq!(f.call_latency, CALL_LATENCY_S);
        let tiny = allreduce_time(&f, 4.0, Algorithm::Ring)
            .unwrap()
            .time
            .value();
        let without = Fabric {
            call_latency: 0.0,
            ..f
        };
        let bare = allreduce_time(&without, 4.0, Algorithm::Ring)
            .unwrap()
            .time
            .value();
        assert!(
            (tiny - bare - CALL_LATENCY_S).abs() < 1e-15,
            "{tiny} {bare}"
        );
        assert_eq!(
            allreduce_time(&f, 0.0, Algorithm::Ring)
                .unwrap()
                .time
                .value(),
            0.0
        );
    }
}
