//! A calibrated profile put over a system: the check that it was measured on the system's
//! device, and the system it makes.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::profile::{CommLevelName, Profile};
use crate::units::ByteRate;

use super::{DeviceKind, Sourced, System};

impl Profile {
    /// Refuses to put this profile over `system` when its records were measured on another
    /// device: a CPU's records over a GPU system or the other way round, or one GPU's
    /// records over another GPU (the system device's model, e.g. `H100` of
    /// `H100-SXM5-80GB`, must appear in the measured GPU's name).
    pub fn check_device(&self, system: &System, file: &str) -> Result<()> {
        let d = &system.device;
        let measured_gpu = self.device.starts_with("cuda");
        let kind = |gpu: bool| if gpu { "a GPU" } else { "a CPU" };
        let family = d
            .model
            .split(['-', ' '])
            .find(|t| t.chars().any(|c| c.is_ascii_digit()))
            .unwrap_or(&d.model)
            .to_ascii_uppercase();
        let same = match (measured_gpu, d.kind) {
            (true, DeviceKind::Gpu) => self
                .provenance
                .device_model
                .to_ascii_uppercase()
                .contains(&family),
            (false, DeviceKind::Cpu) => true,
            _ => false,
        };
        if same {
            return Ok(());
        }
        Err(Error::invalid(
            file,
            "device",
            format!(
                "the records were measured on `{}` ({}, {}), but system `{}` has device `{}` \
                 ({}, {} {}): a profile only calibrates the device it was measured on; \
                 calibrate records of that device for it, or pass the system of the measured \
                 device (`local` for this machine's CPU)",
                self.device,
                self.provenance.device_model,
                kind(measured_gpu),
                system.name,
                d.name,
                kind(d.kind == DeviceKind::Gpu),
                d.vendor,
                d.model
            ),
        ))
    }

    /// `system` with this profile on top: the device's memory bandwidth becomes the sustained
    /// DRAM bandwidth, and the system carries the profile for per-layer times. `file` names
    /// the profile in sources. A profile of another device is refused
    /// ([`Profile::check_device`]).
    pub fn overlay(self, mut system: System, file: &str) -> Result<System> {
        self.check_device(&system, file)?;
        if let Some(bw) = self.dram_bandwidth() {
            system.device.memory_bandwidth = Some(Sourced {
                value: ByteRate::new(bw),
                source: format!(
                    "calibrated profile {file}: sustained STREAM bandwidth beyond the last-level cache ({} threads)",
                    self.threads
                ),
            });
        }
        if let Some(net) = self.comm_level(CommLevelName::Network) {
            let source = format!(
                "calibrated profile {file}: LogGP of the network level from MPI ping-pong ({})",
                net.transport
            );
            let sourced = |v: f64| {
                Some(Sourced {
                    value: crate::units::Seconds::new(v),
                    source: source.clone(),
                })
            };
            let loggp = &mut system.node.nic_loggp;
            loggp.latency = sourced(net.latency_s);
            loggp.overhead = sourced(net.overhead_s);
            loggp.message_gap = sourced(net.gap_s);
            if let Some(bw) = &mut system.node.nic_bandwidth
                && net.gap_per_byte_s > 0.0
            {
                *bw = Sourced {
                    value: ByteRate::new(1.0 / net.gap_per_byte_s),
                    source: source.clone(),
                };
            }
        }
        system.name = format!("{} (calibrated)", system.name);
        system.calibration = Some(Arc::new(self));
        Ok(system)
    }
}
