//! A safe face on the `gemm` crate (`gemm 0.19`, chosen by measurement: about as fast as
//! OpenBLAS at 2048^3 with `x86-v4`, as `scripts/bench-cpu` compares them).
//!
//! Matrices are views into slices with explicit row and column strides; every view is
//! bounds-checked before the one `unsafe` call.

use gemm::Parallelism;
use rayon::prelude::*;

/// A matrix view: `rows x cols` elements of `data`, element (i, j) at `i * rs + j * cs`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a, T> {
    pub(crate) data: &'a [T],
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

/// A mutable matrix view.
#[derive(Debug)]
pub(crate) struct ViewMut<'a, T> {
    pub(crate) data: &'a mut [T],
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

impl<'a, T> View<'a, T> {
    /// A row-major `rows x cols` matrix.
    pub(crate) fn rows(data: &'a [T], rows: usize, cols: usize) -> Self {
        View {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose (no copy).
    pub(crate) fn t(self) -> Self {
        View {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len()
    }
}

impl<'a, T> ViewMut<'a, T> {
    /// A row-major `rows x cols` matrix with row stride `rs`.
    pub(crate) fn rows(data: &'a mut [T], rows: usize, cols: usize, rs: usize) -> Self {
        ViewMut {
            data,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len()
    }
}

/// Element types the GEMM kernels support.
pub(crate) trait Element: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
}

impl Element for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}

impl Element for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}

/// `dst = lhs x rhs`, or `dst += lhs x rhs` with `accumulate`, on `threads` threads.
///
/// # Panics
/// If the shapes do not match or a view reaches past its slice: both are bugs in the
/// caller, never a consequence of user input.
pub(crate) fn matmul<T: Element>(
    dst: ViewMut<'_, T>,
    lhs: View<'_, T>,
    rhs: View<'_, T>,
    accumulate: bool,
    threads: usize,
) {
    assert_eq!(lhs.cols, rhs.rows, "inner dimensions");
    assert_eq!((dst.rows, dst.cols), (lhs.rows, rhs.cols), "output shape");
    assert!(dst.fits() && lhs.fits() && rhs.fits(), "view out of bounds");
    if dst.rows == 0 || dst.cols == 0 {
        return;
    }
    if lhs.cols == 0 {
        if !accumulate {
            for i in 0..dst.rows {
                for j in 0..dst.cols {
                    dst.data[i * dst.rs + j * dst.cs] = T::ZERO;
                }
            }
        }
        return;
    }
    let parts = row_parts(&dst, threads);
    if parts > 1 {
        split_rows(dst, lhs, rhs, accumulate, parts);
    } else if threads > 1 {
        product(dst, lhs, rhs, accumulate, Parallelism::Rayon(threads));
    } else {
        product(dst, lhs, rhs, accumulate, Parallelism::None);
    }
}

/// The GEMM crate's product on views [`matmul`] checked.
fn product<T: Element>(
    dst: ViewMut<'_, T>,
    lhs: View<'_, T>,
    rhs: View<'_, T>,
    accumulate: bool,
    parallelism: Parallelism,
) {
    assert!(dst.fits() && lhs.fits() && rhs.fits(), "view out of bounds");
    let s = |v: usize| isize::try_from(v).unwrap_or(isize::MAX);
    // SAFETY: every view was checked just above to stay inside its slice for all
    // (row, col) < (rows, cols) with its non-negative strides; `dst` is borrowed mutably and
    // exclusively, so it cannot alias `lhs` or `rhs`; T is f32 or f64, which gemm supports.
    // gemm computes dst = alpha * dst + beta * lhs * rhs, reading dst only if read_dst.
    #[allow(unsafe_code)]
    unsafe {
        gemm::gemm(
            dst.rows,
            dst.cols,
            lhs.cols,
            dst.data.as_mut_ptr(),
            s(dst.cs),
            s(dst.rs),
            accumulate,
            lhs.data.as_ptr(),
            s(lhs.cs),
            s(lhs.rs),
            rhs.data.as_ptr(),
            s(rhs.cs),
            s(rhs.rs),
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Fewest output rows per thread for which threads take a band of rows each.
const MIN_BAND_ROWS: usize = 48;

/// Bands of rows a product on `threads` threads is split into (1: the GEMM crate's own
/// threading runs it). The output's rows `[i0, i1)` lie in `data[i0 rs .. i1 rs]` only when
/// each row ends before the next begins (`cs = 1`, `rs >= cols`); other layouts are not
/// split.
fn row_parts<T>(dst: &ViewMut<'_, T>, threads: usize) -> usize {
    if threads > 1 && dst.cs == 1 && dst.rs >= dst.cols && dst.rows >= threads * MIN_BAND_ROWS {
        threads
    } else {
        1
    }
}

/// Runs the product as `parts` single-threaded products on bands of the output's rows, in
/// parallel. The GEMM crate's own threading splits products in a way that scales poorly on
/// few cores for tall-and-thin shapes (a 392 x 512 x 4608 product gains nothing from a
/// second thread), while bands of rows scale with the cores: each thread packs the right
/// operand once, a small cost next to its share of the FLOPs when bands are tall.
fn split_rows<T: Element>(
    dst: ViewMut<'_, T>,
    lhs: View<'_, T>,
    rhs: View<'_, T>,
    accumulate: bool,
    parts: usize,
) {
    let band = dst.rows.div_ceil(parts);
    let (rs, cols) = (dst.rs, dst.cols);
    let mut bands = Vec::with_capacity(parts);
    let mut rest = dst.data;
    let mut i0 = 0;
    while i0 < dst.rows {
        let rows = band.min(dst.rows - i0);
        let (head, tail) = if i0 + rows < dst.rows {
            rest.split_at_mut(rows * rs)
        } else {
            (rest, &mut [][..])
        };
        bands.push((i0, ViewMut::rows(head, rows, cols, rs)));
        rest = tail;
        i0 += rows;
    }
    bands.into_par_iter().for_each(|(i0, d)| {
        let rows = d.rows;
        let l = View {
            data: &lhs.data[i0 * lhs.rs..],
            rows,
            ..lhs
        };
        product(d, l, rhs, accumulate, Parallelism::None);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    c[i * n + j] += a[i * k + p] * b[p * n + j];
                }
            }
        }
        c
    }

    #[test]
    fn matches_the_naive_product_with_strides_and_accumulation() {
        let (m, n, k) = (7, 5, 9);
        let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos()).collect();
        let expected = naive(&a, &b, m, n, k);
        for threads in [1, 2] {
            // Write into a wider buffer (row stride 8) to exercise strides.
            let mut c = vec![1.0; m * 8];
            matmul(
                ViewMut::rows(&mut c, m, n, 8),
                View::rows(&a, m, k),
                View::rows(&b, k, n),
                false,
                threads,
            );
            for i in 0..m {
                for j in 0..n {
                    assert!((c[i * 8 + j] - expected[i * n + j]).abs() < 1e-12);
                }
                assert_eq!(c[i * 8 + 7], 1.0, "outside the view is untouched");
            }
            matmul(
                ViewMut::rows(&mut c, m, n, 8),
                View::rows(&a, m, k),
                View::rows(&b, k, n),
                true,
                threads,
            );
            assert!((c[0] - 2.0 * expected[0]).abs() < 1e-12);
        }
    }

    #[test]
    fn f32_matches_the_naive_product() {
        let (m, n, k) = (33, 17, 65);
        let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos()).collect();
        let expected = naive(&a, &b, m, n, k);
        let (a32, b32): (Vec<f32>, Vec<f32>) = (
            a.iter().map(|&v| v as f32).collect(),
            b.iter().map(|&v| v as f32).collect(),
        );
        for threads in [1, 2] {
            let mut c = vec![0.0f32; m * n];
            matmul(
                ViewMut::rows(&mut c, m, n, n),
                View::rows(&a32, m, k),
                View::rows(&b32, k, n),
                false,
                threads,
            );
            for (x, y) in c.iter().zip(&expected) {
                assert!((f64::from(*x) - y).abs() < 1e-4, "{x} vs {y}");
            }
        }
    }

