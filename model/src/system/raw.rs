//! Raw serde structs that mirror the device and system TOML files exactly (see
//! `data/README.md`). Unknown keys are refused. Validation lives in the parent module.

use std::collections::BTreeMap;

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// A number with the key of its source in the file's `[sources]` table:
/// `{ value = 8, source = "key" }`. A bare number is refused with a message that shows how
/// to write it (the derived error would name this internal type).
#[derive(Debug, Clone)]
pub(crate) struct RawSourced<T> {
    pub(crate) value: T,
    pub(crate) source: String,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for RawSourced<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Sourced<T>(PhantomData<T>);

        fn bare<E: de::Error>(what: &str) -> E {
            E::custom(format!(
                "{what}: every figure carries its source; write `{{ value = {what}, source = \
                 \"<a key of the [sources] table>\" }}`"
            ))
        }

        impl<'de, T: Deserialize<'de>> Visitor<'de> for Sourced<T> {
            type Value = RawSourced<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sourced figure `{ value = ..., source = \"...\" }`")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let (mut value, mut source) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "value" => value = Some(map.next_value()?),
                        "source" => source = Some(map.next_value()?),
                        other => return Err(de::Error::unknown_field(other, &["value", "source"])),
                    }
                }
                Ok(RawSourced {
                    value: value.ok_or_else(|| de::Error::missing_field("value"))?,
                    source: source.ok_or_else(|| de::Error::missing_field("source"))?,
                })
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Err(bare(&v.to_string()))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Err(bare(&v.to_string()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Err(bare(&v.to_string()))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Err(bare(&format!("\"{v}\"")))
            }
        }

        deserializer.deserialize_any(Sourced(PhantomData))
    }
}

/// A device file, or the `[device]` table of a system file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDevice {
    pub(crate) name: String,
    pub(crate) kind: String,
    pub(crate) vendor: String,
    pub(crate) model: String,
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) sources: BTreeMap<String, String>,
    pub(crate) cores: Option<RawSourced<u32>>,
    pub(crate) peak: RawPeak,
    pub(crate) compute: Option<RawCompute>,
    pub(crate) memory: RawMemory,
    pub(crate) power: Option<RawPower>,
}

/// `[compute]`: a GPU's streaming multiprocessors (compute units), the clock a device's
/// peaks are computed at, a CPU's all-core vector clock, and the process node its chip is
/// made in.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCompute {
    pub(crate) sms: Option<RawSourced<u32>>,
    pub(crate) boost_clock_mhz: Option<RawSourced<f64>>,
    pub(crate) vector_clock_mhz: Option<RawSourced<f64>>,
    pub(crate) process_nm: Option<RawSourced<f64>>,
}

/// `[peak]`: TFLOP/s per number format, vector units and matrix (tensor) units.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPeak {
    pub(crate) tflops_fp64: Option<RawSourced<f64>>,
    pub(crate) tflops_fp32: Option<RawSourced<f64>>,
    pub(crate) tflops_fp16: Option<RawSourced<f64>>,
    pub(crate) tflops_bf16: Option<RawSourced<f64>>,
    pub(crate) tflops_fp64_tensor: Option<RawSourced<f64>>,
    pub(crate) tflops_fp32_tensor: Option<RawSourced<f64>>,
    pub(crate) tflops_tf32_tensor: Option<RawSourced<f64>>,
    pub(crate) tflops_fp16_tensor: Option<RawSourced<f64>>,
    pub(crate) tflops_bf16_tensor: Option<RawSourced<f64>>,
    pub(crate) tflops_fp8_tensor: Option<RawSourced<f64>>,
}

/// `[memory]` of a device.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMemory {
    pub(crate) capacity_gib: Option<RawSourced<f64>>,
    /// Required of a GPU; a CPU's may be left to calibration.
    pub(crate) bandwidth_gbs: Option<RawSourced<f64>>,
    pub(crate) llc_mib: Option<RawSourced<f64>>,
}

/// `[power]` of a device.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPower {
    pub(crate) tdp_w: RawSourced<f64>,
}

/// A system file: one node type and the cluster built from it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSystem {
    pub(crate) name: String,
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) sources: BTreeMap<String, String>,
    pub(crate) device: Option<RawDevice>,
    pub(crate) node: RawNode,
    pub(crate) cluster: RawCluster,
}

/// `[node]` of a system file. Bandwidths are per direction.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNode {
    /// Catalog name of the device, unless the file has its own `[device]` table.
    pub(crate) device: Option<String>,
    pub(crate) devices: RawSourced<u32>,
    pub(crate) cpu: Option<String>,
    pub(crate) host_memory_gib: Option<RawSourced<f64>>,
    pub(crate) host_memory_gbs: Option<RawSourced<f64>>,
    pub(crate) pcie_gbs: Option<RawSourced<f64>>,
    pub(crate) nvlink_gbs: Option<RawSourced<f64>>,
    pub(crate) nvlink_latency_us: Option<RawSourced<f64>>,
    pub(crate) nvlink_overhead_us: Option<RawSourced<f64>>,
    pub(crate) nvlink_message_gap_us: Option<RawSourced<f64>>,
    pub(crate) nvme_capacity_gb: Option<RawSourced<f64>>,
    pub(crate) nvme_read_gbs: Option<RawSourced<f64>>,
    pub(crate) nvme_write_gbs: Option<RawSourced<f64>>,
    pub(crate) nics: Option<RawSourced<u32>>,
    pub(crate) nic_gbs: Option<RawSourced<f64>>,
    pub(crate) nic_latency_us: Option<RawSourced<f64>>,
    pub(crate) nic_overhead_us: Option<RawSourced<f64>>,
    pub(crate) nic_message_gap_us: Option<RawSourced<f64>>,
    pub(crate) pfs_client_gbs: Option<RawSourced<f64>>,
    pub(crate) power_w: Option<RawSourced<f64>>,
}

/// `[cluster]` of a system file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCluster {
    pub(crate) nodes: RawSourced<u32>,
    pub(crate) network: Option<String>,
    pub(crate) pfs: Option<String>,
    pub(crate) pfs_capacity_pb: Option<RawSourced<f64>>,
    pub(crate) pfs_bandwidth_gbs: Option<RawSourced<f64>>,
    pub(crate) burst_buffer_capacity_tb: Option<RawSourced<f64>>,
    pub(crate) burst_buffer_gbs: Option<RawSourced<f64>>,
    pub(crate) price_per_node_hour: Option<RawSourced<f64>>,
}
