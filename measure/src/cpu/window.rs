//! Shifted-window attention (Swin, Liu et al. 2021; torchvision's
//! `shifted_window_attention`) on the CPU: each sample's map `[3 C, H, W]` of stacked
//! queries, keys and values is rolled by `-shift` along both axes and split into windows of
//! `window x window` positions; each window is one sample of [`Attention`] over its
//! positions, with the relative position bias (a table of `(2 window - 1)^2` rows of one
//! value a head, looked up by the two positions' offsets) and, where shifted, the mask of
//! -100 between positions from different regions of the rolled map added to its scores;
//! the windows' outputs go back to their places and the roll is undone.

use super::saved::Aux;
use super::seq::Attention;

/// torchvision's mask value between positions the roll brought together.
const MASKED: f32 = -100.0;

/// Window attention of `heads` over `n` maps of `c` channels (the input has `3 c`) at
/// `h x w` positions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Window {
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) h: usize,
    pub(crate) w: usize,
    pub(crate) heads: usize,
    pub(crate) window: usize,
    pub(crate) shift: usize,
}

impl Window {
    fn windows(&self) -> usize {
        (self.h / self.window) * (self.w / self.window)
    }

    fn positions(&self) -> usize {
        self.window * self.window
    }

    /// The attention each window is a sample of.
    fn inner(&self) -> Attention {
        let s = self.positions();
        Attention {
            n: self.n * self.windows(),
            heads: self.heads,
            kv_heads: self.heads,
            hidden: self.c,
            seq: s,
            seq_kv: s,
            causal: false,
            dropout: 0.0,
            fused: false,
            stacked: true,
        }
    }

    /// Rows of the relative position bias table.
    fn table_rows(&self) -> usize {
        (2 * self.window - 1) * (2 * self.window - 1)
    }

    /// The parameter sizes: the bias table `[(2 window - 1)^2, heads]`.
    pub(crate) fn param_sizes(&self) -> Vec<usize> {
        vec![self.table_rows() * self.heads]
    }

    /// Where window position `l` of window `k` comes from in the map, as `y W + x`:
    /// the rolled map's `(y, x)` is the map's `((y + shift) mod H, (x + shift) mod W)`.
    fn sources(&self) -> Vec<usize> {
        let (ws, across) = (self.window, self.w / self.window);
        let mut out = Vec::with_capacity(self.h * self.w);
        for k in 0..self.windows() {
            for l in 0..self.positions() {
                let y = (k / across) * ws + l / ws;
                let x = (k % across) * ws + l % ws;
                out.push(((y + self.shift) % self.h) * self.w + (x + self.shift) % self.w);
            }
        }
        out
    }

    /// The bias table's row that positions `s` and `t` of a window read.
    fn table_row(&self, s: usize, t: usize) -> usize {
        let ws = self.window;
        let dy = s / ws + ws - 1 - t / ws;
        let dx = s % ws + ws - 1 - t % ws;
        dy * (2 * ws - 1) + dx
    }

    /// The region of the rolled map's row or column `i` of `size` (torchvision's three
    /// slices: before the last window, the last window's unshifted part, the shift).
    fn region(&self, i: usize, size: usize) -> usize {
        if i < size - self.window {
            0
        } else if i < size - self.shift {
            1
        } else {
            2
        }
    }

    /// The scores added per window and head, `[windows, heads, S, S]`: the bias, and the
    /// mask where shifted.
    fn added(&self, table: &[f32]) -> Vec<f32> {
        let (s, ws, across) = (self.positions(), self.window, self.w / self.window);
        let mut out = Vec::with_capacity(self.windows() * self.heads * s * s);
        for k in 0..self.windows() {
            let region = |l: usize| {
                let (y, x) = ((k / across) * ws + l / ws, (k % across) * ws + l % ws);
                (self.region(y, self.h), self.region(x, self.w))
            };
            for h in 0..self.heads {
                for a in 0..s {
                    for b in 0..s {
                        let mut v = table[self.table_row(a, b) * self.heads + h];
                        if self.shift > 0 && region(a) != region(b) {
                            v += MASKED;
                        }
                        out.push(v);
                    }
                }
            }
        }
        out
    }

    /// `x` (`n` maps of `channels`) in windows: `[n windows, channels, S]`.
    fn split(&self, x: &[f32], channels: usize, sources: &[usize]) -> Vec<f32> {
        let hw = self.h * self.w;
        let mut out = Vec::with_capacity(x.len());
        for b in 0..self.n {
            for k in 0..self.windows() {
                let from = &sources[k * self.positions()..][..self.positions()];
                for ch in 0..channels {
                    let plane = &x[(b * channels + ch) * hw..][..hw];
                    out.extend(from.iter().map(|&p| plane[p]));
                }
            }
        }
        out
    }

