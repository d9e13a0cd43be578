//! The arguments of `stoker.Loader(...)`: its parameters in order with their defaults,
//! bound (`bind.rs`) into one struct that `Loader.__new__` builds the loader from.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::args::{DataArg, Float, Int, IntOrAuto, SizeArg};
use crate::bind::{arg, bind, required};

/// The struct, the parameter names in order, and the binding, from one list: the
/// required first parameter, then `name: type = default` for each of the others.
macro_rules! loader_args {
    ($first:ident: $first_ty:ty; $($name:ident: $ty:ty = $default:expr),* $(,)?) => {
        /// `Loader(...)`'s arguments as given (or their defaults), not yet checked:
        /// `Loader.__new__` judges each where it uses it.
        pub struct LoaderArgs {
            pub $first: $first_ty,
            $(pub $name: $ty,)*
        }

        /// The parameters, in the order of the signature.
        const NAMES: &[&str] = &[stringify!($first), $(stringify!($name)),*];

        impl LoaderArgs {
            /// The arguments of a call, by position or keyword.
            pub fn bind(
                args: &Bound<'_, PyTuple>,
                kwargs: Option<&Bound<'_, PyDict>>,
            ) -> PyResult<LoaderArgs> {
                let mut slots = bind("Loader.__new__()", NAMES, 1, args, kwargs)?.into_iter();
                // Converted in the signature's order, as pyo3 converts: the first bad
                // argument is the error.
                let $first = required(slots.next().flatten(), stringify!($first))?;
                $(let $name = arg(slots.next().flatten(), stringify!($name), $default)?;)*
                Ok(LoaderArgs { $first, $($name),* })
            }
        }
    };
}

// The signature of `stoker.Loader`. Keep in step with `text_signature` on
// `Loader.__new__` (python/src/loader.rs), the stub (python/stoker/__init__.pyi) and
// docs/python.md: python/tests/test_typing.py checks all four.
loader_args! {
    data: DataArg;
    batch_size: Int = Int::of(64),
    transform: String = "".into(),
    mode: String = "async".into(),
    workers: IntOrAuto = IntOrAuto::Int(Int::of(2)),
    prefetch: Int = Int::of(2),
    seed: Int = Int::of(0),
    shuffle: bool = true,
    drop_last: bool = false,
    on_error: String = "fail".into(),
    rank: Option<Int> = None,
    world_size: Option<Int> = None,
    io_depth: Int = Int::of(8),
    split: Option<String> = None,
    channels: Option<Int> = None,
    cpu_budget: Option<Int> = None,
    mixup: Option<Float> = None,
    cutmix: Option<Float> = None,
    mix_prob: Option<Float> = None,
    fields: Option<Vec<String>> = None,
    // Paths or URLs: a `pathlib.Path` works as well as a str.
    images: Option<PathBuf> = None,
    masks: Option<PathBuf> = None,
    image_column: String = "image".into(),
    label_column: String = "label".into(),
    text_column: Option<String> = None,
    boxes_column: Option<String> = None,
    box_format: String = "xyxy".into(),
    box_classes_column: Option<String> = None,
    labels_column: Option<String> = None,
    mask_column: Option<String> = None,
    min_box_visibility: Float = Float(0.0),
    max_instances: Option<Int> = None,
    map: Option<Py<PyAny>> = None,
    map_threads: Option<Int> = None,
    weights: Option<Vec<Float>> = None,
    stop: Option<String> = None,
    steps: Option<Int> = None,
    decoded_cache: Option<SizeArg> = None,
}
