//! Step, epoch and time-to-solution prediction for a workload on a system
//! (docs/ARCHITECTURE.md "Node and cluster prediction"; \[004\] §V-C, §VI; \[003\] Eq.
//! 1-2; \[001\] §6).
//!
//! The work is split by what it depends on, so sweeps evaluate millions of configurations:
//! - [`StepModel`]: workload x precision. Per-layer FLOPs and HBM bytes as affine functions
//!   of the batch (flat arrays), the memory footprint, the input tensor size.
//! - [`Plan`]: x system x local batch. Compute time of a step on one device from the
//!   per-layer roofline with efficiencies (1 = the ideal bound), forward time for
//!   evaluation, whether it fits in memory.
//! - [`Plan::evaluate`]: x nodes. Input movement (where the node's share of the data set
//!   lives), allreduce (LogGP collectives), step time under full (max, the lower bound of
//!   \[004\]) or no overlap (sum), epoch, staging, time to solution, energy and cost. Plain
//!   arithmetic, no allocation.
//!
//! [`predict`] runs all three and adds the explanations a person reads: the data movement
//! per sample by source (bytes x gap, \[004\] Fig. 4), the HPC-AI roofline (\[001\] §6) and the
//! assumptions made.

mod explain;
mod plan;
mod scenario;
mod stacked;
mod step;

