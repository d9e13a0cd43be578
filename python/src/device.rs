//! `device="cuda"`: batches uploaded through pinned staging on a copy stream of their
//! own, converted on the device by one kernel (`device_kernel.cu`), and handed out as
//! `stoker.DeviceArray`s (`device/array.rs`, DLPack). Ragged fields stay numpy.
//!
//! The design of the loader's upload stage (`stoker_loader::upload`: cached pinned
//! staging, a copy stream, events; the driver probed before cudarc loads it), with
//! slots that live as long as Python holds them: a batch's slot (its pinned buffer,
//! its device buffers, its events) is an `Arc` in a `stoker_loader::slots::Slots`,
//! kept by every array and DLPack tensor made from the batch, and reused only when
//! they are all gone. Up to [`MAX_SLOTS`] batches may be held; one more is a
//! LoaderError that says so.
//!
//! Ordering, all on the device (the host never waits for the consumer):
//!
//! ```text
//! copy stream:     [wait released] [H2D raw] [convert] (record ready)
//! consumer stream:            ... [wait ready] step ... (record released, at reuse)
//! ```
//!
//! - `__dlpack__(stream=s)` makes `s` wait on the slot's `ready` event, and notes `s`;
//! - before a slot is refilled, `released` is recorded on each stream noted since its
//!   last fill, and the copy stream waits on it: the refill runs after every kernel
//!   the consumer enqueued on the batch before dropping it;
//! - the host waits on the slot's previous `ready` before rewriting its pinned buffer
//!   (long done in steady state: the consumer dropped the batch since).

#[cfg(feature = "cuda")]
pub mod array;

#[cfg(not(feature = "cuda"))]
mod imp {
    use pyo3::prelude::*;

    use crate::errors::LoaderError;

    /// Never made without CUDA support.
    pub enum Opened {}

    pub fn open(_py: Python<'_>, ordinal: usize) -> PyResult<Opened> {
        Err(LoaderError::new_err(format!(
            "argument 'device': cuda:{ordinal}: this build of stoker has no CUDA support \
             (built without the `cuda` feature)"
        )))
    }
}

#[cfg(feature = "cuda")]
mod imp {
    use std::sync::{Arc, Mutex};

    use cudarc::driver::{
        result as drv, sys, CudaContext, CudaEvent, CudaFunction, CudaStream, DriverError,
        LaunchConfig, PushKernelArg,
    };
    use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
    use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
    use pyo3::prelude::*;
    use pyo3::types::{PyDict, PyTuple};
    use stoker_loader::output::{OutDtype, OutLayout, OutputSpec};
    use stoker_loader::slots::{Slots, SlotsError};
    use stoker_loader::upload::open_cuda_context;

    use super::array::DeviceArray;
    use crate::convert::{images_of, u8_images};
    use crate::dlpack::{DLDataType, KDL_BFLOAT, KDL_BOOL, KDL_FLOAT, KDL_UINT};
    use crate::errors::LoaderError;

    /// The most device batches held at once (see the module docs).
    pub const MAX_SLOTS: usize = 16;

    /// Channels the kernel takes (`STOKER_MAX_CHANNELS` in `device_kernel.cu`).
    const MAX_CHANNELS: usize = 16;

    /// Each array's place in a slot's buffers is aligned to this many bytes.
    const ALIGN: usize = 256;

    const KERNEL: &str = include_str!("device_kernel.cu");

