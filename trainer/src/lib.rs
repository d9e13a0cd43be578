//! stoker-trainer: a compact trainer whose every layer has an explicit forward and
//! backward over a [`Backend`] (CPU, or CUDA found at run time, behind the same trait).
//!
//! Reading order: [`backend`] -> [`tensor`] -> [`layer`] -> [`model`] -> [`optim`] ->
//! [`schedule`] -> [`checkpoint`] -> [`feed`] -> [`collective`] -> [`train`] (the loop).
//! [`device`] picks and opens the backend of a run. The `stoker-train` binary
//! (`trainer/cli`) is a thin layer over this: arguments, data folders, console report
//! and plots.

#![warn(missing_docs)]

pub mod backend;
pub mod checkpoint;
pub mod collective;
pub mod device;
pub mod error;
pub mod feed;
pub mod label_metrics;
pub mod layer;
pub mod model;
pub mod optim;
pub mod param;
pub mod precision;
pub mod rng;
pub mod schedule;
pub mod tensor;
pub mod train;

pub use backend::{Backend, BackendError, Buffers, CpuBackend, CudaBackend};
pub use checkpoint::CheckpointError;
pub use collective::{Collective, CollectiveError, Launch, Local};
pub use device::{
    open_backend, open_backend_in, select_device, Device, DeviceError, DevicePref, OpenedDevice,
    ParseDeviceError, SelectedDevice,
};
pub use error::{ModelError, Result};
pub use feed::{BatchFeed, DeviceFeed, FeedError, HostFeed};
pub use label_metrics::{LabelMetrics, LabelScores};
pub use model::{Model, ModelConfig, ModelKind, Stats};
pub use optim::{Optimizer, OptimizerKind};
pub use precision::Precision;
pub use schedule::Schedule;
pub use tensor::Tensor;
pub use train::{TrainConfig, TrainError, Trainer};