pub use explain::*;
pub use plan::*;
pub use scenario::*;
pub use stacked::*;
pub use step::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::Algorithm;

    use crate::links::Level;
    use crate::memory::Optimizer;
    use crate::precision::Precision;

    use crate::catalog;
    use crate::dataset::WorkloadData;
    use crate::error::Result;
    use crate::graph::Graph;
    use crate::system::{Sourced, System};
    use crate::units::ByteRate;
    use crate::units::Bytes;
    use crate::workloads::{self, BuildOptions};

    struct Setup {
        graph: Graph,
        data: WorkloadData,
    }

    fn setup(name: &str) -> Setup {
        Setup {
            graph: workloads::build(name, &BuildOptions::default()).unwrap(),
            data: catalog::workload_data(name).unwrap().unwrap(),
        }
    }

    fn run(
        s: &Setup,
        system: &System,
        p: Precision,
        scenario: &Scenario,
        batch: u64,
    ) -> Result<Prediction> {
        let model = StepModel::new(&s.graph, p, Optimizer::SgdMomentum);
        let inputs = Inputs {
            model: &model,
            system,
            dataset: s.data.dataset.as_ref().unwrap(),
            reference_input_elements: s.graph.input_shape().elements(),
        };
        predict(inputs, scenario, batch)
    }

    fn dominant(p: &Prediction) -> (&'static str, Level) {
        let m = p
            .data_movement
            .iter()
            .max_by(|a, b| a.cost_per_sample_s.total_cmp(&b.cost_per_sample_s))
            .unwrap();
        (m.source, m.level)
    }

    fn testbed() -> System {
        catalog::system_from_file(
            include_str!("../../../tests/fixtures/hpcai500-testbed.toml"),
            "hpcai500-testbed.toml",
        )
        .unwrap()
    }

    /// \[004\] §V-C: "CosmoFlow data flow is bound by streaming input samples" from NVMe or
    /// Lustre on Cori GPU: staged on NVMe at the 8 nodes MLPerf HPC used, and streamed from
    /// Lustre when the whole 18-node partition shares its 700 GB/s (the system file gives
    /// no per-node client limit, so a smaller job is granted a larger, optimistic share).
    #[test]
    fn cosmoflow_on_cori_gpu_is_bound_by_input_streaming() {
        let s = setup("cosmoflow-v07");
        let cori = catalog::system("cori-gpu").unwrap();
        for (location, nodes) in [(DataLocation::Nvme, 8), (DataLocation::Pfs, 18)] {
            let mut sc = Scenario::new(nodes, Epochs::Fixed(50.0));
            sc.location = location;
            // [004]'s analysis times compute at the datasheet rates. (The transferred
            // kernel model times this step at 46 ms against 28 ms of input at 18 nodes
            // from the PFS: compute-bound there.)
            sc.kernel_model = KernelModel::Ideal;
            let p = run(&s, &cori, Precision::AmpFp16, &sc, 8).unwrap();
            assert_eq!(p.outcome.bound, StepBound::Input, "{location}");
            let (source, level) = dominant(&p);
            assert_eq!(source, "input samples");
            assert_eq!(
                level,
                if location == DataLocation::Nvme {
                    Level::Nvme
                } else {
                    Level::Pfs
                }
            );
        }
    }

    /// The default: every catalog GPU with the transferred model's figures is timed by it,
    /// layer by layer, and never faster than the ideal bound; `KernelModel::Ideal` gives
    /// that bound back.
    #[test]
    fn the_transferred_model_times_every_catalog_gpu_and_never_beats_the_ideal_bound() {
        for workload in ["cosmoflow", "resnet50"] {
            let s = setup(workload);
            for name in catalog::device_names() {
                let device = catalog::device(&name).unwrap();
                if device.kind != crate::system::DeviceKind::Gpu {
                    continue;
                }
                assert!(
                    crate::transfer::DeviceSpec::fp32(&device).is_some(),
                    "{name} lacks {:?}",
                    crate::transfer::DeviceSpec::missing(&device)
                );
                let system = catalog::system(&name).unwrap();
                for p in [Precision::Fp32, Precision::AmpFp16] {
                    let mut sc = Scenario::new(1, Epochs::Fixed(1.0));
                    let Ok(transfer) = run(&s, &system, p, &sc, 4) else {
                        continue;
                    };
                    sc.kernel_model = KernelModel::Ideal;
                    let ideal = run(&s, &system, p, &sc, 4).unwrap();
                    let t = transfer.outcome.compute_timed_by;
                    assert_eq!((t.profile, t.ideal), (0, 0), "{name} {p}");
                    assert_eq!(t.transfer, transfer.layers.len());
                    assert_eq!(ideal.outcome.compute_timed_by.transfer, 0);
                    for (a, b) in transfer.layers.iter().zip(&ideal.layers) {
                        assert!(
                            a.forward_s >= b.forward_s && a.backward_s >= b.backward_s,
                            "{name} {p} {}: {a:?} below {b:?}",
                            a.layer
                        );
                    }
                    let (ct, ci) = (transfer.outcome.compute_s, ideal.outcome.compute_s);
                    assert!(ct > ci, "{name} {p}: {ct:?} vs {ci:?}");
                    // The interval holds the prediction and never goes below the bound.
                    let [lo, hi] = transfer.outcome.compute_interval_90_s;
                    assert!(
                        lo <= ct && ct < hi && lo >= ci,
                        "{name} {p}: {lo:?} {ct:?} {hi:?}"
                    );
                    assert_eq!(ideal.outcome.compute_interval_90_s, [ci, ci]);
                    // The step, epoch and time to solution carry it: the point inside,
                    // equal ends at the ideal bound.
                    let o = &transfer.outcome;
                    for (lo, v, hi) in [
                        (o.step_time_lo_s, o.step_time_s, o.step_time_hi_s),
                        (o.epoch_time_lo_s, o.epoch_time_s, o.epoch_time_hi_s),
                        (
                            o.time_to_solution_lo_s,
                            o.time_to_solution_s,
                            o.time_to_solution_hi_s,
                        ),
                    ] {
                        assert!(lo <= v && v <= hi, "{name} {p}: {lo:?} {v:?} {hi:?}");
                    }
                    assert!(o.step_time_lo_s < o.step_time_hi_s, "{name} {p}");
                    let i = &ideal.outcome;
                    assert_eq!(i.time_to_solution_lo_s, i.time_to_solution_hi_s);
                    for l in &transfer.layers {
                        let [a, b] = l.interval_90_s.unwrap();
                        let t = l.forward_s + l.backward_s;
                        assert!(a <= t * (1.0 + 1e-12) && t <= b * (1.0 + 1e-12), "{l:?}");
                    }
                    assert!(
                        transfer
                            .assumptions
                            .iter()
                            .any(|a| a.contains("transferred kernel model")),
                        "{:?}",
                        transfer.assumptions
                    );
                }
            }
        }
    }

    /// \[004\] §V-C: for DeepCAM "for samples fitting in memory, the model+activation
    /// activities dominate data movement cost" (batch at most 4 on a V100).
    #[test]
    fn deepcam_with_data_in_memory_is_bound_by_model_and_activations() {
        let mut s = setup("deepcam");
        // A training set that fits Cori GPU's host memory, as [004] §V-D limits it.
        s.data.dataset.as_mut().unwrap().train_samples.value = 4096;
        let cori = catalog::system("cori-gpu").unwrap();
        let mut sc = Scenario::new(8, Epochs::Fixed(10.0));
        sc.location = DataLocation::Ddr;
        for batch in [3, 4] {
            let p = run(&s, &cori, Precision::AmpFp16, &sc, batch).unwrap();
            assert_eq!(
                dominant(&p),
                ("model+activations", Level::Hbm),
                "batch {batch}"
            );
        }
    }

    /// \[004\] §V-C: ResNet-50 is bound by allreduce at small local batch; "as we increase
    /// the local batch size, the allreduce cost yields its dominance to the
    /// model+activation cost".
    #[test]
    fn resnet50_allreduce_dominates_data_movement_only_at_small_batch() {
        let s = setup("resnet50");
        let cori = catalog::system("cori-gpu").unwrap();
        let sc = Scenario::new(8, Epochs::Fixed(40.0));
        let small = run(&s, &cori, Precision::AmpFp16, &sc, 16).unwrap();
        assert_eq!(dominant(&small), ("gradients", Level::Network));
        let large = run(&s, &cori, Precision::AmpFp16, &sc, 256).unwrap();
        assert_eq!(dominant(&large), ("model+activations", Level::Hbm));
    }

    /// \[004\] Fig. 4 caption: relative per-byte costs on Cori GPU.
    #[test]
    fn cori_gpu_data_movement_uses_the_fig4_byte_costs() {
        let s = setup("cosmoflow-v07");
        let mut sc = Scenario::new(8, Epochs::Fixed(50.0));
        sc.location = DataLocation::Nvme;
        let p = run(
            &s,
            &catalog::system("cori-gpu").unwrap(),
            Precision::AmpFp16,
            &sc,
            8,
        )
        .unwrap();
        let rel = |level| {
            p.data_movement
                .iter()
                .find(|m| m.level == level)
                .unwrap()
                .relative_cost
        };
        assert_eq!(rel(Level::Hbm), 1.0);
        assert!((rel(Level::Network) - 72.0).abs() < 0.5);
        assert!((rel(Level::Pcie) - 56.0).abs() < 0.5);
        assert!((rel(Level::Nvme) - 2250.0).abs() < 1.0);
    }

    /// \[001\] §7.4: with 10 Gb/s Ethernet between 8-GPU NVLink nodes, Image Classification
    /// (ResNet-50) is compute-bound up to 32 GPUs and communication-bound at 64. Mixed
    /// precision with the batch doubled to 256 per GPU, as \[001\] §7.3 ran it.
    #[test]
    fn resnet50_on_10gbe_turns_communication_bound_between_32_and_64_gpus() {
        let s = setup("resnet50");
        let tb = testbed();
        let bound = |nodes| {
            let sc = Scenario::new(nodes, Epochs::Fixed(40.0));
            run(&s, &tb, Precision::AmpFp16, &sc, 256)
                .unwrap()
                .outcome
                .bound
        };
        assert_eq!(bound(2), StepBound::Compute, "16 GPUs");
        assert_eq!(bound(4), StepBound::Compute, "32 GPUs");
        assert_eq!(bound(8), StepBound::Allreduce, "64 GPUs");
        // FP16 gradient compression ([001] §7.5) halves the traffic: compute-bound again.
        let mut sc = Scenario::new(8, Epochs::Fixed(40.0));
        sc.gradient_bytes = 2;
        assert_eq!(
            run(&s, &tb, Precision::AmpFp16, &sc, 256)
                .unwrap()
                .outcome
                .bound,
            StepBound::Compute
        );
    }

    /// Issue 17: staging counts for every location the data set is copied to before
    /// training ([003] §3.1.2): host memory and NVMe at each node's share of the PFS (the
    /// NVMe also at its write bandwidth), the burst buffer at the smaller aggregate; the PFS
    /// itself is read in place.
    #[test]
    fn staging_counts_for_every_location() {
        let s = setup("cosmoflow-v07");
        let mut cori = catalog::system("cori-gpu").unwrap();
        let pfs = cori.cluster.pfs_bandwidth.as_ref().unwrap().value.value();
        let nic = 4.0 * 25e9;
        let at = |system: &System, location, nodes: u32| {
            let mut sc = Scenario::new(nodes, Epochs::Fixed(10.0));
            sc.location = location;
            run(&s, system, Precision::AmpFp16, &sc, 4).unwrap().outcome
        };
        let share = |nodes: u32| 262_144.0 * 16_777_216.0 / f64::from(nodes);
        let ddr = at(&cori, DataLocation::Ddr, 16);
        let per_node = (pfs / 16.0).min(nic);
        assert!(
            (ddr.staging_s.value() - share(16) / per_node).abs() < 1e-6 * ddr.staging_s.value(),
            "{ddr:?}"
        );
        let nvme = at(&cori, DataLocation::Nvme, 8);
        assert!(nvme.staging_s.value() > 0.0);
        assert_eq!(at(&cori, DataLocation::Pfs, 8).staging_s.value(), 0.0);
        // A burst buffer of 1.7 TB/s and 1.8 PB (Cori's DataWarp, for the test).
        cori.cluster.burst_buffer_bandwidth = Some(Sourced {
            value: ByteRate::from_gbs(1700.0),
            source: "test".into(),
        });
        cori.cluster.burst_buffer_capacity = Some(Sourced {
            value: Bytes::from_tb(1800.0),
            source: "test".into(),
        });
        let bb = at(&cori, DataLocation::BurstBuffer, 4);
        assert_eq!(bb.data_location, DataLocation::BurstBuffer);
        let whole = 262_144.0 * 16_777_216.0;
        assert!(
            (bb.staging_s.value() - whole / pfs).abs() < 1e-6 * bb.staging_s.value(),
            "PFS-bound"
        );
        // Auto prefers node-local NVMe where the share fits, and the burst buffer over the
        // PFS where it does not.
        assert_eq!(
            at(&cori, DataLocation::Auto, 8).data_location,
            DataLocation::Nvme
        );
        cori.node.nvme_capacity = None;
        cori.node.nvme_read = None;
        assert_eq!(
            at(&cori, DataLocation::Auto, 4).data_location,
            DataLocation::BurstBuffer
        );
    }

    #[test]
    fn ddr_caching_gives_the_superlinear_step_of_strong_scaling() {
        // [004] §VI, [003] §4: once a node's share of the data set fits in memory, input
        // stops coming from storage and the time drops by more than the node ratio.
        let s = setup("cosmoflow-v07");
        let cori = catalog::system("cori-gpu").unwrap();
        let sc = |n| Scenario::new(n, Epochs::Fixed(50.0));
        let outcome = |n: u32| {
            run(
                &s,
                &cori,
                Precision::AmpFp16,
                &sc(n),
                512 / (8 * u64::from(n)),
            )
            .unwrap()
            .outcome
        };
        let (small, large) = (outcome(8), outcome(16));
        assert_eq!(small.data_location, DataLocation::Nvme);
        assert_eq!(large.data_location, DataLocation::Ddr);
        assert!(
            small.time_to_solution_s / large.time_to_solution_s > 2.0,
            "superlinear"
        );
    }

    #[test]
    fn infeasible_configurations_are_errors_that_say_why() {
        let s = setup("deepcam");
        let cori = catalog::system("cori-gpu").unwrap();
        let err = |sc: &Scenario, b| {
            run(&s, &cori, Precision::AmpFp16, sc, b)
                .unwrap_err()
                .to_string()
        };
        // Past the listed 18 nodes: predicted, and said.
        let grown = run(
            &s,
            &cori,
            Precision::AmpFp16,
            &Scenario::new(19, Epochs::Fixed(1.0)),
            2,
        )
        .unwrap();
        assert_eq!(grown.outcome.nodes, 19);
        assert!(grown.assumptions[0].contains("past the 18 the system lists"));
        // A batch that does not fit the V100's 16 GiB names the largest that does.
        let e = err(&Scenario::new(1, Epochs::Fixed(1.0)), 64);
        assert!(e.contains("one device needs"), "{e}");
        assert!(e.contains("largest batch per device that fits is 6"), "{e}");
        let mut sc = Scenario::new(2, Epochs::Fixed(1.0));
        sc.location = DataLocation::Ddr;
        assert!(err(&sc, 2).contains("exceeds its host memory"));
        let curve = s.data.convergence.clone().unwrap();
        let e = err(&Scenario::new(1, Epochs::Curve(curve)), 2);
        assert!(e.contains("does not extrapolate"), "{e}");
        let mut sc = Scenario::new(3, Epochs::Fixed(1.0));
        sc.collective = Algorithm::Rhd;
        assert!(err(&sc, 2).contains("power-of-two"));
        let h100 = catalog::system("h100-sxm5-80gb").unwrap();
        let e = run(
            &s,
            &h100,
            Precision::AmpFp16,
            &Scenario::new(1, Epochs::Fixed(1.0)),
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("node.host_memory_gib"), "{e}");
    }

    #[test]
    fn outcome_fields_are_consistent() {
        let s = setup("deepcam");
        let p = run(
            &s,
            &catalog::system("perlmutter-gpu").unwrap(),
            Precision::AmpBf16,
            &Scenario::new(64, Epochs::Fixed(20.0)),
            2,
        )
        .unwrap();
        let o = p.outcome;
        assert_eq!(o.devices, 256);
        assert_eq!(o.global_batch, 512);
        assert!(
            (o.samples_per_s.value() - 512.0 / o.step_time_s.value()).abs()
                < 1e-6 * o.samples_per_s.value()
        );
        let steps = (121_266.0f64 / 512.0).ceil();
        assert!(
            (o.epoch_time_s.value() - steps * o.step_time_s.value() - o.eval_time_s.value()).abs()
                < 1e-9
        );
        assert!(
            (o.time_to_solution_s.value() - o.staging_s.value() - 20.0 * o.epoch_time_s.value())
                .abs()
                < 1e-6
        );
        assert!(o.fraction_of_peak > 0.0 && o.fraction_of_peak <= 1.0);
        assert!(o.fits);
        // A100 TDP 400 W x 4 per node, 64 nodes.
        assert!(
            (o.energy_j.unwrap().value() - 1600.0 * 64.0 * o.time_to_solution_s.value()).abs()
                < 1e-6 * o.energy_j.unwrap().value()
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// A system with every bandwidth multiplied by `f` and latencies divided by it.
        fn faster(system: &System, f: f64) -> System {
            let mut s = system.clone();
            let bw = |v: &mut Option<crate::system::Sourced<crate::units::ByteRate>>| {
                if let Some(v) = v.as_mut() {
                    v.value = v.value * f;
                }
            };
            bw(&mut s.device.memory_bandwidth);
            bw(&mut s.node.pcie);
            bw(&mut s.node.nvlink);
            bw(&mut s.node.nic_bandwidth);
            bw(&mut s.node.nvme_read);
            bw(&mut s.node.host_memory_bandwidth);
            bw(&mut s.cluster.pfs_bandwidth);
            if let Some(l) = s.node.nic_loggp.latency.as_mut() {
                l.value = crate::units::Seconds::new(l.value.value() / f);
            }
            s
        }

        fn workload() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["cosmoflow-v07", "deepcam", "resnet50"])
        }

        fn system() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["cori-gpu", "perlmutter-gpu", "dgx-h100"])
        }

        fn collective() -> impl Strategy<Value = Algorithm> {
            prop::sample::select(vec![
                Algorithm::Ring,
                Algorithm::Tree,
                Algorithm::Hier,
                Algorithm::Best,
            ])
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            #[test]
            fn more_bandwidth_or_less_latency_is_never_slower(
                w in workload(),
                sys in system(),
                nodes in 1u32..16,
                batch in 1u64..8,
                f in 1.0f64..8.0,
                alg in collective(),
            ) {
                let s = setup(w);
                let base = catalog::system(sys).unwrap();
                let mut sc = Scenario::new(nodes, Epochs::Fixed(10.0));
                sc.collective = alg;
                let (Ok(slow), Ok(fast)) = (
                    run(&s, &base, Precision::AmpFp16, &sc, batch),
                    run(&s, &faster(&base, f), Precision::AmpFp16, &sc, batch),
                ) else { return Ok(()) };
                let tol = 1.0 + 1e-12;
                prop_assert!(fast.outcome.step_time_s <= slow.outcome.step_time_s * tol);
                prop_assert!(fast.outcome.allreduce_s <= slow.outcome.allreduce_s * tol);
                prop_assert!(fast.outcome.time_to_solution_s <= slow.outcome.time_to_solution_s * tol);
            }

            #[test]
            fn full_overlap_is_never_slower_than_none(
                w in workload(),
                sys in system(),
                nodes in 1u32..16,
                batch in 1u64..8,
            ) {
                let s = setup(w);
                let system = catalog::system(sys).unwrap();
                let full = Scenario::new(nodes, Epochs::Fixed(10.0));
                let mut none = full.clone();
                none.overlap = Overlap::None;
                let (Ok(a), Ok(b)) = (
                    run(&s, &system, Precision::AmpFp16, &full, batch),
                    run(&s, &system, Precision::AmpFp16, &none, batch),
                ) else { return Ok(()) };
                prop_assert!(a.outcome.step_time_s <= b.outcome.step_time_s);
                prop_assert!(a.outcome.time_to_solution_s <= b.outcome.time_to_solution_s);
                let sum = (b.outcome.compute_s + b.outcome.input_s + b.outcome.allreduce_s).value();
                prop_assert!((b.outcome.step_time_s.value() - sum).abs() <= 1e-12 * sum);
            }

            #[test]
            fn energy_and_cost_are_positive_and_proportional_to_time(
                w in workload(),
                nodes in 1u32..8,
                batch in 1u64..8,
                price in 0.1f64..100.0,
            ) {
                let s = setup(w);
                let mut system = testbed();
                system.cluster.price_per_node_hour =
                    Some(crate::system::Sourced { value: price, source: "test".into() });
                let Ok(p) = run(&s, &system, Precision::AmpFp16, &Scenario::new(nodes, Epochs::Fixed(5.0)), batch)
                else { return Ok(()) };
                let o = p.outcome;
                let (energy, cost) = (o.energy_j.unwrap().value(), o.cost.unwrap());
                prop_assert!(energy > 0.0 && cost > 0.0);
                let n = f64::from(nodes);
                prop_assert!((energy / o.time_to_solution_s.value() - 300.0 * 8.0 * n).abs() < 1e-6 * energy);
                prop_assert!((cost / (o.time_to_solution_s.value() / 3600.0) - price * n).abs() < 1e-9 * cost.max(1.0));
            }

            /// Strong scaling: while the step stays compute-bound, more nodes never take
            /// longer to solution.
            #[test]
            fn time_to_solution_decreases_with_nodes_while_compute_bound(
                w in workload(),
                sys in system(),
                exp in 0u32..5,
            ) {
                let s = setup(w);
                let system = catalog::system(sys).unwrap();
                let k = u64::from(system.node.devices.value);
                let global = 1024;
                let nodes = [1u32 << exp, 2u32 << exp];
                let mut results = Vec::new();
                for n in nodes {
                    let devices = k * u64::from(n);
                    if global % devices != 0 { return Ok(()); }
                    match run(&s, &system, Precision::AmpFp16, &Scenario::new(n, Epochs::Fixed(10.0)), global / devices) {
                        Ok(p) => results.push(p.outcome),
                        Err(_) => return Ok(()),
                    }
                }
                if results[1].bound == StepBound::Compute {
                    prop_assert!(results[1].time_to_solution_s <= results[0].time_to_solution_s);
                }
            }
        }

        /// And once communication dominates it stops helping: on 10 Gb/s Ethernet,
        /// doubling the nodes of a ResNet-50 job at a fixed global batch beyond the point
        /// where allreduce dominates gains less than 30 %.
        #[test]
        fn strong_scaling_stalls_once_communication_dominates() {
            let s = setup("resnet50");
            let tb = testbed();
            let tts = |n: u32| {
                let p = run(
                    &s,
                    &tb,
                    Precision::AmpFp16,
                    &Scenario::new(n, Epochs::Fixed(40.0)),
                    1024 / (8 * u64::from(n)),
                )
                .unwrap();
                (p.outcome.time_to_solution_s, p.outcome.bound)
            };
            let (t1, b1) = tts(1);
            let (t2, b2) = tts(2);
            let (t8, b8) = tts(8);
            assert_eq!(b1, StepBound::Compute);
            assert_eq!(b2, StepBound::Allreduce);
            assert_eq!(b8, StepBound::Allreduce);
            assert!(
                t2 > t1 * 0.7,
                "going from 8 to 16 GPUs over 10 GbE barely helps: {t1} -> {t2}"
            );
            assert!(t8 > t2 * 0.7, "{t2} -> {t8}");
        }
    }
}
