//! stoker-train's tests, one binary running the built program: its runs end to end
//! (`cli`), every flag given an absurd value (`flags`), the data formats the shared data
//! flags open (`formats`), and data on S3 against moto. The
//! GPU run (cuda_cli) and the runs under mpirun (distributed) are binaries of their own:
//! the first is carried to the GPU machine, the second needs the mpi feature and runs one
//! job at a time.

#[path = "../../../loader/tests/s3_support/mod.rs"]
mod s3_support;
#[path = "../../tests/util/mod.rs"]
mod util;

mod cli;
mod flags;
mod formats;
mod s3;