    /// The reverse of [`Window::split`] into `out`.
    fn merge(&self, windows: &[f32], channels: usize, sources: &[usize], out: &mut [f32]) {
        let (hw, s) = (self.h * self.w, self.positions());
        let mut at = 0;
        for b in 0..self.n {
            for k in 0..self.windows() {
                let to = &sources[k * s..][..s];
                for ch in 0..channels {
                    let plane = &mut out[(b * channels + ch) * hw..][..hw];
                    for (&p, v) in to.iter().zip(&windows[at..][..s]) {
                        plane[p] = *v;
                    }
                    at += s;
                }
            }
        }
    }

    pub(crate) fn forward(
        &self,
        x: &[f32],
        params: &[Vec<f32>],
        out: &mut [f32],
        aux: &mut Aux,
        threads: usize,
        seed: u64,
    ) {
        let sources = self.sources();
        let windows = self.split(x, 3 * self.c, &sources);
        let mut o = vec![0.0f32; out.len()];
        let added = self.added(&params[0]);
        self.inner()
            .forward_with(&[&windows], &mut o, aux, threads, seed, Some(&added));
        self.merge(&o, self.c, &sources, out);
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward(
        &self,
        x: &[f32],
        dy: &[f32],
        params: &[Vec<f32>],
        aux: &Aux,
        dx: Option<&mut [f32]>,
        dparams: &mut [Vec<f32>],
        threads: usize,
        seed: u64,
    ) {
        let sources = self.sources();
        let windows = self.split(x, 3 * self.c, &sources);
        let dyw = self.split(dy, self.c, &sources);
        let added = self.added(&params[0]);
        let mut dadded = vec![0.0f32; added.len()];
        let mut dw = vec![0.0f32; windows.len()];
        {
            let mut slots = [Some(dw.as_mut_slice())];
            self.inner().backward_with(
                &[&windows],
                &dyw,
                aux,
                &mut slots,
                threads,
                seed,
                Some(&added),
                Some(&mut dadded),
            );
        }
        // Each table entry's gradient sums the scores that read it, over windows.
        let (s, table) = (self.positions(), &mut dparams[0]);
        table.fill(0.0);
        for (i, g) in dadded.iter().enumerate() {
            let (h, pair) = ((i / (s * s)) % self.heads, i % (s * s));
            table[self.table_row(pair / s, pair % s) * self.heads + h] += g;
        }
        if let Some(d) = dx {
            self.merge(&dw, 3 * self.c, &sources, d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(shift: usize) -> Window {
        Window {
            n: 1,
            c: 2,
            h: 4,
            w: 6,
            heads: 1,
            window: 2,
            shift,
        }
    }

    /// Every position is in one window once; the roll moves the first row and column to
    /// the last window.
    #[test]
    fn windows_cover_the_map_once() {
        for shift in [0, 1] {
            let mut seen = layer(shift).sources();
            seen.sort_unstable();
            assert_eq!(seen, (0..24).collect::<Vec<_>>());
        }
        // Unshifted, window 0 holds (0, 0), (0, 1), (1, 0), (1, 1).
        assert_eq!(&layer(0).sources()[..4], &[0, 1, 6, 7]);
        // Rolled by one: window 0 starts at (1, 1).
        assert_eq!(&layer(1).sources()[..4], &[7, 8, 13, 14]);
    }

    /// torchvision's relative position index: the offsets `(dy, dx)` shifted by
    /// `window - 1`, row-major over `2 window - 1` columns; the mask separates the
    /// regions the roll brought together.
    #[test]
    fn bias_rows_and_mask_follow_torchvision() {
        let l = layer(1);
        assert_eq!(l.table_row(0, 0), 4);
        assert_eq!(l.table_row(3, 0), 8);
        assert_eq!(l.table_row(0, 3), 0);
        let table: Vec<f32> = (0..9).map(|v| v as f32).collect();
        let added = l.added(&table);
        // The last window (bottom right) holds positions of four regions: only a position
        // and itself share one.
        let last = &added[(l.windows() - 1) * 16..][..16];
        for a in 0..4 {
            for b in 0..4 {
                let masked = last[a * 4 + b] < -50.0;
                assert_eq!(masked, a != b, "{a} {b}");
            }
        }
        // The first window is one region.
        assert!(added[..16].iter().all(|&v| v >= 0.0));
    }
}
