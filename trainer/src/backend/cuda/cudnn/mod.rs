//! Which engine runs the CUDA backend's convolutions, and cuDNN's side of it: the
//! `STOKER_CONV` setting, the library (loaded at run time, as cuBLAS is), its handle on
//! the backend's stream, the plans of the shapes seen so far and the one workspace
//! they share.
//!
//! cuDNN is opened at backend start: `STOKER_CONV` unset (or empty) takes cuDNN when
//! libcudnn 9 loads and a handle can be made, else im2col + cuBLAS with the reason
//! kept; `STOKER_CONV=cudnn` makes its absence an error; `STOKER_CONV=im2col` never
//! opens it. `STOKER_CUDNN_LAYOUT` says how our `[C, N, H, W]` activations reach
//! cuDNN: packed NCHW copies (the default) or strided descriptors of them in place. A
//! shape for which cuDNN offers no qualifying algorithm (see `plan`) runs on im2col,
//! said once on stderr. `desc` holds the descriptors, `run` the convolutions.

mod desc;
mod plan;
mod run;

use std::collections::HashMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use cudarc::cudnn::{result, sys};
use cudarc::driver::CudaSlice;

use super::CudaError;
use desc::cudnn_err;
use plan::{Plan, PlanKey};

/// The environment variable that picks the convolution engine.
pub const CONV_ENV: &str = "STOKER_CONV";

/// The environment variable that picks how activations are given to cuDNN.
pub const LAYOUT_ENV: &str = "STOKER_CUDNN_LAYOUT";

/// `name`'s value in this process: `None` when unset, an error when not Unicode.
fn env_value(name: &'static str, expected: &'static str) -> Result<Option<String>, CudaError> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(CudaError::Setting {
            name,
            value: v.to_string_lossy().into_owned(),
            expected,
        }),
    }
}

/// What `STOKER_CONV` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvChoice {
    /// cuDNN when it is usable, else im2col + cuBLAS (unset or empty).
    #[default]
    Auto,
    /// cuDNN, and an error at backend start when it is not usable (`cudnn`).
    Cudnn,
    /// im2col + cuBLAS, cuDNN never opened (`im2col`).
    Im2col,
}

impl ConvChoice {
    const EXPECTED: &str = "im2col or cudnn (or unset, which picks cuDNN when it is there)";

    /// The choice `value` (of `STOKER_CONV`) names; `None` or empty is `Auto`.
    pub fn parse(value: Option<&str>) -> Result<Self, CudaError> {
        match value {
            None | Some("") => Ok(Self::Auto),
            Some("cudnn") => Ok(Self::Cudnn),
            Some("im2col") => Ok(Self::Im2col),
            Some(other) => Err(CudaError::Setting {
                name: CONV_ENV,
                value: other.to_string(),
                expected: Self::EXPECTED,
            }),
        }
    }
}

/// How the activations, channel-major `[C, N, H, W]`, are given to cuDNN (see
/// docs/trainer.md, "Convolutions on CUDA"): `STOKER_CUDNN_LAYOUT`.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub enum CudnnLayout {
    /// Copied to packed NCHW and back around each call (unset, empty, `packed`).
    #[default]
    Packed,
    /// Described as they are, with strides (`strided`); a shape for which cuDNN has
    /// no qualifying algorithm in that layout is copied as in `Packed`.
    Strided,
}

impl CudnnLayout {
    const EXPECTED: &str = "packed or strided (or unset: packed)";

    /// The layout `value` (of `STOKER_CUDNN_LAYOUT`) names; `None` or empty is `Packed`.
    pub fn parse(value: Option<&str>) -> Result<Self, CudaError> {
        match value {
            None | Some("") | Some("packed") => Ok(Self::Packed),
            Some("strided") => Ok(Self::Strided),
            Some(other) => Err(CudaError::Setting {
                name: LAYOUT_ENV,
                value: other.to_string(),
                expected: Self::EXPECTED,
            }),
        }
    }
}

/// The convolution settings of a backend: the engine, and the layout cuDNN gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvConfig {
    /// `STOKER_CONV`.
    pub choice: ConvChoice,
    /// `STOKER_CUDNN_LAYOUT`.
    pub layout: CudnnLayout,
}

