//! STREAM kernels (McCalpin, *Memory Bandwidth and Machine Balance in Current High
//! Performance Computers*, IEEE TCCA Newsletter 1995): copy `c = a`, scale `b = q c`, add
//! `c = a + b`, triad `a = b + q c`, on `f64` arrays, split across threads by rayon.

use rayon::prelude::*;

use crate::backend::StreamKernel;

/// The three arrays of a STREAM run.
#[derive(Debug)]
pub(crate) struct Arrays {
    a: Vec<f64>,
    b: Vec<f64>,
    c: Vec<f64>,
}

/// Elements per rayon task: large enough that scheduling is negligible.
const CHUNK: usize = 1 << 14;

impl Arrays {
    /// Three arrays of `n` elements, initialised as STREAM does (a = 1, b = 2, c = 0).
    pub(crate) fn new(n: usize) -> Arrays {
        Arrays {
            a: vec![1.0; n],
            b: vec![2.0; n],
            c: vec![0.0; n],
        }
    }

    /// Runs one kernel once.
    pub(crate) fn run(&mut self, kernel: StreamKernel) {
        let q = 3.0;
        let Arrays { a, b, c } = self;
        match kernel {
            StreamKernel::Copy => c
                .par_chunks_mut(CHUNK)
                .zip(a.par_chunks(CHUNK))
                .for_each(|(c, a)| c.copy_from_slice(a)),
            StreamKernel::Scale => b
                .par_chunks_mut(CHUNK)
                .zip(c.par_chunks(CHUNK))
                .for_each(|(b, c)| b.iter_mut().zip(c).for_each(|(b, c)| *b = q * c)),
            StreamKernel::Add => c
                .par_chunks_mut(CHUNK)
                .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
                .for_each(|(c, (a, b))| {
                    c.iter_mut()
                        .zip(a.iter().zip(b))
                        .for_each(|(c, (a, b))| *c = a + b)
                }),
            StreamKernel::Triad => a
                .par_chunks_mut(CHUNK)
                .zip(b.par_chunks(CHUNK).zip(c.par_chunks(CHUNK)))
                .for_each(|(a, (b, c))| {
                    a.iter_mut()
                        .zip(b.iter().zip(c))
                        .for_each(|(a, (b, c))| *a = b + q * c)
                }),
        }
    }

    /// The arrays, for checks.
    #[cfg(test)]
    pub(crate) fn values(&self) -> (&[f64], &[f64], &[f64]) {
        (&self.a, &self.b, &self.c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_compute_what_stream_defines() {
        let mut s = Arrays::new(100_000);
        s.run(StreamKernel::Copy);
        assert!(s.values().2.iter().all(|&c| c == 1.0));
        s.run(StreamKernel::Scale);
        assert!(s.values().1.iter().all(|&b| b == 3.0));
        s.run(StreamKernel::Add);
        assert!(s.values().2.iter().all(|&c| c == 4.0));
        s.run(StreamKernel::Triad);
        assert!(s.values().0.iter().all(|&a| a == 15.0));
    }
}
