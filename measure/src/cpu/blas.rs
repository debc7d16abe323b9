//! The system's OpenBLAS, loaded at run time where it is installed, for the CPU executor's
//! products. PyTorch's CPU wheels run their products on MKL, numpy's on OpenBLAS; on a
//! 2-core AMD EPYC (Zen 3, AVX2) the `gemm` crate reaches about 70 % of either (55 against
//! 78-90 GFLOP/s at 2048^3 on one thread, `measure gemm` against numpy), so the executor
//! would time a slower library than the frameworks it stands for. Debian's threaded build
//! (`libopenblas0-pthread`) is loaded and set to one thread, and ridgeline runs it on its own
//! threads (bands of the output, one per thread), as it does the `gemm` crate's kernels.
//! Single-threaded builds (`libopenblas0-serial`, `SINGLE_THREADED` in their configuration)
//! are refused: Debian's returns wrong products when two threads call it at once (its
//! buffers are not locked), which the executor's parallel products do; OpenMP builds too,
//! whose threads ridgeline's would not be.
//!
//! Nothing is linked at build time: where no OpenBLAS is found the `gemm` crate runs every
//! product, and the records say which library ran (`env.blas`).
//!
//! `RIDGELINE_BLAS` chooses: unset, empty or `auto` loads the first OpenBLAS found,
//! `off` uses the `gemm` crate only, and a path loads that library (an error if it cannot).

use std::ffi::{CStr, c_char, c_int};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// `cblas_sgemm`'s and `cblas_dgemm`'s signature for element type `T`.
pub(crate) type Gemm<T> = unsafe extern "C" fn(
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    T,
    *const T,
    c_int,
    *const T,
    c_int,
    T,
    *mut T,
    c_int,
) -> ();

/// A loaded BLAS library.
pub(crate) struct Blas {
    /// Kept open while the function pointers are in use (for the process's life).
    _lib: libloading::Library,
    pub(crate) sgemm: Gemm<f32>,
    pub(crate) dgemm: Gemm<f64>,
    /// What the library says it is (`openblas_get_config`), or its path.
    pub(crate) name: String,
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blas").field("name", &self.name).finish()
    }
}

/// Where Debian and Ubuntu install OpenBLAS's threaded build, and the name the system's
/// default OpenBLAS goes by (used only where it is a threaded build).
const CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "libopenblas.so.0",
];

/// The environment variable that chooses the library.
const VAR: &str = "RIDGELINE_BLAS";

static CHOSEN: OnceLock<Result<Option<Blas>, String>> = OnceLock::new();

/// The library products run on, chosen once per process by [`VAR`]; `None`: the `gemm`
/// crate. An error names the variable, the value and the fix.
pub(crate) fn choose() -> Result<Option<&'static Blas>> {
    chosen()
        .as_ref()
        .map(Option::as_ref)
        .map_err(|message| Error::invalid(VAR, message.clone()))
}

/// The library products run on, where [`choose`] succeeded (`None` also where it failed:
/// every entry point calls `choose` first, and reports its error). Called on every
/// product, so it only reads the choice.
pub(crate) fn active() -> Option<&'static Blas> {
    chosen().as_ref().ok().and_then(Option::as_ref)
}

/// The choice, made on first use.
fn chosen() -> &'static Result<Option<Blas>, String> {
    CHOSEN.get_or_init(|| resolve(std::env::var(VAR).ok().as_deref()))
}

/// What products run on, for the records' provenance: the BLAS's own description, or the
/// `gemm` crate.
pub(crate) fn describe() -> String {
    match active() {
        Some(blas) => blas.name.clone(),
        None => "gemm 0.19 (Rust)".to_owned(),
    }
}

pub(super) fn resolve(value: Option<&str>) -> Result<Option<Blas>, String> {
    match value.map(str::trim) {
        None | Some("" | "auto") => Ok(CANDIDATES.iter().find_map(|path| load(path).ok())),
        Some("off") => Ok(None),
        Some(path) => load(path).map(Some).map_err(|e| {
            format!(
                "cannot load `{path}` as a BLAS library: {e}; set it to the path of an \
                 OpenBLAS built with pthreads (`libopenblas0-pthread`), to `auto` (the first \
                 one installed) or to `off` (ridgeline's own GEMM crate)"
            )
        }),
    }
}

/// Loads the library at `path` and its two GEMMs.
fn load(path: &str) -> Result<Blas, String> {
    // SAFETY: loading a shared library runs its initialisers; the libraries loaded are BLAS
    // builds (OpenBLAS's initialiser only sizes its buffers), named by the user or found at
    // the distribution's paths. The symbols are looked up by the C names the CBLAS interface
    // gives them, with that interface's signatures (32-bit integers: Debian's
    // `libopenblas0`; its 64-bit-integer build is `libopenblas64`, with other names).
    #[allow(unsafe_code)]
    unsafe {
        let lib = libloading::Library::new(path).map_err(said)?;
        let sgemm = *lib.get::<Gemm<f32>>(b"cblas_sgemm\0").map_err(said)?;
        let dgemm = *lib.get::<Gemm<f64>>(b"cblas_dgemm\0").map_err(said)?;
        if let Ok(set) = lib.get::<unsafe extern "C" fn(c_int)>(b"openblas_set_num_threads\0") {
            set(1);
        }
        let name =
            match lib.get::<unsafe extern "C" fn() -> *const c_char>(b"openblas_get_config\0") {
                Ok(config) => {
                    let text = config();
                    if text.is_null() {
                        path.to_owned()
                    } else {
                        CStr::from_ptr(text).to_string_lossy().trim().to_owned()
                    }
                }
                Err(_) => path.to_owned(),
            };
        if name.contains("SINGLE_THREADED") || name.contains("USE_OPENMP") {
            return Err(format!(
                "`{name}` is a single-threaded or OpenMP build, which ridgeline cannot call \
                 from several threads at once"
            ));
        }
        Ok(Blas {
            _lib: lib,
            sgemm,
            dgemm,
            name,
        })
    }
}

/// A loader's error with its cause (`dlopen failed: <what the dynamic loader said>`).
fn said(e: libloading::Error) -> String {
    match std::error::Error::source(&e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_is_the_gemm_crate_and_a_bad_path_is_an_error_naming_the_fix() {
        assert!(resolve(Some("off")).unwrap().is_none());
        let err = resolve(Some("/nonexistent/libblas.so")).unwrap_err();
        assert!(err.contains("/nonexistent/libblas.so"), "{err}");
        assert!(err.contains("`off`"), "{err}");
        // A library without CBLAS's symbols is refused too (libc has no `cblas_sgemm`).
        let err = resolve(Some("libc.so.6")).unwrap_err();
        assert!(err.contains("libc.so.6"), "{err}");
    }

    /// A single-threaded OpenBLAS is refused by name (where Debian's is installed).
    #[test]
    fn single_threaded_builds_are_refused() {
        let serial = "/usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0";
        if std::path::Path::new(serial).exists() {
            let err = resolve(Some(serial)).unwrap_err();
            assert!(err.contains("SINGLE_THREADED"), "{err}");
        }
    }
}
