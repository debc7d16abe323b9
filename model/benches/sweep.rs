//! Sweep throughput: ResNet-50 over three systems, two precisions, local batches 1..64 and
//! node counts 1..256 (98,304 configurations per iteration). Target: at least 1,000,000
//! configuration evaluations per second on the 2-core development machine (issue #3);
//! criterion reports it as elements per second.
//! `cargo bench -p ridgeline-model --bench sweep`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ridgeline_model::catalog;
use ridgeline_model::memory::Optimizer;
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::{Epochs, Scenario, StepModel};
use ridgeline_model::sweep::{Objective, SweepSpec, sweep};
use ridgeline_model::workloads::{self, BuildOptions};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn resnet_sweep(c: &mut Criterion) {
    let graph = workloads::build("resnet50", &BuildOptions::default()).expect("resnet50 builds");
    let data = catalog::workload_data("resnet50")
        .expect("data parses")
        .expect("resnet50 has data");
    let dataset = data.dataset.expect("resnet50 has a data set");
    let systems: Vec<_> = ["cori-gpu", "perlmutter-gpu", "dgx-h100"]
        .iter()
        .map(|s| catalog::system(s).expect("catalog system"))
        .collect();
    let models: Vec<StepModel> = [Precision::Fp32, Precision::AmpFp16]
        .iter()
        .map(|&p| StepModel::new(&graph, p, Optimizer::SgdMomentum))
        .collect();
    let scenario = Scenario::new(1, Epochs::Fixed(40.0));
    let nodes: Vec<u32> = (1..=256).collect();
    let batches: Vec<u64> = (1..=64).collect();
    let spec = SweepSpec {
        systems: &systems,
        models: &models,
        dataset: &dataset,
        reference_input_elements: graph.input_shape().elements(),
        scenario: &scenario,
        nodes: &nodes,
        batches: &batches,
        objective: Objective::Time,
        top: 10,
        keep_all: false,
    };
    let n = (systems.len() * models.len() * nodes.len() * batches.len()) as u64;
    let mut group = c.benchmark_group("sweep");
    group.throughput(Throughput::Elements(n));
    group.sample_size(20);
    group.bench_function("resnet50_3x2x64x256", |b| {
        b.iter(|| sweep(black_box(spec), &|_| {}).expect("sweep runs"));
    });
    group.finish();
}

criterion_group!(benches, resnet_sweep);
criterion_main!(benches);
