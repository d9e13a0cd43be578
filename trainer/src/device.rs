//! Which device a run uses: the user's preference (`auto`, `cpu`, `cuda[:N]`) turned
//! into a choice plus the one line that explains it, and the backend opened on it.
//!
//! `auto` takes CUDA when a device is usable and the CPU otherwise, saying why (also
//! when the device is there but its backend fails to start); asking for `cuda` on a
//! machine without a usable GPU is an error (the binary exits non-zero with the
//! reason), never a panic and never a silent fallback.

use std::fmt;
use std::str::FromStr;

use crate::backend::cuda::{self, CudaBackend, CudaError, DeviceInfo};
use crate::backend::{BackendError, CpuBackend};
use crate::precision::Precision;

/// What the user asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DevicePref {
    /// CUDA device 0 when usable, else the CPU.
    #[default]
    Auto,
    /// The CPU, even when a GPU is usable.
    Cpu,
    /// CUDA device `N`; an error when it is not usable.
    Cuda(usize),
}

/// A device preference written as text that names no device
/// ([`DevicePref`]'s `FromStr`); keeps the text as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown device {0:?} (expected auto, cpu, cuda or cuda:N)")]
pub struct ParseDeviceError(pub String);

impl FromStr for DevicePref {
    type Err = ParseDeviceError;
    fn from_str(s: &str) -> Result<Self, ParseDeviceError> {
        match s {
            "auto" => Ok(DevicePref::Auto),
            "cpu" => Ok(DevicePref::Cpu),
            "cuda" | "gpu" => Ok(DevicePref::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DevicePref::Cuda)
                .ok_or_else(|| ParseDeviceError(s.to_string())),
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
    /// The CPU.
    Cpu {
        /// One line: which device, and why, e.g. `device: cpu (as asked)`.
        reason: String,
    },
    /// A CUDA device that the probe found usable.
    Cuda {
        /// What the probe found: ordinal, name, compute capability, memory.
        info: DeviceInfo,
        /// One line: which device, and why.
        reason: String,
    },
}

impl SelectedDevice {
    /// One line: which device, and why.
    pub fn reason(&self) -> &str {
        match self {
            SelectedDevice::Cpu { reason } | SelectedDevice::Cuda { reason, .. } => reason,
        }
    }

    /// Whether the choice is a CUDA device.
    pub fn is_cuda(&self) -> bool {
        matches!(self, SelectedDevice::Cuda { .. })
    }
}

/// Why no device could be had for an explicit request (`auto` always gets one).
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// `cuda:N` was asked for and the probe found no usable device `N`.
    #[error("--device cuda:{ordinal}: no usable CUDA device: {source}")]
    NotUsable {
        /// The device asked for (`cuda:ordinal`).
        ordinal: usize,
        /// Why the probe found it unusable.
        source: CudaError,
    },
    /// The device is there, but its backend failed to start.
    #[error("--device {pref}: {source}")]
    Open {
        /// What was asked for.
        pref: DevicePref,
        /// Why the backend failed to start.
        source: BackendError,
    },
    /// A precision only CUDA computes (bf16) on a run that got the CPU: asked for
    /// (`--device cpu`) or fallen back to (`auto` without a usable GPU, `why` says so).
    #[error("--precision {precision} needs a CUDA device; the CPU trains in f32 ({why})")]
    PrecisionNeedsCuda {
        /// The precision asked for.
        precision: Precision,
        /// How the run came to the CPU, in words.
        why: String,
    },
}

impl DeviceError {
    /// Whether the error is in the flags themselves (a combination that can never
    /// run), not in the machine: the binary exits 2 for these, as for other bad
    /// arguments.
    pub fn is_usage(&self) -> bool {
        matches!(self, DeviceError::PrecisionNeedsCuda { .. })
    }
}

/// Resolves a preference against what this machine has. `Err` only for an explicit
/// `cuda` request that cannot be met; the message says why.
pub fn select_device(pref: DevicePref) -> Result<SelectedDevice, DeviceError> {
    select_with(pref, cuda::probe_ordinal)
}

/// [`select_device`] over any probe (tests use fakes).
pub fn select_with(
    pref: DevicePref,
    probe: impl Fn(usize) -> Result<DeviceInfo, CudaError>,
) -> Result<SelectedDevice, DeviceError> {
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
            Err(source) => Err(DeviceError::NotUsable { ordinal: n, source }),
        },
    }
}

/// The backend a run trains on.
#[derive(Debug)]
pub enum Device<C = CudaBackend> {
    /// The CPU backend.
    Cpu(CpuBackend),
    /// The CUDA backend (`C` is a stand-in in tests).
    Cuda(C),
}

/// An opened device, with the line that says which and why (for the user).
#[derive(Debug)]
pub struct OpenedDevice<C = CudaBackend> {
    /// The backend, opened.
    pub device: Device<C>,
    /// One line: which device, and why, e.g. `device: cpu (as asked)`.
    pub reason: String,
}

