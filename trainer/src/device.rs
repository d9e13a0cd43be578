//! Which device a run uses: the user's preference (`auto`, `cpu`, `cuda[:N]`) turned
//! into a choice plus the one line that explains it.
//!
//! `auto` takes CUDA when a device is usable and the CPU otherwise, saying why; asking
//! for `cuda` on a machine without a usable GPU is an error (the binary exits non-zero
//! with the reason), never a panic and never a silent fallback.

use std::fmt;
use std::str::FromStr;

use crate::backend::cuda::{self, DeviceInfo};

/// What the user asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DevicePref {
    /// CUDA device 0 when usable, else the CPU.
    #[default]
    Auto,
    Cpu,
    /// CUDA device `N`; an error when it is not usable.
    Cuda(usize),
}

impl FromStr for DevicePref {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DevicePref::Auto),
            "cpu" => Ok(DevicePref::Cpu),
            "cuda" | "gpu" => Ok(DevicePref::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DevicePref::Cuda)
                .ok_or_else(|| {
                    format!("unknown device {s:?} (expected auto, cpu, cuda or cuda:N)")
                }),
        }
    }
}

impl fmt::Display for DevicePref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevicePref::Auto => f.write_str("auto"),
            DevicePref::Cpu => f.write_str("cpu"),
            DevicePref::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// The device chosen, with the line to print about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectedDevice {
    Cpu { reason: String },
    Cuda { info: DeviceInfo, reason: String },
}

impl SelectedDevice {
    /// One line: which device, and why.
    pub fn reason(&self) -> &str {
        match self {
            SelectedDevice::Cpu { reason } | SelectedDevice::Cuda { reason, .. } => reason,
        }
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, SelectedDevice::Cuda { .. })
    }
}

/// Resolves a preference against what this machine has. `Err` only for an explicit
/// `cuda` request that cannot be met; the message says why.
pub fn select_device(pref: DevicePref) -> Result<SelectedDevice, String> {
    select_with(pref, cuda::probe_ordinal)
}

/// [`select_device`] over any probe (tests use fakes).
pub fn select_with(
    pref: DevicePref,
    probe: impl Fn(usize) -> Result<DeviceInfo, String>,
) -> Result<SelectedDevice, String> {
    match pref {
        DevicePref::Cpu => Ok(SelectedDevice::Cpu {
            reason: "device: cpu (as asked)".into(),
        }),
        DevicePref::Auto => Ok(match probe(0) {
            Ok(info) => SelectedDevice::Cuda {
                reason: format!("device: {info} (auto: CUDA is usable)"),
                info,
            },
            Err(why) => SelectedDevice::Cpu {
                reason: format!("device: cpu (auto: no usable CUDA device: {why})"),
            },
        }),
        DevicePref::Cuda(n) => match probe(n) {
            Ok(info) => Ok(SelectedDevice::Cuda {
                reason: format!("device: {info} (as asked)"),
                info,
            }),
            Err(why) => Err(format!("--device cuda:{n}: no usable CUDA device: {why}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_gpu(n: usize) -> Result<DeviceInfo, String> {
        Ok(DeviceInfo {
            ordinal: n,
            count: 1,
            name: "Fake GPU".into(),
            compute_capability: (9, 0),
            total_mem: 1 << 30,
        })
    }

    fn no_gpu(_: usize) -> Result<DeviceInfo, String> {
        Err("libcuda (the NVIDIA driver) not found".into())
    }

    #[test]
    fn parses_preferences() {
        assert_eq!("auto".parse(), Ok(DevicePref::Auto));
        assert_eq!("cpu".parse(), Ok(DevicePref::Cpu));
        assert_eq!("cuda".parse(), Ok(DevicePref::Cuda(0)));
        assert_eq!("cuda:2".parse(), Ok(DevicePref::Cuda(2)));
        assert!("tpu".parse::<DevicePref>().is_err());
        assert!("cuda:x".parse::<DevicePref>().is_err());
        assert_eq!(DevicePref::Cuda(1).to_string(), "cuda:1");
    }

    #[test]
    fn auto_falls_back_with_a_reason_and_cuda_is_an_error() {
        let s = select_with(DevicePref::Auto, no_gpu).unwrap();
        assert!(!s.is_cuda());
        assert!(s.reason().contains("libcuda"), "{}", s.reason());
        assert!(!s.reason().contains('\n'));
        let e = select_with(DevicePref::Cuda(0), no_gpu).unwrap_err();
        assert!(e.contains("no usable CUDA device"), "{e}");
        let s = select_with(DevicePref::Auto, fake_gpu).unwrap();
        assert!(s.is_cuda());
        assert!(s.reason().contains("Fake GPU"), "{}", s.reason());
        assert!(!select_with(DevicePref::Cpu, fake_gpu).unwrap().is_cuda());
    }

    #[test]
    fn the_real_probe_never_panics() {
        // On a machine without CUDA this is the fallback path; with a GPU, a choice.
        let s = select_device(DevicePref::Auto).unwrap();
        assert!(!s.reason().is_empty());
    }
}
