//! DLPack, the tensor exchange format torch.from_dlpack reads: a capsule named "dltensor"
//! holding a `DLManagedTensor` (the legacy, unversioned struct every torch since 1.10 takes).
//!
//! Ownership, as the DLPack specification sets it: the consumer renames the capsule
//! "used_dltensor" and calls the tensor's `deleter` when it frees the tensor; a capsule never
//! consumed is released by its own destructor, which then calls the deleter. Our deleter
//! drops what `manager_ctx` owns: a batch (whose buffer goes back to its loader) or a label
//! vector. It may run on any thread, with or without the GIL, and touches no Python object.

use std::ffi::{CStr, c_void};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

use loaderlab::loader::Batch;

const NAME: &CStr = c"dltensor";
const USED: &CStr = c"used_dltensor";

/// kDLCPU.
const CPU: i32 = 1;
/// kDLInt, kDLFloat.
const INT: u8 = 0;
const FLOAT: u8 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
struct Device {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct Tensor {
    data: *mut c_void,
    device: Device,
    ndim: i32,
    dtype: DataType,
    shape: *mut i64,
    /// Null: compact row-major.
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct Managed {
    tensor: Tensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut Managed)>,
}

/// What a capsule's tensor keeps alive.
enum Keeps {
    /// A batch's images; the buffer goes back to `returned` (up to `keep` of them, and
    /// always when `pinned` lists it: a page-locked buffer is freed only after the Python side
    /// unregisters it, on `close`).
    Images {
        batch: Batch,
        returned: Arc<Mutex<Vec<Batch>>>,
        keep: usize,
        pinned: Arc<Mutex<Vec<usize>>>,
    },
    Labels(
        #[expect(
            dead_code,
            reason = "kept alive, read only through the tensor's data pointer"
        )]
        Vec<i64>,
    ),
}

/// A `Managed` and everything it points to, in one allocation; `manager_ctx` points here.
struct Owner {
    managed: Managed,
    shape: [i64; 4],
    keeps: Keeps,
}

/// The deleter torch calls when it frees the tensor (or our capsule destructor, when the
/// capsule was never consumed).
unsafe extern "C" fn delete(managed: *mut Managed) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the first field of an `Owner` made by `capsule` through
    // `Box::into_raw`, and `manager_ctx` points to that `Owner`; DLPack calls the deleter once.
    let owner = unsafe { Box::from_raw((*managed).manager_ctx as *mut Owner) };
    if let Keeps::Images {
        batch,
        returned,
        keep,
        pinned,
    } = owner.keeps
    {
        let start = batch.images().as_ptr() as usize;
        let pinned = pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&start);
        let mut returned = returned.lock().unwrap_or_else(|p| p.into_inner());
        if returned.len() < keep || pinned {
            returned.push(batch);
        }
    }
}

/// The capsule's destructor: if no consumer took the tensor, release it.
unsafe extern "C" fn destroy_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule being destroyed; `PyCapsule_IsValid` only reads
    // its name and sets no error.
    if unsafe { ffi::PyCapsule_IsValid(capsule, NAME.as_ptr()) } != 1 {
        return;
    }
    // SAFETY: the capsule is valid and named "dltensor", so its pointer is our `Managed`.
    let managed = unsafe { ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr()) } as *mut Managed;
    // SAFETY: not consumed, so nobody else will call the deleter.
    unsafe { delete(managed) };
}

fn capsule(
    py: Python<'_>,
    data: *mut c_void,
    dtype: DataType,
    shape: &[i64],
    keeps: Keeps,
) -> PyResult<Py<PyAny>> {
    let mut dims = [0i64; 4];
    dims[..shape.len()].copy_from_slice(shape);
    let owner = Box::into_raw(Box::new(Owner {
        managed: Managed {
            tensor: Tensor {
                data,
                device: Device {
                    device_type: CPU,
                    device_id: 0,
                },
                ndim: shape.len() as i32,
                dtype,
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete),
        },
        shape: dims,
        keeps,
    }));
    // SAFETY: `owner` was just allocated and is not shared yet; the pointers set here point
    // into the same allocation, which lives until the deleter frees it.
    let managed = unsafe {
        (*owner).managed.manager_ctx = owner as *mut c_void;
        (*owner).managed.tensor.shape = (*owner).shape.as_mut_ptr();
        &raw mut (*owner).managed
    };
    // SAFETY: a valid pointer, a static name and a destructor that follows the protocol.
    let capsule =
        unsafe { ffi::PyCapsule_New(managed as *mut c_void, NAME.as_ptr(), Some(destroy_capsule)) };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so the tensor is still ours to release.
        unsafe { delete(managed) };
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference, owned from here on.
    Ok(unsafe { Py::from_owned_ptr(py, capsule) })
}

