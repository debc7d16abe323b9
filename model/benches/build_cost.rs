//! Builds and costs ResNet-50 at batch 256: the model's inner loop in sweeps. Target: under
//! 50 us per build + cost (issue #2). `cargo bench -p ridgeline-model --bench build_cost`.
//!
//! The bench uses mimalloc, the allocator the `ridgeline` binary runs with: glibc's malloc
//! trims and regrows the heap between iterations of this allocate-then-free loop, which
//! costs more than the model itself.

use std::hint::black_box;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use ridgeline_model::cost::cost;
use ridgeline_model::precision::Precision;
use ridgeline_model::workloads::{self, BuildOptions};

fn build_and_cost(c: &mut Criterion) {
    let options = BuildOptions::default();
    let mut group = c.benchmark_group("resnet50");
    group.bench_function("build", |b| {
        b.iter(|| workloads::build(black_box("resnet50"), &options));
    });
    let graph = workloads::build("resnet50", &options).expect("resnet50 builds");
    group.bench_function("cost_batch256", |b| {
        b.iter(|| cost(black_box(&graph), black_box(256), Precision::AmpFp16));
    });
    group.bench_function("build_and_cost_batch256", |b| {
        b.iter(|| {
            let g = workloads::build(black_box("resnet50"), &options).expect("resnet50 builds");
            cost(&g, black_box(256), Precision::AmpFp16).flops_train
        });
    });
    group.finish();
}

/// Imports DenseNet-121 from ONNX (1,746 nodes, 548 layers). Target: under 1 s (issue 21).
fn onnx_import(c: &mut Criterion) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/onnx/light_densenet121.onnx"
    );
    let bytes = std::fs::read(path).expect("the ONNX fixture is checked in");
    c.bench_function("onnx_import_densenet121", |b| {
        b.iter(|| ridgeline_model::onnx::import(black_box(&bytes), path, "densenet121"));
    });
}

/// Imports GPT-2 from ONNX (1,017 nodes: 12 transformer blocks, attention chains into one
/// layer each). Target: under 1 s (issue 21).
fn onnx_import_gpt2(c: &mut Criterion) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/onnx/gpt2-seq64.onnx"
    );
    let bytes = std::fs::read(path).expect("the ONNX fixture is checked in");
    c.bench_function("onnx_import_gpt2", |b| {
        b.iter(|| ridgeline_model::onnx::import(black_box(&bytes), path, "gpt2"));
    });
}

criterion_group!(benches, build_and_cost, onnx_import, onnx_import_gpt2);
criterion_main!(benches);
