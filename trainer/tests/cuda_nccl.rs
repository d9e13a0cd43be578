//! The NCCL engine on one GPU: a one-rank communicator (host engine `Local`) must run
//! `ncclAllReduce` on the backend's stream and leave the mean of one rank, the tensor
//! itself, bit for bit. It checks the plumbing a multi-GPU run relies on (the library
//! loads, the id reaches the communicator, the device pointer, length and stream are
//! right); the averaging across ranks itself needs two GPUs and `mpirun`.
//!
//! Without `--features nccl`, a GPU or libnccl, the test prints `SKIPPED: ...` and
//! passes (run with `--nocapture` to see it).

#[cfg(not(feature = "nccl"))]
#[test]
fn nccl_single_rank_all_reduce() {
    stoker_loader::gpu_test::skip("built without the nccl feature (cargo test -p stoker-trainer --features nccl --test cuda_nccl)");
}

#[cfg(feature = "nccl")]
#[test]
fn nccl_single_rank_all_reduce() {
    use std::rc::Rc;

    use stoker_trainer::backend::cuda::{self, CudaBackend};
    use stoker_trainer::collective::nccl::Nccl;
    use stoker_trainer::collective::DEFAULT_TIMEOUT;
    use stoker_trainer::{Collective, Local, Tensor};

    let backend = match cuda::probe()
        .map_err(|e| e.to_string())
        .and_then(|_| CudaBackend::new(0).map_err(|e| e.to_string()))
    {
        Ok(b) => b,
        Err(why) => {
            stoker_loader::gpu_test::skip(format!(
                "no usable CUDA device ({why}) [nccl_single_rank_all_reduce]"
            ));
            return;
        }
    };
    if !Nccl::is_available() {
        stoker_loader::gpu_test::skip("libnccl not found (put NCCL's lib folder on LD_LIBRARY_PATH) [nccl_single_rank_all_reduce]");
        return;
    }
    let nccl =
        Nccl::new(Rc::new(Local), &backend, DEFAULT_TIMEOUT).expect("a one-rank NCCL communicator");
    assert_eq!((nccl.rank(), nccl.world(), nccl.engine()), (0, 1, "nccl"));
    // An odd length, so that a byte/element mix-up in the count shows.
    let values: Vec<f32> = (0..1001).map(|i| i as f32 * 0.25 - 7.0).collect();
    let mut t = Tensor::from_slice(&backend, &[values.len()], &values).unwrap();
    nccl.all_reduce_mean(&backend, &mut t)
        .expect("ncclAllReduce");
    let back = t.to_vec(&backend).unwrap();
    assert!(
        back.iter()
            .zip(&values)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "the mean over one rank changed the values"
    );
    let mut sums = [1.5, 2.5];
    nccl.all_reduce_sum(&mut sums).unwrap();
    assert_eq!(sums, [1.5, 2.5]);
    eprintln!(
        "nccl: one-rank all-reduce of {} f32 on cuda:0 ok",
        values.len()
    );
}