/// The batch's images as float32 N×C×H×W, in the batch's own buffer.
pub fn images(
    py: Python<'_>,
    mut batch: Batch,
    returned: Arc<Mutex<Vec<Batch>>>,
    keep: usize,
    pinned: Arc<Mutex<Vec<usize>>>,
) -> PyResult<Py<PyAny>> {
    let s = batch.shape;
    let shape = [
        batch.len as i64,
        s.channels as i64,
        s.height as i64,
        s.width as i64,
    ];
    // Torch may write into the tensor (an in-place normalisation): the buffer is the
    // tensor's alone until torch frees it, and its pointer comes from a mutable borrow.
    let data = batch.images_mut().as_mut_ptr() as *mut c_void;
    let dtype = DataType {
        code: FLOAT,
        bits: 32,
        lanes: 1,
    };
    let keeps = Keeps::Images {
        batch,
        returned,
        keep,
        pinned,
    };
    capsule(py, data, dtype, &shape, keeps)
}

/// Labels as int64 N (a vector the tensor owns).
pub fn labels(py: Python<'_>, mut labels: Vec<i64>) -> PyResult<Py<PyAny>> {
    let shape = [labels.len() as i64];
    let data = labels.as_mut_ptr() as *mut c_void;
    let dtype = DataType {
        code: INT,
        bits: 64,
        lanes: 1,
    };
    capsule(py, data, dtype, &shape, Keeps::Labels(labels))
}

/// The values of a consumed tensor.
pub enum View<'a> {
    F32(&'a [f32]),
    I64(&'a [i64]),
    I32(&'a [i32]),
}

/// Consume a DLPack capsule (from `torch.utils.dlpack.to_dlpack`) of a contiguous CPU tensor
/// and read its values; `what` names the argument in errors.
pub fn read<T>(
    capsule: &Bound<'_, PyAny>,
    what: &str,
    f: impl FnOnce(View<'_>) -> PyResult<T>,
) -> PyResult<T> {
    let ptr = capsule.as_ptr();
    // SAFETY: `ptr` is a live object (borrowed for this call); IsValid only checks it.
    if unsafe { ffi::PyCapsule_IsValid(ptr, NAME.as_ptr()) } != 1 {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected an unused DLPack capsule (torch.utils.dlpack.to_dlpack)"
        )));
    }
    // SAFETY: a valid "dltensor" capsule holds a DLManagedTensor.
    let managed = unsafe { ffi::PyCapsule_GetPointer(ptr, NAME.as_ptr()) } as *mut Managed;
    // We own the tensor from here: rename the capsule so that its destructor leaves it alone.
    // SAFETY: a valid capsule and a static name.
    unsafe { ffi::PyCapsule_SetName(ptr, USED.as_ptr()) };
    struct Release(*mut Managed);
    impl Drop for Release {
        fn drop(&mut self) {
            // SAFETY: the producer's tensor, consumed above and released once, here.
            unsafe {
                if let Some(deleter) = (*self.0).deleter {
                    deleter(self.0);
                }
            }
        }
    }
    let _release = Release(managed);
    // SAFETY: the producer keeps the tensor valid until its deleter runs.
    let t = unsafe { &(*managed).tensor };
    if t.device.device_type != CPU {
        return Err(PyValueError::new_err(format!(
            "{what}: expected a CPU tensor"
        )));
    }
    // SAFETY: `shape` holds `ndim` dimensions, and `strides` as many when not null.
    let (shape, strides) = unsafe {
        let n = t.ndim.max(0) as usize;
        let shape = if n == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(t.shape, n)
        };
        let strides =
            (!t.strides.is_null() && n > 0).then(|| std::slice::from_raw_parts(t.strides, n));
        (shape, strides)
    };
    let len = shape.iter().product::<i64>().max(0) as usize;
    if let Some(strides) = strides {
        let mut want = 1i64;
        for (d, s) in shape.iter().zip(strides).rev() {
            if *d > 1 && *s != want {
                return Err(PyValueError::new_err(format!(
                    "{what}: expected a contiguous tensor (call .contiguous())"
                )));
            }
            want *= d;
        }
    }
    let data = (t.data as *const u8).wrapping_add(t.byte_offset as usize);
    let (code, bits) = (t.dtype.code, t.dtype.bits);
    if t.dtype.lanes != 1 || (len > 0 && data.is_null()) {
        return Err(PyTypeError::new_err(format!("{what}: unsupported tensor")));
    }
    // A slice must be aligned for its element: a tensor viewed at an odd byte offset is not.
    if len > 0 && !(data as usize).is_multiple_of((bits as usize / 8).max(1)) {
        return Err(PyValueError::new_err(format!(
            "{what}: the tensor's data is not aligned for its {bits}-bit elements (call \
             .contiguous() on a fresh tensor)"
        )));
    }
    // SAFETY: a contiguous CPU tensor of `len` elements of the checked type at `data`, valid
    // until `_release` runs after `f`.
    unsafe {
        match (code, bits) {
            (FLOAT, 32) => f(View::F32(slice(data, len))),
            (INT, 64) => f(View::I64(slice(data, len))),
            (INT, 32) => f(View::I32(slice(data, len))),
            _ => Err(PyTypeError::new_err(format!(
                "{what}: unsupported dtype (code {code}, {bits} bits)"
            ))),
        }
    }
}

/// # Safety
/// `data` points to `len` valid, aligned values of `T` (or `len` is 0).
unsafe fn slice<'a, T>(data: *const u8, len: usize) -> &'a [T] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's guarantee.
    unsafe { std::slice::from_raw_parts(data as *const T, len) }
}
