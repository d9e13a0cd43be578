//! stoker-augment's tests, one binary (each module one concern): decode, decode limits,
//! pipelines, the resize and colour ops against PIL, the policy ops against torchvision,
//! and the libjpeg-turbo path; `common` makes the test images.

mod common;

mod decode;
mod limits;
mod pipeline;
mod reference;
mod torchvision;
mod turbo;