    /// Tall products run as bands of rows, one per thread: every band, the rows between
    /// bands and the elements past each row (a row stride wider than the row) come out right,
    /// with a transposed left operand and accumulation.
    #[test]
    fn bands_of_rows_match_the_naive_product() {
        let (m, n, k) = (2 * MIN_BAND_ROWS + 7, 9, 13);
        assert_eq!(row_parts(&ViewMut::rows(&mut [0.0f64; 0], m, n, n), 2), 2);
        let at: Vec<f64> = (0..k * m).map(|i| (i as f64 * 0.29).sin()).collect(); // k x m
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.13).cos()).collect();
        let a: Vec<f64> = (0..m * k).map(|idx| at[(idx % k) * m + idx / k]).collect();
        let expected = naive(&a, &b, m, n, k);
        let mut c = vec![1.0; m * (n + 2)];
        for accumulate in [false, true] {
            matmul(
                ViewMut::rows(&mut c, m, n, n + 2),
                View::rows(&at, k, m).t(),
                View::rows(&b, k, n),
                accumulate,
                2,
            );
        }
        for i in 0..m {
            for j in 0..n {
                let got = c[i * (n + 2) + j];
                assert!(
                    (got - 2.0 * expected[i * n + j]).abs() < 1e-12,
                    "({i}, {j})"
                );
            }
            assert_eq!(c[i * (n + 2) + n], 1.0, "outside the view is untouched");
        }
    }

    #[test]
    fn transposed_views() {
        let (m, n, k) = (3, 4, 2);
        let at: Vec<f64> = (0..k * m).map(|i| i as f64).collect(); // k x m
        let b: Vec<f64> = (0..k * n).map(|i| (i * i) as f64).collect();
        let a: Vec<f64> = (0..m * k).map(|idx| at[(idx % k) * m + idx / k]).collect();
        let mut c = vec![0.0; m * n];
        matmul(
            ViewMut::rows(&mut c, m, n, n),
            View::rows(&at, k, m).t(),
            View::rows(&b, k, n),
            false,
            1,
        );
        assert_eq!(c, naive(&a, &b, m, n, k));
    }

    #[test]
    #[should_panic(expected = "view out of bounds")]
    fn out_of_bounds_views_are_caught() {
        let a = vec![0.0f32; 5];
        let b = vec![0.0f32; 4];
        let mut c = vec![0.0f32; 4];
        matmul(
            ViewMut::rows(&mut c, 2, 2, 2),
            View::rows(&a, 2, 3),
            View::rows(&b, 3, 2),
            false,
            1,
        );
    }
}
