//! The arguments of `stoker.Loader(...)`: its parameters in order with their defaults,
//! bound (`bind.rs`) into one struct that `Loader.__new__` builds the loader from.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::args::{Count, DataArg, Float, Int, MixArg, Seed, SizeArg, WorkersArg};
use crate::bind::{arg, bind, required};
use crate::convert::NormalizeArg;

/// The struct, the parameter names in order, and the binding, from one list: the
/// required first parameter, then `name: type = default` for those that may come by
/// position, then (after `*`) the keyword-only ones.
macro_rules! loader_args {
    (
        $first:ident: $first_ty:ty;
        $($name:ident: $ty:ty = $default:expr),* ;
        * $($kw:ident: $kw_ty:ty = $kw_default:expr),* $(,)?
    ) => {
        /// `Loader(...)`'s arguments as given (or their defaults), converted to Rust
        /// types but not judged: the loader's own checks (`LoaderConfig::validate`,
        /// `Loader::new`) judge them.
        pub struct LoaderArgs {
            pub $first: $first_ty,
            $(pub $name: $ty,)*
            $(pub $kw: $kw_ty,)*
        }

        /// The parameters, in the order of the signature.
        pub const NAMES: &[&str] = &[stringify!($first), $(stringify!($name),)* $(stringify!($kw)),*];

        /// How many of them may come by position (the rest are keyword-only).
        pub const POSITIONAL: usize = [stringify!($first), $(stringify!($name)),*].len();

        impl LoaderArgs {
            /// The arguments of a call, by position or keyword.
            pub fn bind(
                args: &Bound<'_, PyTuple>,
                kwargs: Option<&Bound<'_, PyDict>>,
            ) -> PyResult<LoaderArgs> {
                let mut slots =
                    bind("Loader.__new__()", NAMES, 1, POSITIONAL, args, kwargs)?.into_iter();
                // Converted in the signature's order, as pyo3 converts: the first bad
                // argument is the error.
                let $first = required(slots.next().flatten(), stringify!($first))?;
                $(let $name = arg(slots.next().flatten(), stringify!($name), $default)?;)*
                $(let $kw = arg(slots.next().flatten(), stringify!($kw), $kw_default)?;)*
                Ok(LoaderArgs { $first, $($name,)* $($kw),* })
            }
        }
    };
}

// The signature of `stoker.Loader`: 25 parameters (the source options live on the
// sources, `stoker.Data` and its kin, and a mixture's on `stoker.Mixture`). The text
// signature on `Loader.__new__` (python/src/loader.rs), the stub's first overload
// (python/stoker/__init__.pyi) and docs/python.md's list must agree with it:
// python/tests/test_typing.py checks all four. The keywords of the last release are
// moved to their new places by `stoker/_compat.py`, with a DeprecationWarning.
loader_args! {
    data: DataArg;
    batch_size: Count = Count(64),
    transform: String = "".into(),
    mode: String = "async".into(),
    workers: WorkersArg = WorkersArg::Count(Count(2)),
    prefetch: Count = Count(2),
    seed: Seed = Seed(0),
    shuffle: bool = true,
    drop_last: bool = false,
    on_error: String = "fail".into(),
    rank: Option<Count> = None,
    world_size: Option<Count> = None,
    io_depth: Count = Count(8);
    *
    channels: Option<Count> = None,
    mixup: Option<MixArg> = None,
    fields: Option<Vec<String>> = None,
    min_box_visibility: Float = Float(0.0),
    max_instances: Option<Count> = None,
    map: Option<Py<PyAny>> = None,
    map_threads: Option<Int> = None,
    decoded_cache: Option<SizeArg> = None,
    device: String = "cpu".into(),
    dtype: String = "uint8".into(),
    layout: String = "NHWC".into(),
    normalize: Option<NormalizeArg> = None,
}
