//! An NCCL allreduce across this machine's GPUs, as a case: its record id and record.

use crate::record::{
    AllreduceShape, Device, Env, Extra, Measured, Record, RecordPrecision, record_id,
};

/// An FP32 sum allreduce of `bytes` across the first `gpus` GPUs of this machine, through
/// NCCL (one process, one communicator per GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclAllreduce {
    /// GPUs taking part (cuda:0 to cuda:gpus-1).
    pub gpus: usize,
    /// Bytes reduced (a multiple of 4).
    pub bytes: usize,
}

impl NcclAllreduce {
    /// What the record measured.
    pub fn measured(&self) -> Measured {
        Measured::CommAllreduce(AllreduceShape {
            bytes: self.bytes as u64,
            algorithm: "nccl".into(),
            ranks: None,
            gpus: Some(self.gpus),
        })
    }

    /// The record's id.
    pub fn id(&self) -> String {
        record_id(&self.measured(), RecordPrecision::Fp32, 1, Device::Gpus)
    }

    /// The record of a measurement: samples are the slowest GPU's seconds per allreduce.
    pub fn record(&self, samples: Vec<f64>, env: Env, nccl_version: &str) -> Record {
        let mut record = Record::new(
            self.measured(),
            RecordPrecision::Fp32,
            Device::Gpus,
            1,
            samples,
            0.0,
            self.bytes as f64,
            env,
        );
        record.extra = Extra {
            ranks: Some(self.gpus),
            ranks_per_node: Some(self.gpus),
            nodes: Some(1),
            library: Some("nccl".into()),
            nccl_version: Some(nccl_version.into()),
            ..Extra::default()
        };
        record
    }

    /// Checks the case: at least 2 GPUs, a positive multiple of 4 bytes.
    pub fn check(&self) -> crate::error::Result<()> {
        if self.gpus < 2 {
            return Err(crate::error::Error::invalid(
                "nccl allreduce",
                format!("{} GPU: an allreduce needs at least 2 (--gpus)", self.gpus),
            ));
        }
        if self.bytes == 0 || !self.bytes.is_multiple_of(4) {
            return Err(crate::error::Error::invalid(
                format!("nccl allreduce of {} bytes", self.bytes),
                "sizes are FP32 vectors: give a positive multiple of 4 bytes",
            ));
        }
        Ok(())
    }
}