impl ConvConfig {
    /// What `STOKER_CONV` and `STOKER_CUDNN_LAYOUT` ask for in this process.
    pub fn from_env() -> Result<Self, CudaError> {
        Ok(Self {
            choice: ConvChoice::parse(env_value(CONV_ENV, ConvChoice::EXPECTED)?.as_deref())?,
            layout: CudnnLayout::parse(env_value(LAYOUT_ENV, CudnnLayout::EXPECTED)?.as_deref())?,
        })
    }

    /// cuDNN's engine (the choice given) with its default layout.
    pub fn engine(choice: ConvChoice) -> Self {
        Self {
            choice,
            layout: CudnnLayout::default(),
        }
    }
}

/// A cuDNN version, from `cudnnGetVersion` (`major * 10000 + minor * 100 + patch`
/// since cuDNN 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CudnnVersion {
    /// Major version (9 is required).
    pub major: usize,
    /// Minor version.
    pub minor: usize,
    /// Patch level.
    pub patch: usize,
}

impl CudnnVersion {
    /// From `cudnnGetVersion`'s number; cuDNN 8 and older counted `major * 1000`.
    pub fn from_raw(v: usize) -> Self {
        if v >= 90000 {
            Self {
                major: v / 10000,
                minor: v % 10000 / 100,
                patch: v % 100,
            }
        } else {
            Self {
                major: v / 1000,
                minor: v % 1000 / 100,
                patch: v % 100,
            }
        }
    }
}

impl fmt::Display for CudnnVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What runs the convolutions of a CUDA backend: printed by stoker-train and
/// step_bench, e.g. `cudnn 9.10.2`, `cudnn 9.10.2 (strided)` or
/// `im2col + cuBLAS (STOKER_CONV=im2col)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConvEngine {
    /// cuDNN's convolutions, in a layout (a shape it has no qualifying algorithm for
    /// still runs on im2col).
    Cudnn(CudnnVersion, CudnnLayout),
    /// im2col + cuBLAS GEMMs, and why not cuDNN.
    Im2col(Im2colReason),
}

/// Why the convolutions run on im2col + cuBLAS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Im2colReason {
    /// `STOKER_CONV=im2col`.
    Asked,
    /// cuDNN could not be used: the error's text (library not found, too old, no
    /// handle).
    Unusable(String),
}

impl ConvEngine {
    /// Whether cuDNN runs the convolutions.
    pub fn is_cudnn(&self) -> bool {
        matches!(self, ConvEngine::Cudnn(..))
    }
}

impl fmt::Display for ConvEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvEngine::Cudnn(v, CudnnLayout::Packed) => write!(f, "cudnn {v}"),
            ConvEngine::Cudnn(v, CudnnLayout::Strided) => write!(f, "cudnn {v} (strided)"),
            ConvEngine::Im2col(Im2colReason::Asked) => {
                write!(f, "im2col + cuBLAS ({CONV_ENV}=im2col)")
            }
            ConvEngine::Im2col(Im2colReason::Unusable(why)) => write!(f, "im2col + cuBLAS ({why})"),
        }
    }
}

/// The cuDNN library's version, without a GPU: an error (never a panic) when libcudnn
/// is not found or older than 9, or its sub-libraries do not match.
pub fn library() -> Result<CudnnVersion, CudaError> {
    // SAFETY: only tries `dlopen` on cudarc's candidate names.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::Missing(vec!["libcudnn (cuDNN 9)"]));
    }
    guard("cudnn load", || {
        let version = CudnnVersion::from_raw(result::get_version());
        if version.major < 9 {
            return Err(CudaError::CudnnVersion(version.to_string()));
        }
        // SAFETY: argument-less checks that the libraries loaded beside libcudnn
        // (convolutions, ops) are of its version.
        unsafe { sys::cudnnCnnVersionCheck() }
            .result()
            .map_err(cudnn_err("cudnnCnnVersionCheck"))?;
        unsafe { sys::cudnnOpsVersionCheck() }
            .result()
            .map_err(cudnn_err("cudnnOpsVersionCheck"))?;
        Ok(version)
    })
}

/// Runs `f`, a panic inside cudarc (a symbol missing from the library found) becoming
/// an error naming `what`.
fn guard<R>(what: &'static str, f: impl FnOnce() -> Result<R, CudaError>) -> Result<R, CudaError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(CudaError::Panicked {
            what,
            message: p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic caught".into()),
        })
    })
}

/// A cuDNN handle, destroyed when dropped.
struct Handle(sys::cudnnHandle_t);