/// Resolves `pref` and opens the backend. `auto` falls back to the CPU (the reason says
/// why) whenever CUDA is missing or fails to start; an explicit `cuda` that cannot be
/// met is an error. In a data-parallel run `local_rank` is this process's rank on its
/// machine, and `auto` takes the GPU of that number.
pub fn open_backend(
    pref: DevicePref,
    local_rank: Option<usize>,
) -> Result<OpenedDevice, DeviceError> {
    open_backend_with(pref, local_rank, cuda::probe_ordinal, CudaBackend::new)
}

/// [`open_backend`] with the step's arithmetic: the CUDA backend opens with
/// `precision`; a precision other than f32 on a run that ends up on the CPU (asked for,
/// or `auto` falling back) is refused with [`DeviceError::PrecisionNeedsCuda`].
pub fn open_backend_in(
    pref: DevicePref,
    local_rank: Option<usize>,
    precision: Precision,
) -> Result<OpenedDevice, DeviceError> {
    open_backend_in_with(pref, local_rank, precision, cuda::probe_ordinal, |n| {
        CudaBackend::with_precision(n, precision)
    })
}

/// [`open_backend_in`] over any probe and CUDA backend constructor (tests use fakes).
pub fn open_backend_in_with<C>(
    pref: DevicePref,
    local_rank: Option<usize>,
    precision: Precision,
    probe: impl Fn(usize) -> Result<DeviceInfo, CudaError>,
    open_cuda: impl FnOnce(usize) -> Result<C, BackendError>,
) -> Result<OpenedDevice<C>, DeviceError> {
    if precision != Precision::F32 && pref == DevicePref::Cpu {
        // Refused before anything is opened: no probe can change the answer.
        return Err(DeviceError::PrecisionNeedsCuda {
            precision,
            why: "--device cpu".into(),
        });
    }
    let opened = open_backend_with(pref, local_rank, probe, open_cuda)?;
    if precision != Precision::F32 && matches!(opened.device, Device::Cpu(_)) {
        let reason = opened.reason.trim_start_matches("device: ");
        return Err(DeviceError::PrecisionNeedsCuda {
            precision,
            why: format!("--device {pref} fell back to the CPU: {reason}"),
        });
    }
    Ok(opened)
}

