//! A safe face on the system's OpenBLAS where one is installed ([`super::blas`]) and the
//! `gemm` crate otherwise (`gemm 0.19`: about as fast as OpenBLAS at 2048^3 with `x86-v4`
//! on AVX-512, as `scripts/bench-cpu` compares them, but about 70 % of it with AVX2).
//!
//! Matrices are views into slices with explicit row and column strides; every view is
//! bounds-checked before the `unsafe` calls.

use std::ffi::c_int;

use gemm::Parallelism;
use rayon::prelude::*;

use super::blas::{self, Blas, Gemm};

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
    /// The BLAS's GEMM of this type (`cblas_sgemm`, `cblas_dgemm`).
    fn cblas(blas: &Blas) -> Gemm<Self>;
}

impl Element for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    fn cblas(blas: &Blas) -> Gemm<Self> {
        blas.sgemm
    }
}

impl Element for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    fn cblas(blas: &Blas) -> Gemm<Self> {
        blas.dgemm
    }
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

/// The product on views [`matmul`] checked: on one thread by the BLAS where one is loaded
/// and the views are laid out as CBLAS takes them, else by the GEMM crate.
fn product<T: Element>(
    mut dst: ViewMut<'_, T>,
    lhs: View<'_, T>,
    rhs: View<'_, T>,
    accumulate: bool,
    parallelism: Parallelism,
) {
    assert!(dst.fits() && lhs.fits() && rhs.fits(), "view out of bounds");
    if matches!(parallelism, Parallelism::None)
        && let Some(blas) = blas::active()
        && blas_product(blas, &mut dst, lhs, rhs, accumulate)
    {
        return;
    }
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

/// CBLAS's row-major leading dimension of a `rows x cols` operand with strides `(rs, cs)`,
/// and whether CBLAS reads it transposed (stored as its `cols x rows` transpose); `None`
/// where neither stride is 1 (or a dimension exceeds CBLAS's 32-bit integers).
fn cblas_layout(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<(bool, c_int)> {
    let ld = |v: usize| c_int::try_from(v.max(1)).ok();
    c_int::try_from(rows.max(cols)).ok()?;
    if (cs == 1 || cols == 1) && (rows == 1 || rs >= cols) {
        Some((false, ld(if rows == 1 { cols } else { rs })?))
    } else if (rs == 1 || rows == 1) && (cols == 1 || cs >= rows) {
        Some((true, ld(if cols == 1 { rows } else { cs })?))
    } else {
        None
    }
}

/// `dst (+)= lhs rhs` by the BLAS's GEMM on this thread, where CBLAS can read the views
/// (`false`: it cannot, and nothing was written). A column-major output is computed as
/// its transpose, `dst^T = rhs^T lhs^T`, in row-major order.
fn blas_product<T: Element>(
    blas: &Blas,
    dst: &mut ViewMut<'_, T>,
    lhs: View<'_, T>,
    rhs: View<'_, T>,
    accumulate: bool,
) -> bool {
    let (m, n, k) = (dst.rows, dst.cols, lhs.cols);
    let (dst_t, ldc) = match cblas_layout(m, n, dst.rs, dst.cs) {
        Some(layout) => layout,
        None => return false,
    };
    // Row-major C = A B; a transposed output swaps and transposes the operands.
    let (m, n, a, b) = if dst_t {
        (n, m, rhs.t(), lhs.t())
    } else {
        (m, n, lhs, rhs)
    };
    let (Some((ta, lda)), Some((tb, ldb))) = (
        cblas_layout(a.rows, a.cols, a.rs, a.cs),
        cblas_layout(b.rows, b.cols, b.rs, b.cs),
    ) else {
        return false;
    };
    let (Ok(mi), Ok(ni), Ok(ki)) = (c_int::try_from(m), c_int::try_from(n), c_int::try_from(k))
    else {
        return false;
    };
    const ROW_MAJOR: c_int = 101;
    let trans = |t: bool| if t { 112 } else { 111 };
    let beta = if accumulate { T::ONE } else { T::ZERO };
    // SAFETY: the views were checked by the caller to stay inside their slices, and CBLAS
    // touches exactly the views' elements: element (i, j) of an untransposed operand at
    // `i ld + j` and of a transposed one at `j ld + i`, with `ld` the view's own stride
    // (a stride of a dimension of extent 1 is never used). `dst` is borrowed mutably and
    // exclusively. With beta = 0 the BLAS does not read `dst`. The function pointer is
    // CBLAS's GEMM of `T`, and the library stays loaded for the process's life.
    #[allow(unsafe_code)]
    unsafe {
        (T::cblas(blas))(
            ROW_MAJOR,
            trans(ta),
            trans(tb),
            mi,
            ni,
            ki,
            T::ONE,
            a.data.as_ptr(),
            lda,
            b.data.as_ptr(),
            ldb,
            beta,
            dst.data.as_mut_ptr(),
            ldc,
        );
    }
    true
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
    fn cblas_layouts() {
        // Row-major, with a wider row stride; transposed; a row or a column of one.
        assert_eq!(cblas_layout(3, 4, 6, 1), Some((false, 6)));
        assert_eq!(cblas_layout(3, 4, 1, 5), Some((true, 5)));
        assert_eq!(cblas_layout(1, 4, 0, 1), Some((false, 4)));
        assert_eq!(cblas_layout(4, 1, 1, 0), Some((false, 1)));
        // Neither stride 1, or a stride shorter than a row: not for CBLAS.
        assert_eq!(cblas_layout(3, 4, 8, 2), None);
        assert_eq!(cblas_layout(3, 4, 3, 1), None);
    }

    /// The BLAS path against the naive product for every layout CBLAS takes: a row- or
    /// column-major output (the latter computed as its transpose), each operand plain or
    /// transposed, with and without accumulation. Runs where an OpenBLAS is installed;
    /// `scripts/test` installs Debian's `libopenblas0-pthread` and sets
    /// `RIDGELINE_REQUIRE_OPENBLAS`, under which a missing one fails.
    #[test]
    fn blas_products_match_the_naive_product_in_every_layout() {
        let Ok(Some(blas)) = blas::resolve(None) else {
            assert!(
                std::env::var_os("RIDGELINE_REQUIRE_OPENBLAS").is_none(),
                "RIDGELINE_REQUIRE_OPENBLAS is set but no OpenBLAS was found"
            );
            eprintln!("no OpenBLAS installed: the BLAS path is not tested here");
            return;
        };
        let (m, n, k) = (13, 7, 11);
        let a: Vec<f64> = (0..m * k).map(|i| (i as f64 * 0.37).sin()).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i as f64 * 0.11).cos()).collect();
        let expected = naive(&a, &b, m, n, k);
        let transpose = |x: &[f64], r: usize, c: usize| -> Vec<f64> {
            (0..r * c).map(|idx| x[(idx % r) * c + idx / r]).collect()
        };
        let (at, bt) = (transpose(&a, m, k), transpose(&b, k, n));
        for (ta, tb, dst_t, accumulate) in
            (0..16).map(|i| (i & 1 > 0, i & 2 > 0, i & 4 > 0, i & 8 > 0))
        {
            let lhs = if ta {
                View::rows(&at, k, m).t()
            } else {
                View::rows(&a, m, k)
            };
            let rhs = if tb {
                View::rows(&bt, n, k).t()
            } else {
                View::rows(&b, k, n)
            };
            let mut c = vec![1.0; m * n + 3];
            let mut dst = if dst_t {
                ViewMut {
                    data: &mut c,
                    rows: m,
                    cols: n,
                    rs: 1,
                    cs: m,
                }
            } else {
                ViewMut::rows(&mut c, m, n, n)
            };
            assert!(blas_product(&blas, &mut dst, lhs, rhs, accumulate));
            let start = if accumulate { 1.0 } else { 0.0 };
            for i in 0..m {
                for j in 0..n {
                    let got = if dst_t { c[j * m + i] } else { c[i * n + j] };
                    let want = start + expected[i * n + j];
                    assert!(
                        (got - want).abs() < 1e-12,
                        "{ta} {tb} {dst_t} {accumulate}: ({i}, {j})"
                    );
                }
            }
            assert_eq!(c[m * n..], [1.0; 3], "outside the view is untouched");
        }
        // f32 through cblas_sgemm.
        let (a32, b32): (Vec<f32>, Vec<f32>) = (
            a.iter().map(|&v| v as f32).collect(),
            b.iter().map(|&v| v as f32).collect(),
        );
        let mut c = vec![0.0f32; m * n];
        let mut dst = ViewMut::rows(&mut c, m, n, n);
        assert!(blas_product(
            &blas,
            &mut dst,
            View::rows(&a32, m, k),
            View::rows(&b32, k, n),
            false
        ));
        for (x, y) in c.iter().zip(&expected) {
            assert!((f64::from(*x) - y).abs() < 1e-4, "{x} vs {y}");
        }
    }

    /// Products run by many threads at once (as the executor's bands and tiles do) all come
    /// out right: a BLAS whose buffers are shared between callers fails this.
    #[test]
    fn concurrent_products_are_right() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        let bad: usize = pool.install(|| {
            (0..16000u64)
                .into_par_iter()
                .map(|i| {
                    let (m, n, k) = (
                        2 + (i % 29) as usize,
                        3 + (i % 17) as usize,
                        1 + (i % 23) as usize,
                    );
                    let a: Vec<f64> = (0..m * k)
                        .map(|j| ((i + j as u64) as f64 * 0.37).sin())
                        .collect();
                    let b: Vec<f64> = (0..k * n)
                        .map(|j| ((i * 7 + j as u64) as f64 * 0.11).cos())
                        .collect();
                    let mut c = vec![0.0; m * n];
                    matmul(
                        ViewMut::rows(&mut c, m, n, n),
                        View::rows(&a, m, k),
                        View::rows(&b, k, n),
                        false,
                        1,
                    );
                    let want = naive(&a, &b, m, n, k);
                    usize::from(c.iter().zip(&want).any(|(x, y)| (x - y).abs() > 1e-9))
                })
                .sum()
        });
        assert_eq!(bad, 0, "{bad} of 16000 concurrent products wrong");
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