// SAFETY: cuDNN lets a handle be used from any thread, one thread at a time; it lives
// in `State`, behind `Cudnn`'s mutex.
unsafe impl Send for Handle {}

impl Handle {
    fn create() -> Result<Self, CudaError> {
        guard("cudnnCreate", || {
            result::create_handle()
                .map(Handle)
                .map_err(cudnn_err("cudnnCreate"))
        })
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by `create`, destroyed once, here (after every plan made
        // with it: `State` drops its plans first, see its field order).
        let _ = unsafe { result::destroy_handle(self.0) };
    }
}

/// What the convolutions on cuDNN use, one call at a time.
pub(super) struct State {
    /// Each shape's plan, or why it runs on im2col.
    plans: HashMap<PlanKey, Result<Plan, String>>,
    /// Packed copies of the operands and cuDNN's workspace: grown, never shrunk.
    work: Option<CudaSlice<u8>>,
    handle: Handle,
}

/// cuDNN, opened on a backend's stream.
pub(super) struct Cudnn {
    /// The layout asked for (a shape may still be copied to packed NCHW).
    layout: CudnnLayout,
    state: Mutex<State>,
}

impl Cudnn {
    /// The shapes that run on im2col for want of a cuDNN algorithm, with the reason.
    pub(super) fn fallbacks(&self) -> Vec<String> {
        let Ok(st) = self.state.lock() else {
            return vec!["(cuDNN state lock poisoned)".into()];
        };
        let mut v: Vec<String> = st
            .plans
            .iter()
            .filter_map(|(k, p)| p.as_ref().err().map(|why| format!("{k:?}: {why}")))
            .collect();
        v.sort();
        v
    }
}

/// Opens the engine `config` asks for: `set_stream` puts a fresh handle on the
/// backend's stream. cuDNN's failure is an error for `ConvChoice::Cudnn` and the reason
/// of the im2col engine for `Auto`.
pub(super) fn open(
    config: ConvConfig,
    set_stream: impl FnOnce(sys::cudnnHandle_t) -> Result<(), CudaError>,
) -> Result<(ConvEngine, Option<Cudnn>), CudaError> {
    let (choice, layout) = (config.choice, config.layout);
    if choice == ConvChoice::Im2col {
        return Ok((ConvEngine::Im2col(Im2colReason::Asked), None));
    }
    let opened = library().and_then(|version| {
        let handle = Handle::create()?;
        guard("cudnnSetStream", || set_stream(handle.0))?;
        Ok((version, handle))
    });
    match (opened, choice) {
        (Ok((version, handle)), _) => Ok((
            ConvEngine::Cudnn(version, layout),
            Some(Cudnn {
                layout,
                state: Mutex::new(State {
                    plans: HashMap::new(),
                    work: None,
                    handle,
                }),
            }),
        )),
        (Err(e), ConvChoice::Cudnn) => Err(e),
        (Err(e), _) => Ok((
            ConvEngine::Im2col(Im2colReason::Unusable(e.to_string())),
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stoker_conv_accepts_im2col_cudnn_or_nothing() {
        assert_eq!(ConvChoice::parse(None).unwrap(), ConvChoice::Auto);
        assert_eq!(ConvChoice::parse(Some("")).unwrap(), ConvChoice::Auto);
        assert_eq!(
            ConvChoice::parse(Some("im2col")).unwrap(),
            ConvChoice::Im2col
        );
        assert_eq!(ConvChoice::parse(Some("cudnn")).unwrap(), ConvChoice::Cudnn);
        for bad in ["IM2COL", "cuDNN", " im2col", "winograd"] {
            let e = ConvChoice::parse(Some(bad)).unwrap_err();
            assert!(
                matches!(&e, CudaError::Setting { name: "STOKER_CONV", value, .. } if value == bad),
                "{e:?}"
            );
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("STOKER_CONV={bad:?}")), "{msg}");
            assert!(msg.contains("im2col or cudnn"), "{msg}");
        }
    }

    #[test]
    fn stoker_cudnn_layout_accepts_packed_strided_or_nothing() {
        for (v, want) in [
            (None, CudnnLayout::Packed),
            (Some(""), CudnnLayout::Packed),
            (Some("packed"), CudnnLayout::Packed),
            (Some("strided"), CudnnLayout::Strided),
        ] {
            assert_eq!(CudnnLayout::parse(v).unwrap(), want, "{v:?}");
        }
        let e = CudnnLayout::parse(Some("nhwc")).unwrap_err().to_string();
        assert_eq!(
            e,
            "STOKER_CUDNN_LAYOUT=\"nhwc\": expected packed or strided (or unset: packed)"
        );
        assert_eq!(
            ConvConfig::engine(ConvChoice::Im2col),
            ConvConfig {
                choice: ConvChoice::Im2col,
                layout: CudnnLayout::Packed
            }
        );
    }

    #[test]
    fn engines_say_what_runs_and_why() {
        let v = CudnnVersion::from_raw(91002);
        assert_eq!(
            v,
            CudnnVersion {
                major: 9,
                minor: 10,
                patch: 2
            }
        );
        assert_eq!(
            ConvEngine::Cudnn(v, CudnnLayout::Packed).to_string(),
            "cudnn 9.10.2"
        );
        assert_eq!(
            ConvEngine::Cudnn(v, CudnnLayout::Strided).to_string(),
            "cudnn 9.10.2 (strided)"
        );
        assert_eq!(CudnnVersion::from_raw(8907).to_string(), "8.9.7");
        assert_eq!(
            ConvEngine::Im2col(Im2colReason::Asked).to_string(),
            "im2col + cuBLAS (STOKER_CONV=im2col)"
        );
        let missing = CudaError::Missing(vec!["libcudnn (cuDNN 9)"]).to_string();
        assert_eq!(
            ConvEngine::Im2col(Im2colReason::Unusable(missing)).to_string(),
            "im2col + cuBLAS (libcudnn (cuDNN 9) not found)"
        );
        assert!(ConvEngine::Cudnn(v, CudnnLayout::Packed).is_cudnn());
        assert!(!ConvEngine::Im2col(Im2colReason::Asked).is_cudnn());
    }

    #[test]
    fn asking_for_im2col_never_opens_cudnn() {
        let (engine, cudnn) = open(ConvConfig::engine(ConvChoice::Im2col), |_| {
            panic!("no handle wanted")
        })
        .unwrap();
        assert_eq!(engine, ConvEngine::Im2col(Im2colReason::Asked));
        assert!(cudnn.is_none());
    }

    /// Runs on every machine: without libcudnn (the usual case here) the reason is
    /// kept; with it (`LD_LIBRARY_PATH` holding e.g. PyTorch's `nvidia/cudnn/lib`) the
    /// version reads, and without a GPU `cudnnCreate` fails into the im2col engine.
    #[test]
    fn cudnn_loads_or_the_fallback_keeps_the_reason() {
        // SAFETY: only tries `dlopen`.
        let present = unsafe { sys::is_culib_present() };
        let gpu = super::super::probe().is_ok();
        match library() {
            Err(e) => {
                assert!(!present, "libcudnn loads but: {e}");
                stoker_loader::gpu_test::skip(format!(
                    "libcudnn not found ({e}): the cuDNN version is not read here"
                ));
                assert!(matches!(e, CudaError::Missing(_)), "{e:?}");
                let (engine, cudnn) =
                    open(ConvConfig::engine(ConvChoice::Auto), |_| Ok(())).unwrap();
                assert!(cudnn.is_none());
                assert_eq!(
                    engine.to_string(),
                    "im2col + cuBLAS (libcudnn (cuDNN 9) not found)"
                );
                let e = open(ConvConfig::engine(ConvChoice::Cudnn), |_| Ok(()))
                    .err()
                    .expect("cudnn asked for");
                assert!(matches!(e, CudaError::Missing(_)), "{e:?}");
            }
            Ok(v) => {
                eprintln!("cuDNN {v} loaded");
                assert!(v.major >= 9, "{v}");
                if gpu {
                    return;
                }
                // No driver: the handle cannot be made, and that is the reason kept.
                let (engine, cudnn) =
                    open(ConvConfig::engine(ConvChoice::Auto), |_| Ok(())).unwrap();
                assert!(cudnn.is_none());
                let text = engine.to_string();
                eprintln!("without a GPU: {text}");
                assert!(text.starts_with("im2col + cuBLAS (cudnnCreate: "), "{text}");
                let e = open(ConvConfig::engine(ConvChoice::Cudnn), |_| Ok(()))
                    .err()
                    .expect("no handle");
                assert!(
                    matches!(
                        e,
                        CudaError::Cudnn {
                            call: "cudnnCreate",
                            ..
                        }
                    ),
                    "{e:?}"
                );
            }
        }
    }
}
