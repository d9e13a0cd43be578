//! stoker-trainer's CPU tests, one binary: models (training, reproducibility,
//! checkpoints), multi-label training, data-parallel ranks as threads, and the training
//! loop end to end. The GPU tests are binaries of their own (cuda_parity, cuda_train,
//! cuda_nccl): scripts/gpu-bundle.sh carries each to the GPU machine, where
//! scripts/gpu-check.sh runs each under its own time limit.

mod util;

mod model;
mod multilabel;
mod ranks_as_threads;
mod train_e2e;