    fn cuda_err(what: &str, ordinal: usize) -> impl Fn(DriverError) -> PyErr + '_ {
        move |e| LoaderError::new_err(format!("CUDA device cuda:{ordinal}: {what}: {e}"))
    }

    /// A device opened and its kernel built.
    pub struct Opened {
        ordinal: usize,
        ctx: Arc<CudaContext>,
        copy: Arc<CudaStream>,
        func: CudaFunction,
    }

    /// Opens CUDA device `ordinal` and compiles the conversion kernel; a LoaderError
    /// naming CUDA and the reason otherwise (no driver, no such device, no NVRTC).
    pub fn open(py: Python<'_>, ordinal: usize) -> PyResult<Opened> {
        py.detach(|| {
            let ctx = open_cuda_context(ordinal).map_err(|e| {
                LoaderError::new_err(format!("argument 'device': cuda:{ordinal}: {e}"))
            })?;
            // SAFETY: only tries `dlopen` on the library's candidate names.
            if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                return Err(LoaderError::new_err(format!(
                    "argument 'device': cuda:{ordinal}: libnvrtc (the CUDA runtime \
                     compiler, which builds stoker's conversion kernel) not found"
                )));
            }
            let (ma, mi) = ctx
                .compute_capability()
                .map_err(cuda_err("compute capability", ordinal))?;
            let opts = CompileOptions {
                fmad: Some(false),
                options: vec![format!("--gpu-architecture=compute_{ma}{mi}")],
                name: Some("stoker_convert.cu".into()),
                ..Default::default()
            };
            let ptx = compile_ptx_with_opts(KERNEL, opts).map_err(|e| {
                LoaderError::new_err(format!(
                    "argument 'device': cuda:{ordinal}: NVRTC could not build the \
                     conversion kernel: {e}"
                ))
            })?;
            let module = ctx
                .load_module(ptx)
                .map_err(cuda_err("cuModuleLoadData", ordinal))?;
            let func = module
                .load_function("stoker_convert")
                .map_err(cuda_err("the conversion kernel", ordinal))?;
            let copy = ctx.new_stream().map_err(cuda_err("new stream", ordinal))?;
            Ok(Opened {
                ordinal,
                ctx,
                copy,
                func,
            })
        })
    }

    impl DeviceOut {
        /// Batches for the opened device, converted as `spec` says.
        pub fn new(dev: Opened, spec: OutputSpec) -> Self {
            DeviceOut {
                dev,
                spec,
                slots: Slots::new(MAX_SLOTS),
            }
        }
    }

    /// A device buffer, freed when dropped.
    struct DevBuf {
        ptr: sys::CUdeviceptr,
        len: usize,
    }

    /// One batch's place: staging, device buffers, events, and the streams that read it.
    pub struct SlotMem {
        ctx: Arc<CudaContext>,
        pinned: *mut u8,
        pinned_len: usize,
        /// The arrays as uploaded, each at an `ALIGN`ed offset.
        raw: DevBuf,
        /// The converted images (unused for the identity).
        out: DevBuf,
        /// Recorded on the copy stream once the batch is on the device, converted.
        ready: CudaEvent,
        /// Recorded on each consumer stream before a refill.
        released: CudaEvent,
        /// The consumer streams (`CUstream` values) given to `__dlpack__` since the
        /// last fill; `None` in the list: a consumer that asked for no ordering
        /// (`stream=-1`), whose work only a device-wide wait can order.
        pub(crate) consumers: Mutex<Vec<Option<usize>>>,
    }

    // SAFETY: the raw pointers are a pinned host allocation and device addresses owned
    // by this struct; the host buffer is written only through `&mut SlotMem` (a slot
    // with no handles out), and the driver's handles may be used from any thread.
    unsafe impl Send for SlotMem {}
    unsafe impl Sync for SlotMem {}

    impl SlotMem {
        /// The slot's `ready` event, for `__dlpack__`.
        pub(crate) fn ready(&self) -> &CudaEvent {
            &self.ready
        }

        /// Binds the slot's context to the calling thread (the consumer's waits).
        pub(crate) fn bind(&self) -> Result<(), DriverError> {
            self.ctx.bind_to_thread()
        }
    }

    impl Drop for SlotMem {
        fn drop(&mut self) {
            // Possibly on a thread of the consumer's (a tensor's deleter): best effort,
            // nothing here may panic.
            if self.ctx.bind_to_thread().is_err() {
                return;
            }
            // SAFETY: allocated by this slot, freed once. cuMemFree waits for work in
            // flight on the memory.
            unsafe {
                for b in [&self.raw, &self.out] {
                    if b.len > 0 {
                        let _ = drv::free_sync(b.ptr);
                    }
                }
                if !self.pinned.is_null() {
                    let _ = drv::free_host(self.pinned.cast());
                }
            }
        }
    }

    /// The device output of a loader (`Output::Cuda`).
    pub struct DeviceOut {
        dev: Opened,
        spec: OutputSpec,
        slots: Slots<SlotMem>,
    }

    /// One array to upload: its bytes, where it goes, and what it becomes.
    struct Part<'py> {
        key: PartKey,
        array: Bound<'py, PyUntypedArray>,
        offset: usize,
        len: usize,
    }

    #[derive(Clone, Copy, PartialEq)]
    enum PartKey {
        Index(usize),
        Key(&'static str),
    }

    fn dl_dtype(a: &Bound<'_, PyUntypedArray>) -> PyResult<DLDataType> {
        let d = a.dtype();
        let kind: char = d.kind() as char;
        let bits = (d.itemsize() * 8) as u8;
        let code = match kind {
            'u' => KDL_UINT,
            'b' => KDL_BOOL,
            'i' => 0,
            'f' => KDL_FLOAT,
            _ => {
                return Err(LoaderError::new_err(format!(
                    "device batches hold numeric arrays; this one is {d}"
                )))
            }
        };
        Ok(DLDataType {
            code,
            bits,
            lanes: 1,
        })
    }

    fn align(n: usize) -> usize {
        n.div_ceil(ALIGN) * ALIGN
    }

    impl DeviceOut {
        /// `batch` with its images, labels and masks on the device.
        pub fn upload<'py>(&mut self, batch: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
            let py = batch.py();
            let ord = self.dev.ordinal;
            let Some(images) = images_of(&batch)? else {
                return Ok(batch);
            };
            let images = u8_images(&images)?;
            let shape: [usize; 4] = images
                .shape()
                .try_into()
                .map_err(|_| LoaderError::new_err("images array is not 4-D"))?;
            if shape[3] > MAX_CHANNELS {
                return Err(LoaderError::new_err(format!(
                    "device batches take images of at most {MAX_CHANNELS} channels; these have {}",
                    shape[3]
                )));
            }
            self.spec.check(shape[3]).map_err(|e| {
                LoaderError::new_err(format!("normalize, for this batch's images: {e}"))
            })?;
            // What goes: the images, then the labels and masks where the batch has them.
            let mut parts: Vec<Part<'py>> = Vec::new();
            let mut offset = 0;
            let mut add = |key: PartKey, a: Bound<'py, PyAny>| -> PyResult<()> {
                let Ok(arr) = a.cast_into::<PyUntypedArray>() else {
                    return Ok(());
                };
                let arr = if arr.is_c_contiguous() {
                    arr
                } else {
                    py.import("numpy")?
                        .call_method1("ascontiguousarray", (arr,))?
                        .cast_into::<PyUntypedArray>()?
                };
                let len = arr.len() * arr.dtype().itemsize();
                parts.push(Part {
                    key,
                    array: arr,
                    offset,
                    len,
                });
                offset += align(len);
                Ok(())
            };
            if let Ok(t) = batch.cast::<PyTuple>() {
                add(PartKey::Index(0), images.clone().into_any())?;
                if t.len() > 1 {
                    add(PartKey::Index(1), t.get_item(1)?)?;
                }
            } else if let Ok(d) = batch.cast::<PyDict>() {
                add(PartKey::Key("image"), images.clone().into_any())?;
                for k in ["label", "mask", "masks"] {
                    if let Some(v) = d.get_item(k)? {
                        add(PartKey::Key(k), v)?;
                    }
                }
            }
            let raw_len = offset.max(ALIGN);
            let identity = self.spec.is_identity();
            let out_len = if identity {
                0
            } else {
                self.spec.out_bytes(shape)
            };

            let dev = &self.dev;
            let i = self.slots.acquire(|| new_slot(dev)).map_err(|e| match e {
                SlotsError::AllHeld { .. } => LoaderError::new_err(format!(
                    "device='cuda:{ord}': {e} (a loader keeps at most {MAX_SLOTS})"
                )),
                SlotsError::Alloc(e) => e,
            })?;
            let slot = self
                .slots
                .get_mut(i)
                .ok_or_else(|| LoaderError::new_err("a free device slot had a handle out"))?;
            dev.ctx.bind_to_thread().map_err(cuda_err("bind", ord))?;
            let copy = dev.copy.cu_stream();
            // The previous batch in this slot: its copy is done before the host
            // rewrites the pinned buffer; its readers are done before the device
            // buffers are rewritten.
            slot.ready
                .synchronize()
                .map_err(cuda_err("event sync", ord))?;
            let consumers =
                std::mem::take(&mut *slot.consumers.lock().unwrap_or_else(|p| p.into_inner()));
            for s in consumers {
                match s {
                    Some(s) => {
                        let s = s as sys::CUstream;
                        // SAFETY: a stream a consumer handed to `__dlpack__`; the
                        // event is this slot's.
                        let ordered = unsafe {
                            drv::event::record(slot.released.cu_event(), s).and_then(|()| {
                                drv::stream::wait_event(
                                    copy,
                                    slot.released.cu_event(),
                                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                                )
                            })
                        };
                        // A consumer stream destroyed since (a collected CuPy stream,
                        // say) refuses the record: a device-wide wait orders the refill
                        // after whatever it enqueued.
                        if ordered.is_err() {
                            dev.ctx
                                .synchronize()
                                .map_err(cuda_err("ordering the refill after the consumer", ord))?;
                        }
                    }
                    None => dev
                        .ctx
                        .synchronize()
                        .map_err(cuda_err("synchronize", ord))?,
                }
            }
            grow(slot, raw_len, out_len).map_err(cuda_err("allocating a device batch", ord))?;
            // SAFETY: `pinned` holds `pinned_len >= raw_len` bytes, only this slot's,
            // and no copy reads it now (`ready` was waited on above).
            let staged = unsafe { std::slice::from_raw_parts_mut(slot.pinned, raw_len) };
            {
                let mut views = Vec::with_capacity(parts.len());
                for p in &parts {
                    // SAFETY: a C-contiguous array of `len` bytes, alive (held in
                    // `parts`) and unshared (made for this batch) while we copy.
                    let src = unsafe {
                        std::slice::from_raw_parts(
                            (*p.array.as_array_ptr()).fields.data as *const u8,
                            p.len,
                        )
                    };
                    views.push((p.offset, src));
                }
                py.detach(|| {
                    for (off, src) in views {
                        staged[off..off + src.len()].copy_from_slice(src);
                    }
                });
            }
            // SAFETY: `raw` holds at least `raw_len` bytes; the pinned source lives in
            // the slot, untouched until `ready` completes.
            unsafe {
                drv::memcpy_htod_async(slot.raw.ptr, &staged[..offset], copy)
                    .map_err(cuda_err("memcpy HtoD", ord))?;
            }
            let [n, h, w, c] = shape;
            if !identity {
                let mut affine = [0f32; 2 * MAX_CHANNELS];
                for (ch, (m, s)) in self.spec.affine(c).into_iter().enumerate() {
                    affine[ch] = m;
                    affine[MAX_CHANNELS + ch] = s;
                }
                let dtype: i32 = match self.spec.dtype {
                    OutDtype::U8 => 0,
                    OutDtype::F32 => 1,
                    OutDtype::F16 => 2,
                    OutDtype::Bf16 => 3,
                };
                let nchw = i32::from(self.spec.layout == OutLayout::Nchw);
                let (x, y) = (slot.raw.ptr, slot.out.ptr);
                let (n64, hw, c32) = ((n) as u64, (h * w) as u64, c as i32);
                let total = n * h * w * c;
                let cfg = LaunchConfig {
                    grid_dim: ((total.div_ceil(256)).clamp(1, 65_535) as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut launch = dev.copy.launch_builder(&dev.func);
                launch
                    .arg(&x)
                    .arg(&y)
                    .arg(&n64)
                    .arg(&hw)
                    .arg(&c32)
                    .arg(&dtype)
                    .arg(&nchw)
                    .arg(&affine);
                // SAFETY: the arguments are the kernel's C parameters in order; `x`
                // holds the u8 images (part 0, offset 0) and `y` `out_len` bytes, what
                // the kernel writes for n * h * w * c elements of the dtype.
                unsafe { launch.launch(cfg) }.map_err(cuda_err("the conversion kernel", ord))?;
            }
            slot.ready
                .record(&dev.copy)
                .map_err(cuda_err("event record", ord))?;

            // The arrays, each keeping the slot.
            let handle = self.slots.handle(i);
            let owner: Arc<SlotMem> = handle;
            let mut made: Vec<(PartKey, Bound<'py, PyAny>)> = Vec::new();
            for p in &parts {
                let (ptr, shape, dtype) =
                    if p.key == PartKey::Index(0) || p.key == PartKey::Key("image") {
                        let out_shape = self.spec.out_shape(shape);
                        let (code, bits) = match self.spec.dtype {
                            OutDtype::U8 => (KDL_UINT, 8),
                            OutDtype::F32 => (KDL_FLOAT, 32),
                            OutDtype::F16 => (KDL_FLOAT, 16),
                            OutDtype::Bf16 => (KDL_BFLOAT, 16),
                        };
                        let dtype = DLDataType {
                            code,
                            bits,
                            lanes: 1,
                        };
                        let ptr = if identity {
                            owner.raw.ptr
                        } else {
                            owner.out.ptr
                        };
                        (ptr, out_shape.to_vec(), dtype)
                    } else {
                        (
                            owner.raw.ptr + p.offset as u64,
                            p.array.shape().to_vec(),
                            dl_dtype(&p.array)?,
                        )
                    };
                let arr = DeviceArray::new(owner.clone(), ptr, shape, dtype, ord as i32);
                made.push((p.key, Bound::new(py, arr)?.into_any()));
            }
            drop(parts);
            if let Ok(t) = batch.cast::<PyTuple>() {
                let mut items: Vec<Bound<'py, PyAny>> = t.iter().collect();
                for (k, a) in made {
                    if let PartKey::Index(j) = k {
                        items[j] = a;
                    }
                }
                return Ok(PyTuple::new(py, items)?.into_any());
            }
            if let Ok(d) = batch.cast::<PyDict>() {
                // A new dict: `batch` stays as it was (see `convert::with_images`).
                let d = d.copy()?;
                for (k, a) in made {
                    if let PartKey::Key(k) = k {
                        d.set_item(k, a)?;
                    }
                }
                return Ok(d.into_any());
            }
            Ok(batch)
        }
    }

    /// A slot with nothing allocated yet but its events ([`grow`] sizes it).
    fn new_slot(dev: &Opened) -> PyResult<SlotMem> {
        let ord = dev.ordinal;
        Ok(SlotMem {
            ctx: dev.ctx.clone(),
            pinned: std::ptr::null_mut(),
            pinned_len: 0,
            raw: DevBuf { ptr: 0, len: 0 },
            out: DevBuf { ptr: 0, len: 0 },
            ready: dev
                .ctx
                .new_event(None)
                .map_err(cuda_err("new event", ord))?,
            released: dev
                .ctx
                .new_event(None)
                .map_err(cuda_err("new event", ord))?,
            consumers: Mutex::new(Vec::new()),
        })
    }

    /// Makes the slot's buffers hold `raw` and `out` bytes (kept when big enough: a
    /// slot is sized once for the full batches).
    fn grow(slot: &mut SlotMem, raw: usize, out: usize) -> Result<(), DriverError> {
        // SAFETY: each buffer is the slot's own, and no work reads it now (the caller
        // waited for the slot's previous readers on the copy stream, and freeing
        // synchronises with work in flight).
        unsafe {
            if slot.pinned_len < raw {
                if !slot.pinned.is_null() {
                    drv::free_host(slot.pinned.cast())?;
                    slot.pinned = std::ptr::null_mut();
                    slot.pinned_len = 0;
                }
                slot.pinned = drv::malloc_host(raw, 0)?.cast();
                slot.pinned_len = raw;
            }
            for (b, want) in [(&mut slot.raw, raw), (&mut slot.out, out)] {
                if b.len < want {
                    if b.len > 0 {
                        drv::free_sync(b.ptr)?;
                        b.len = 0;
                    }
                    b.ptr = drv::malloc_sync(want)?;
                    b.len = want;
                }
            }
        }
        Ok(())
    }
}

pub use imp::*;
