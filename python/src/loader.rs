//! `stoker.Loader`'s constructor and methods: its settings, `epoch()` and iteration,
//! `state_dict`/`load_state_dict`, `metrics()`. The object they act on, with the
//! position its iterators share, is in `handle.rs`.

use std::mem::ManuallyDrop;
use std::time::Instant;

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyTuple};
use stoker_augment::Pipeline;
use stoker_loader::spec::{DataSpec, LoaderSpec, SourceSpec};
use stoker_loader::{
    Cursor, Field, Fields, Loader, LoaderConfig, LoaderState, Mix, Mode, OnError, Stop, Workers,
};

use crate::args::{in_range, launch_rank, Count, DataArg, Float, Int, WorkersArg};
use crate::epoch::EpochIter;
use crate::errors::{loader_error, spec_error};
use crate::handle::PyLoader;
use crate::loader_args::{LoaderArgs, NAMES};
use crate::map::MapPool;

/// Map threads when `map=` comes without `map_threads`.
const DEFAULT_MAP_THREADS: usize = 2;
/// The most map threads accepted.
const MAX_MAP_THREADS: usize = 256;

#[pymethods]
impl PyLoader {
    // Twenty-five parameters: bound into one struct (`loader_args.rs`), as pyo3 would
    // bind them to as many Rust parameters. The text signature, which `help()` and
    // `inspect.signature` show, is written out with every default as a Python literal.
    #[new]
    #[pyo3(
        signature = (*args, **kwargs),
        text_signature = "(data, batch_size=64, transform=\"\", mode=\"async\", workers=2, prefetch=2, seed=0, shuffle=True, drop_last=False, on_error=\"fail\", rank=None, world_size=None, io_depth=8, *, channels=None, mixup=None, fields=None, min_box_visibility=0.0, max_instances=None, map=None, map_threads=None, decoded_cache=None, device=\"cpu\", dtype=\"uint8\", layout=\"NHWC\", normalize=None)"
    )]
    fn new(
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        // A keyword of the last release: `stoker._compat` moves it to its new place,
        // with a DeprecationWarning that names the new spelling.
        let upgraded;
        let (args, kwargs) = match kwargs {
            Some(kw)
                if kw.keys().iter().any(|k| {
                    !k.extract::<String>()
                        .is_ok_and(|k| NAMES.contains(&k.as_str()))
                }) =>
            {
                upgraded = py
                    .import("stoker._compat")?
                    .call_method1("upgrade", (args, kw))?
                    .extract::<(Bound<'_, PyTuple>, Bound<'_, PyDict>)>()?;
                (&upgraded.0, Some(&upgraded.1))
            }
            _ => (args, kwargs),
        };
        let LoaderArgs {
            data,
            batch_size,
            transform,
            mode,
            workers,
            prefetch,
            seed,
            shuffle,
            drop_last,
            on_error,
            rank,
            world_size,
            io_depth,
            channels,
            mixup,
            fields,
            min_box_visibility,
            max_instances,
            map,
            map_threads,
            decoded_cache,
            device,
            dtype,
            layout,
            normalize,
        } = LoaderArgs::bind(args, kwargs)?;
        let device = crate::convert::device(&device)?;
        let out_spec = crate::convert::output_spec(&dtype, &layout, normalize)?;
        // Before the data is opened: without a GPU this fails at once, leaving nothing
        // behind.
        let cuda = match device {
            crate::convert::Device::Cpu => None,
            crate::convert::Device::Cuda(n) => Some(crate::device::open(py, n)?),
        };
        let (transform, mode, on_error) = (transform.as_str(), mode.as_str(), on_error.as_str());
        let Float(min_box_visibility) = min_box_visibility;
        let map_threads = match (&map, map_threads) {
            (Some(f), n) => {
                if !f.bind(py).is_callable() {
                    return Err(PyTypeError::new_err(format!(
                        "map must be a function fn(sample, rng) -> dict, got {}",
                        f.bind(py).get_type().name()?
                    )));
                }
                // A Python-only setting: its range is judged here.
                let n = n.unwrap_or(Int::of(DEFAULT_MAP_THREADS as i128));
                in_range("map_threads", n, 1, MAX_MAP_THREADS as i128)? as usize
            }
            (None, Some(_)) => {
                return Err(PyValueError::new_err(
                    "map_threads is the thread count of map=; give a map too",
                ))
            }
            (None, None) => 0,
        };
        if map.is_some() && mixup.is_some() {
            return Err(PyValueError::new_err(
                "map and mixup cannot be combined yet: mix in the map, or leave mixing out",
            ));
        }
        let DataArg { sources, mixture } = data;
        if sources.is_empty() {
            return Err(PyValueError::new_err(
                "argument 'data': an empty list (give one or more data sets)",
            ));
        }
        let (weights, stop, epoch_batches) = match mixture {
            None => (None, None, None),
            Some(m) => (
                m.weights,
                m.stop
                    .map(|s| s.parse::<Stop>())
                    .transpose()
                    .map_err(|e| PyValueError::new_err(format!("argument 'data': {e}")))?,
                m.epoch_batches,
            ),
        };
        let (rank, world) = launch_rank(rank.map(|Count(r)| r), world_size.map(|Count(w)| w))?;
        let fields = match fields {
            None => None,
            Some(names) => Some(
                names
                    .iter()
                    .map(|n| n.parse::<Field>())
                    .try_fold(Fields::NONE, |set, f| f.map(|f| set.with(f)))
                    .map_err(|e| PyValueError::new_err(format!("argument 'fields': {e}")))?,
            ),
        };
        let mode = mode
            .parse::<Mode>()
            .map_err(|e| PyValueError::new_err(format!("argument 'mode': {e}")))?;
        let cfg = LoaderConfig {
            batch_size: batch_size.0,
            mode,
            workers: match workers {
                WorkersArg::Count(Count(n)) => Workers::Fixed(n),
                WorkersArg::Auto(budget) => Workers::Auto {
                    // A Python loop trains on this machine: leave it a core.
                    budget: Some(budget.unwrap_or_else(LoaderConfig::default_cpu_budget)),
                },
            },
            prefetch: prefetch.0,
            io_depth: io_depth.0,
            seed: seed.0,
            shuffle,
            drop_last,
            rank,
            world_size: world,
            transform: Pipeline::parse(transform).map_err(|e| {
                PyValueError::new_err(format!("argument 'transform': '{transform}': {e}"))
            })?,
            channels: channels.map(|Count(c)| c),
            on_error: on_error
                .parse::<OnError>()
                .map_err(|e| PyValueError::new_err(format!("argument 'on_error': {e}")))?,
            mixup: match mixup {
                None => None,
                Some(m) => Some(
                    Mix::new(m.mixup, m.cutmix, m.prob)
                        .map_err(|e| PyValueError::new_err(format!("argument 'mixup': {e}")))?,
                ),
            },
            fields,
            min_box_visibility: min_box_visibility as f32,
            max_instances: max_instances.map(|Count(m)| m),
            decoded_cache: decoded_cache.map(crate::args::decoded_cache).transpose()?,
            ..LoaderConfig::default()
        };
        let data = sources
            .iter()
            .map(|s| s.path.display().to_string())
            .collect::<Vec<_>>()
            .join(" + ");
        let seed = cfg.seed;
        let skip = cfg.on_error == OnError::Skip;
        // The library judges the settings, opens the data (and its split) and mixes it,
        // as it does for both command lines.
        let spec = LoaderSpec::from_config(
            DataSpec {
                sources: sources
                    .into_iter()
                    .map(|s| SourceSpec {
                        path: s.path,
                        options: s.options,
                    })
                    .collect(),
                weights,
                stop,
                epoch_batches,
            },
            &cfg,
        );
        let inner = py.detach(move || spec.build().map_err(spec_error))?;
        // Started after the loader, so that a loader error leaves no thread behind.
        let map = match map {
            None => None,
            Some(f) => match MapPool::new(py, f, map_threads, seed, skip) {
                Ok(pool) => Some(pool),
                Err(e) => {
                    py.detach(move || drop(inner));
                    return Err(e);
                }
            },
        };
        let channels = inner.image_shape().2;
        if let Err(e) = crate::convert::check_channels(&out_spec, channels) {
            py.detach(move || drop((map, inner)));
            return Err(e);
        }
        let output = crate::output::Output::new(out_spec, cuda);
        Ok(PyLoader {
            output,
            map,
            map_skipped: 0,
            inner: ManuallyDrop::new(inner),
            data,
            position: (0, 0),
            pending: None,
            started: None,
            last_batch: None,
        })
    }

    /// Batches per epoch.
    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Ok(Self::borrow(slf)?.inner.batches_per_epoch())
    }

    /// The batches of epoch `e` from the first, or from the position `load_state_dict`
    /// set when it is in epoch `e`.
    fn epoch(slf: Bound<'_, Self>, e: Int) -> PyResult<EpochIter> {
        let e = in_range("epoch", e, 0, u64::MAX as i128)? as u64;
        let py = slf.py();
        let cursor = {
            let mut this = Self::borrow_mut(&slf)?;
            let this = &mut *this;
            this.started.get_or_insert_with(Instant::now);
            match this.pending.take() {
                Some(c) if c.epoch() == e => c,
                _ => {
                    let inner = &mut this.inner;
                    py.detach(|| inner.start_epoch(e))
                }
            }
        };
        Ok(EpochIter::new(slf.unbind(), cursor))
    }

    /// One epoch: the rest of the current one if it was left unfinished (or set by
    /// `load_state_dict`), else the next.
    fn __iter__(slf: Bound<'_, Self>) -> PyResult<EpochIter> {
        let py = slf.py();
        let cursor = {
            let mut this = Self::borrow_mut(&slf)?;
            let this = &mut *this;
            this.started.get_or_insert_with(Instant::now);
            match this.pending.take() {
                Some(c) => c,
                None => {
                    let (e, b) = this.next_position();
                    let inner = &mut this.inner;
                    py.detach(|| inner.cursor_from(e, b))
                }
            }
        };
        Ok(EpochIter::new(slf.unbind(), cursor))
    }

    /// Where the loader stands, as a small JSON-serialisable dict (the Rust
    /// `LoaderState`): loading it into a loader made with the same data and settings
    /// continues with exactly the batches a straight run would give next.
    fn state_dict<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let this = Self::borrow(slf)?;
        let s = match &this.pending {
            Some(c) => this.inner.cursor_state(c),
            None => {
                let (e, b) = this.next_position();
                this.inner.state_at(e, b)
            }
        };
        let d = PyDict::new(py);
        d.set_item("seed", s.seed)?;
        d.set_item("epoch", s.epoch)?;
        d.set_item("next_batch", s.next_batch)?;
        d.set_item("batch_size", s.batch_size)?;
        d.set_item("samples", s.samples)?;
        d.set_item("rank", s.rank)?;
        d.set_item("world_size", s.world_size)?;
        if let Some(f) = s.fingerprint {
            d.set_item("fingerprint", f)?;
        }
        // Nested parts as JSON text: the dict stays flat and JSON-serialisable.
        if let Some(e) = &s.elastic {
            d.set_item("elastic", serde_json::to_string(e).unwrap_or_default())?;
        }
        if let Some(m) = &s.mixture {
            d.set_item("mixture", serde_json::to_string(m).unwrap_or_default())?;
        }
        Ok(d)
    }

    /// Continue from `state` (from `state_dict`): the next `for ... in loader`, or
    /// `loader.epoch(state["epoch"])`, yields the rest of that epoch.
    fn load_state_dict(slf: &Bound<'_, Self>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let map = state.cast::<PyMapping>().map_err(|_| {
            PyTypeError::new_err("load_state_dict expects the dict that state_dict returned")
        })?;
        let field = |name: &str| -> PyResult<Int> {
            map.get_item(name)
                .map_err(|_| {
                    PyKeyError::new_err(format!(
                        "state dict has no '{name}' (not from state_dict?)"
                    ))
                })?
                .extract::<Int>()
        };
        let big = |name: &str| -> PyResult<u64> {
            Ok(in_range(
                &format!("state dict '{name}'"),
                field(name)?,
                0,
                u64::MAX as i128,
            )? as u64)
        };
        let state = LoaderState {
            seed: big("seed")?,
            epoch: big("epoch")?,
            next_batch: big("next_batch")? as usize,
            batch_size: big("batch_size")? as usize,
            samples: big("samples")? as usize,
            rank: big("rank")? as usize,
            // "world" is how states of the 0.x releases spell it.
            world_size: match map.get_item("world_size") {
                Err(_) if map.get_item("world").is_ok() => big("world")? as usize,
                _ => big("world_size")? as usize,
            },
            // Absent from states saved before it existed.
            fingerprint: match map.get_item("fingerprint") {
                Ok(_) => Some(big("fingerprint")?),
                Err(_) => None,
            },
            elastic: json_item(map, "elastic")?,
            mixture: json_item(map, "mixture")?,
        };
        let mut this = Self::borrow_mut(slf)?;
        let this = &mut *this;
        let inner = &mut this.inner;
        let cursor = py
            .detach(|| inner.resume_cursor(&state))
            .map_err(loader_error)?;
        this.position = (cursor.epoch(), cursor.position());
        this.pending = Some(cursor);
        Ok(())
    }

    /// Totals since the loader was made: images_per_sec (samples delivered over the
    /// time from the first epoch asked for to the last batch), wait_seconds (time
    /// the consumer waited for batches), samples, skipped, batches, peak_buffer_bytes,
    /// and per-stage busy times, bytes read, buffer pool figures; the decoded cache's
    /// when it is on.
    fn metrics<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let this = Self::borrow(slf)?;
        let m = this.inner.metrics();
        let elapsed = match (this.started, this.last_batch) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        let d = PyDict::new(py);
        let per_sec = if elapsed > 0.0 {
            m.samples as f64 / elapsed
        } else {
            0.0
        };
        d.set_item("images_per_sec", per_sec)?;
        d.set_item("elapsed_seconds", elapsed)?;
        d.set_item("wait_seconds", m.wait_seconds)?;
        d.set_item("samples", m.samples)?;
        // A sample left out by the map is skipped as one the loader left out is.
        d.set_item("skipped", m.skipped + this.map_skipped as u64)?;
        d.set_item("map_threads", this.map.as_ref().map_or(0, MapPool::threads))?;
        d.set_item("batches", m.batches)?;
        d.set_item("bytes_read", m.bytes_read)?;
        d.set_item("read_seconds", m.read_seconds)?;
        d.set_item("decode_seconds", m.decode_seconds)?;
        d.set_item("collate_seconds", m.collate_seconds)?;
        d.set_item("mean_queue_len", m.mean_queue_len)?;
        d.set_item("peak_buffer_bytes", this.inner.peak_buffer_bytes())?;
        d.set_item("memory_bound_bytes", this.inner.memory_bound_bytes())?;
        d.set_item("buffers_allocated", this.inner.buffers_allocated())?;
        d.set_item("buffers_held", this.inner.buffers_held())?;
        d.set_item("pool_grown", this.inner.pool_grown())?;
        d.set_item("pipeline_starts", this.inner.pipeline_starts())?;
        d.set_item("threads", this.inner.threads())?;
        let workers = match this.inner.auto_workers() {
            Some(auto) => auto.workers(),
            None => this.inner.config().workers.min(),
        };
        d.set_item("workers", workers)?;
        if let Some(capacity) = this.inner.decoded_cache_capacity() {
            d.set_item("decoded_cache_capacity", capacity)?;
            d.set_item("decoded_cache_bytes", m.decoded_cache_bytes)?;
            d.set_item("decoded_cache_hits", m.decoded_cache_hits)?;
            d.set_item("decoded_cache_misses", m.decoded_cache_misses)?;
            d.set_item("decoded_cache_windowed", m.decoded_cache_windowed)?;
            d.set_item("decoded_cache_no_room", m.decoded_cache_no_room)?;
        }
        if let Some(auto) = this.inner.auto_workers() {
            d.set_item("cpu_budget", auto.budget)?;
            d.set_item("io_depth", auto.io_depth())?;
        }
        Ok(d)
    }

    #[getter]
    fn batch_size(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Ok(Self::borrow(slf)?.inner.config().batch_size)
    }

    /// (height, width, channels) of every image.
    #[getter]
    fn image_shape(slf: &Bound<'_, Self>) -> PyResult<(usize, usize, usize)> {
        Ok(Self::borrow(slf)?.inner.image_shape())
    }

    /// Class names, indexed by label.
    #[getter]
    fn classes(slf: &Bound<'_, Self>) -> PyResult<Vec<String>> {
        Ok(Self::borrow(slf)?.inner.source().classes().to_vec())
    }

    /// Samples per epoch on this rank (before any are skipped).
    #[getter]
    fn samples_per_epoch(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Ok(Self::borrow(slf)?.inner.samples_per_epoch())
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let Ok(this) = Self::borrow(slf) else {
            return "<stoker.Loader (in use by another thread)>".into();
        };
        let c = this.inner.config();
        let (h, w, ch) = this.inner.image_shape();
        format!(
            "<stoker.Loader {} ({} samples, {}): batch {}, {}x{}x{}, mode {}, {} batches/epoch>",
            this.data,
            this.inner.source().len(),
            this.inner.source().format(),
            c.batch_size,
            h,
            w,
            ch,
            c.mode,
            this.inner.batches_per_epoch()
        )
    }
}

/// A cursor at (epoch, batch), without the checks of a state from elsewhere.
/// A nested part of a state dict (JSON text), absent in states without it.
fn json_item<T: serde::de::DeserializeOwned>(
    map: &Bound<'_, PyMapping>,
    name: &str,
) -> PyResult<Option<T>> {
    let Ok(v) = map.get_item(name) else {
        return Ok(None);
    };
    if v.is_none() {
        return Ok(None);
    }
    let text: String = v
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("state dict '{name}' must be a str")))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| PyValueError::new_err(format!("state dict '{name}': {e}")))
}

trait CursorFrom {
    fn cursor_from(&mut self, epoch: u64, batch: usize) -> Cursor;
}

impl CursorFrom for Loader {
    fn cursor_from(&mut self, epoch: u64, batch: usize) -> Cursor {
        let state = self.state_at(epoch, batch);
        // Our own position is always a valid state for this loader.
        self.resume_cursor(&state)
            .unwrap_or_else(|_| self.start_epoch(epoch))
    }
}
