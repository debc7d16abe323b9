//! A safe face on the `gemm` crate (`gemm 0.19`, chosen by measurement: about as fast as
//! OpenBLAS at 2048^3 with `x86-v4`, as `scripts/bench-cpu` compares them).
//!
//! Matrices are views into slices with explicit row and column strides; every view is
//! bounds-checked before the one `unsafe` call.

use gemm::Parallelism;

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
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    let s = |v: usize| isize::try_from(v).unwrap_or(isize::MAX);
    // SAFETY: every view was checked above to stay inside its slice for all
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