/// [`open_backend`] over any probe and CUDA backend constructor (tests use fakes).
pub fn open_backend_with<C>(
    pref: DevicePref,
    local_rank: Option<usize>,
    probe: impl Fn(usize) -> Result<DeviceInfo, CudaError>,
    open_cuda: impl FnOnce(usize) -> Result<C, BackendError>,
) -> Result<OpenedDevice<C>, DeviceError> {
    let mut selected = select_with(pref, &probe)?;
    if let (DevicePref::Auto, SelectedDevice::Cuda { .. }, Some(local)) =
        (pref, &selected, local_rank)
    {
        selected = select_with(DevicePref::Cuda(local), &probe)?;
    }
    let cpu = |reason| OpenedDevice {
        device: Device::Cpu(CpuBackend::new()),
        reason,
    };
    match selected {
        SelectedDevice::Cpu { reason } => Ok(cpu(reason)),
        SelectedDevice::Cuda { info, reason } => match open_cuda(info.ordinal) {
            Ok(b) => Ok(OpenedDevice {
                device: Device::Cuda(b),
                reason,
            }),
            Err(e) if pref == DevicePref::Auto => Ok(cpu(format!(
                "device: cpu (auto: {info} is present but cannot be used: {e})"
            ))),
            Err(source) => Err(DeviceError::Open { pref, source }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_gpu(n: usize) -> Result<DeviceInfo, CudaError> {
        Ok(DeviceInfo {
            ordinal: n,
            count: 1,
            name: "Fake GPU".into(),
            compute_capability: (9, 0),
            total_mem: 1 << 30,
        })
    }

    fn no_gpu(_: usize) -> Result<DeviceInfo, CudaError> {
        Err(CudaError::Missing(vec!["libcuda (the NVIDIA driver)"]))
    }

    #[test]
    fn parses_preferences() {
        assert_eq!("auto".parse(), Ok(DevicePref::Auto));
        assert_eq!("cpu".parse(), Ok(DevicePref::Cpu));
        assert_eq!("cuda".parse(), Ok(DevicePref::Cuda(0)));
        assert_eq!("cuda:2".parse(), Ok(DevicePref::Cuda(2)));
        assert_eq!(
            "tpu".parse::<DevicePref>(),
            Err(ParseDeviceError("tpu".into()))
        );
        let e = "cuda:x".parse::<DevicePref>().unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"unknown device "cuda:x" (expected auto, cpu, cuda or cuda:N)"#
        );
        assert_eq!(DevicePref::Cuda(1).to_string(), "cuda:1");
    }

    #[test]
    fn auto_falls_back_with_a_reason_and_cuda_is_an_error() {
        let s = select_with(DevicePref::Auto, no_gpu).unwrap();
        assert!(!s.is_cuda());
        assert!(s.reason().contains("libcuda"), "{}", s.reason());
        assert!(!s.reason().contains('\n'));
        let e = select_with(DevicePref::Cuda(0), no_gpu).unwrap_err();
        assert!(e.to_string().contains("no usable CUDA device"), "{e}");
        let s = select_with(DevicePref::Auto, fake_gpu).unwrap();
        assert!(s.is_cuda());
        assert!(s.reason().contains("Fake GPU"), "{}", s.reason());
        assert!(!select_with(DevicePref::Cpu, fake_gpu).unwrap().is_cuda());
    }

    /// A CUDA backend that starts, or one that fails as a broken driver would.
    fn opens(n: usize) -> Result<usize, BackendError> {
        Ok(n)
    }
    fn fails(_: usize) -> Result<usize, BackendError> {
        Err(BackendError::Op {
            op: "cuda init",
            reason: "cuda:0: out of memory".into(),
        })
    }

    fn is_cpu<C>(d: &OpenedDevice<C>) -> bool {
        matches!(d.device, Device::Cpu(_))
    }

    #[test]
    fn opening_falls_back_to_the_cpu_only_for_auto() {
        let d = open_backend_with(DevicePref::Auto, None, fake_gpu, opens).unwrap();
        assert!(matches!(d.device, Device::Cuda(0)), "{d:?}");
        // A usable probe but a backend that fails: auto says so and trains on the CPU ...
        let d = open_backend_with(DevicePref::Auto, None, fake_gpu, fails).unwrap();
        assert!(is_cpu(&d));
        assert!(d.reason.contains("Fake GPU") && d.reason.contains("out of memory"));
        // ... an explicit request fails with the reason.
        let e = open_backend_with(DevicePref::Cuda(0), None, fake_gpu, fails).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--device cuda:0: cuda init: cuda:0: out of memory"
        );
        let d = open_backend_with(DevicePref::Auto, None, no_gpu, opens).unwrap();
        assert!(is_cpu(&d) && d.reason.contains("libcuda"), "{}", d.reason);
        assert!(is_cpu(
            &open_backend_with(DevicePref::Cpu, None, fake_gpu, opens).unwrap()
        ));
    }

    #[test]
    fn bf16_is_refused_wherever_the_run_lands_on_the_cpu() {
        let bf16 = Precision::Bf16;
        let e = open_backend_in_with(DevicePref::Cpu, None, bf16, fake_gpu, opens).unwrap_err();
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "--precision bf16 needs a CUDA device; the CPU trains in f32 (--device cpu)"
        );
        // auto without a GPU, and auto with a GPU whose backend fails: both say that
        // auto fell back, and why.
        for (probe, why) in [
            (
                no_gpu as fn(usize) -> Result<DeviceInfo, CudaError>,
                "libcuda",
            ),
            (fake_gpu, "out of memory"),
        ] {
            let e = open_backend_in_with(DevicePref::Auto, None, bf16, probe, fails).unwrap_err();
            let msg = e.to_string();
            assert!(e.is_usage(), "{msg}");
            assert!(
                msg.starts_with("--precision bf16 needs a CUDA device; the CPU trains in f32")
                    && msg.contains("--device auto fell back to the CPU: cpu (auto: ")
                    && msg.contains(why),
                "{msg}"
            );
        }
        // On CUDA bf16 opens; f32 keeps the CPU and auto's fallback as they were.
        let d = open_backend_in_with(DevicePref::Auto, None, bf16, fake_gpu, opens).unwrap();
        assert!(matches!(d.device, Device::Cuda(0)), "{d:?}");
        let f32 = Precision::F32;
        assert!(is_cpu(
            &open_backend_in_with(DevicePref::Cpu, None, f32, fake_gpu, opens).unwrap()
        ));
        assert!(is_cpu(
            &open_backend_in_with(DevicePref::Auto, None, f32, no_gpu, opens).unwrap()
        ));
        // An explicit cuda that cannot be met stays the device's error, not a usage one.
        let e = open_backend_in_with(DevicePref::Cuda(0), None, bf16, no_gpu, opens).unwrap_err();
        assert!(
            !e.is_usage() && e.to_string().contains("no usable CUDA device"),
            "{e}"
        );
    }

    #[test]
    fn auto_takes_the_gpu_of_the_local_rank() {
        let d = open_backend_with(DevicePref::Auto, Some(3), fake_gpu, opens).unwrap();
        assert!(matches!(d.device, Device::Cuda(3)), "{d:?}");
        // Rank 3's GPU missing is an error, even for auto: the ranks must not differ.
        let two = |n: usize| if n < 2 { fake_gpu(n) } else { no_gpu(n) };
        let e = open_backend_with(DevicePref::Auto, Some(3), two, opens).unwrap_err();
        assert!(e.to_string().starts_with("--device cuda:3:"), "{e}");
    }

    #[test]
    fn the_real_probe_never_panics() {
        // On a machine without CUDA this is the fallback path; with a GPU, a choice.
        let s = select_device(DevicePref::Auto).unwrap();
        assert!(!s.reason().is_empty());
    }
}
