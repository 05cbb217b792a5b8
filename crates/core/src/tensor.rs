//! [`Tensor`]: an immutable, cheaply cloned handle to typed, strided data, with the
//! autodiff link to the operation that produced it.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
//! let t = x.transpose().unwrap(); // a view: no copy
//! assert_eq!(t.shape(), &[3, 2]);
//! assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
//! assert_eq!(x.dtype(), DType::F32);
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spore_kernels::{Buffer, DType, Element, Layout, elementwise};

use crate::error::{Error, Result};
use crate::op::Op;
pub use crate::types::TensorType;

/// Concrete data: a shared buffer and the layout through which this tensor sees it.
#[derive(Clone, Debug)]
pub struct Storage {
    pub buffer: Arc<Buffer>,
    pub layout: Layout,
}

impl Storage {
    pub fn contiguous(buffer: Buffer, shape: &[usize]) -> Storage {
        Storage {
            // Inside a compiled step the `Arc` comes back from the pool (no allocation).
            buffer: spore_kernels::arena::share(buffer),
            layout: Layout::contiguous(shape),
        }
    }
}

/// The operation that produced a tensor, kept only when a gradient may flow through it.
#[derive(Debug)]
pub struct GradFn {
    pub op: Op,
    pub inputs: Vec<Tensor>,
}

/// What a tensor holds: numbers, or (while a function is being traced) a reference to a
/// value of the graph under construction.
#[derive(Clone, Debug)]
pub enum Data {
    Concrete(Storage),
    Symbolic { trace: u64, value: usize },
}

pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) ty: TensorType,
    pub(crate) data: Data,
    pub(crate) node: Option<GradFn>,
    pub(crate) requires_grad: bool,
    /// Gradient accumulated by [`Tensor::backward`] (PyTorch style), for leaves.
    pub(crate) grad: Mutex<Option<Tensor>>,
}

impl Drop for Inner {
    /// Dropping the last handle of a long autodiff chain would recurse once per node and
    /// overflow the stack; unlink the chain iteratively instead.
    fn drop(&mut self) {
        let Some(node) = self.node.take() else {
            return;
        };
        let mut pending = node.inputs;
        while let Some(t) = pending.pop() {
            if let Ok(mut inner) = Arc::try_unwrap(t.0)
                && let Some(n) = inner.node.take()
            {
                pending.extend(n.inputs);
            }
        }
    }
}

/// An n-dimensional array. Cloning copies a pointer; the data is never mutated.
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<Inner>);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Tensor {
    pub(crate) fn from_parts(
        ty: TensorType,
        storage: Storage,
        node: Option<GradFn>,
        requires_grad: bool,
    ) -> Tensor {
        Tensor::from_data(ty, Data::Concrete(storage), node, requires_grad)
    }

    pub(crate) fn from_data(
        ty: TensorType,
        data: Data,
        node: Option<GradFn>,
        requires_grad: bool,
    ) -> Tensor {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // Inside a compiled step, the header of a value that died earlier is refilled
        // instead of allocating a new one (see `recycle`).
        if let Some(spare) = spore_kernels::arena::take_header()
            && let Ok(mut spare) = spare.downcast::<Inner>()
            && let Some(inner) = Arc::get_mut(&mut spare)
        {
            inner.id = id;
            inner.ty = ty;
            inner.data = data;
            inner.node = node;
            inner.requires_grad = requires_grad;
            return Tensor(spare);
        }
        Tensor(Arc::new(Inner {
            id,
            ty,
            data,
            node,
            requires_grad,
            grad: Mutex::new(None),
        }))
    }

    /// A tensor over an owned buffer; `shape` must hold exactly `buffer.len()` elements.
    #[track_caller]
    pub fn from_buffer(buffer: Buffer, shape: &[usize]) -> Result<Tensor> {
        let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        if n != Some(buffer.len()) {
            let n = n.map_or("more than 2^64".to_string(), |n| n.to_string());
            return Err(Error::invalid_here(format!(
                "Tensor::from_buffer: shape {shape:?} holds {n} elements but {} were given",
                buffer.len()
            )));
        }
        let ty = TensorType::new(shape, buffer.dtype());
        Ok(Tensor::from_parts(
            ty,
            Storage::contiguous(buffer, shape),
            None,
            false,
        ))
    }

    /// A tensor over a buffer someone else may also hold (read-only: Spore never writes
    /// into a buffer that is shared). Communication uses this to recycle its result
    /// buffers: it keeps a handle and reuses a buffer once every tensor over it is gone.
    #[track_caller]
    pub fn from_shared_buffer(buffer: Arc<Buffer>, shape: &[usize]) -> Result<Tensor> {
        if shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)) != Some(buffer.len()) {
            return Err(Error::invalid_here(format!(
                "Tensor::from_shared_buffer: shape {shape:?} does not hold the buffer's {} elements",
                buffer.len()
            )));
        }
        let ty = TensorType::new(shape, buffer.dtype());
        let storage = Storage {
            buffer,
            layout: Layout::contiguous(shape),
        };
        Ok(Tensor::from_parts(ty, storage, None, false))
    }

    /// A tensor from a vector and a shape (row-major).
    #[track_caller]
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        Tensor::from_buffer(T::into_buffer(data), shape)
    }

    /// A tensor from `f64` values converted to `dtype`.
    #[track_caller]
    pub fn from_f64(data: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::from_buffer(Buffer::from_f64(dtype, data), shape)
    }

    /// A 0-d tensor.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::from_parts(
            TensorType::new(&[], T::DTYPE),
            Storage::contiguous(T::into_buffer(vec![value]), &[]),
            None,
            false,
        )
    }

    /// A 0-d tensor of `dtype` holding `value` (converted with `as` semantics).
    pub fn scalar_of(value: f64, dtype: DType) -> Tensor {
        Tensor::filled(&[], value, dtype)
    }

    /// A tensor of `shape` filled with `value` (converted to `dtype`). A shape whose size
    /// overflows or exceeds the memory available is an error (see [`crate::memory`]).
    #[track_caller]
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
        crate::memory::check(shape, dtype)
            .map_err(|m| Error::invalid_here(format!("full/zeros/ones: {m}")))?;
        Ok(Tensor::filled(shape, value, dtype))
    }

    /// [`Tensor::full`] for a shape known to fit: a scalar, or the shape of a tensor that
    /// exists (its size passed the check when it was made).
    fn filled(shape: &[usize], value: f64, dtype: DType) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_parts(
            TensorType::new(shape, dtype),
            Storage::contiguous(Buffer::filled(dtype, n, value), shape),
            None,
            false,
        )
    }

    #[track_caller]
    pub fn zeros(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 0.0, dtype)
    }

    #[track_caller]
    pub fn ones(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 1.0, dtype)
    }

    /// `value` in this tensor's shape and dtype.
    pub fn full_like(&self, value: f64) -> Tensor {
        Tensor::filled(self.shape(), value, self.dtype())
    }

    /// Zeros of this tensor's shape and dtype.
    pub fn zeros_like(&self) -> Tensor {
        Tensor::filled(self.shape(), 0.0, self.dtype())
    }

    /// Ones of this tensor's shape and dtype.
    pub fn ones_like(&self) -> Tensor {
        Tensor::filled(self.shape(), 1.0, self.dtype())
    }

    /// `start, start + step, ...` below `end` (like `numpy.arange`).
    #[track_caller]
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::invalid_here(format!(
                "arange: expected finite start/end and a non-zero step, got start={start}, end={end}, step={step}"
            )));
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        crate::memory::check(&[n], DType::F64)
            .map_err(|m| Error::invalid_here(format!("arange({start}, {end}, {step}): {m}")))?;
        let values: Vec<f64> = (0..n).map(|i| start + i as f64 * step).collect();
        Tensor::from_f64(&values, &[n], dtype)
    }

    /// The `n x n` identity matrix.
    #[track_caller]
    pub fn eye(n: usize, dtype: DType) -> Result<Tensor> {
        crate::memory::check(&[n, n], DType::F64)
            .map_err(|m| Error::invalid_here(format!("eye({n}): {m}")))?;
        let mut v = vec![0.0; n * n];
        for i in 0..n {
            v[i * n + i] = 1.0;
        }
        Ok(Tensor::from_parts(
            TensorType::new(&[n, n], dtype),
            Storage::contiguous(Buffer::from_f64(dtype, &v), &[n, n]),
            None,
            false,
        ))
    }

    // ----- accessors -----

    /// A process-unique id (stable for the life of the handle and its clones).
    pub fn id(&self) -> u64 {
        self.0.id
    }
    pub fn tensor_type(&self) -> &TensorType {
        &self.0.ty
    }
    pub fn shape(&self) -> &[usize] {
        &self.0.ty.shape
    }
    pub fn dtype(&self) -> DType {
        self.0.ty.dtype
    }
    pub fn rank(&self) -> usize {
        self.0.ty.shape.len()
    }
    pub fn numel(&self) -> usize {
        self.0.ty.numel()
    }
    /// The numbers behind the tensor; `None` for a symbolic (traced) tensor.
    pub fn storage(&self) -> Option<&Storage> {
        match &self.0.data {
            Data::Concrete(s) => Some(s),
            Data::Symbolic { .. } => None,
        }
    }
    pub fn data(&self) -> &Data {
        &self.0.data
    }
    /// True while this tensor stands for a value of a graph being traced.
    pub fn is_symbolic(&self) -> bool {
        matches!(self.0.data, Data::Symbolic { .. })
    }
    /// Drops this handle; when it was the only one, its header, its storage's `Arc` and
    /// (when unshared) its buffer go to the current thread's buffer pool instead of the
    /// allocator, for the next values of a compiled step (see `spore_kernels::arena`;
    /// without a pool everything is freed as usual).
    pub fn recycle(mut self) {
        let Some(inner) = Arc::get_mut(&mut self.0) else {
            return;
        };
        // A placeholder that owns nothing, so the parked header holds no memory.
        let placeholder = Data::Symbolic { trace: 0, value: 0 };
        if let Data::Concrete(s) = std::mem::replace(&mut inner.data, placeholder) {
            spore_kernels::arena::recycle_shared(s.buffer);
        }
        inner.node = None;
        inner.requires_grad = false;
        match inner.grad.get_mut() {
            Ok(g) => *g = None,
            Err(poisoned) => *poisoned.into_inner() = None,
        }
        spore_kernels::arena::recycle_header(self.0);
    }

    /// Takes this tensor's buffer out, leaving it empty, when this handle is the only one
    /// on both the tensor and its buffer and the buffer holds exactly the tensor's elements
    /// in row-major order: an executor gives a dying value's memory to the op that
    /// overwrites it (in-place execution). `None` (and nothing changed) otherwise.
    pub(crate) fn take_unique_buffer(&mut self) -> Option<Buffer> {
        let numel = self.numel();
        let inner = Arc::get_mut(&mut self.0)?;
        let Data::Concrete(s) = &mut inner.data else {
            return None;
        };
        if !s.layout.is_contiguous() || s.layout.offset != 0 || s.buffer.len() != numel {
            return None;
        }
        let buffer = Arc::get_mut(&mut s.buffer)?;
        // An empty `Vec` does not allocate; the emptied tensor is released right after.
        Some(std::mem::replace(buffer, Buffer::F32(Vec::new())))
    }

    /// Storage of a tensor known to be concrete: kernels only ever see such tensors
    /// (`apply` evaluates only when every input is concrete).
    pub(crate) fn buf(&self) -> &Storage {
        match &self.0.data {
            Data::Concrete(s) => s,
            Data::Symbolic { .. } => unreachable!("internal: a kernel was given a symbolic tensor"),
        }
    }
    /// The layout of a concrete tensor (a contiguous layout for a symbolic one).
    pub fn layout(&self) -> Layout {
        match &self.0.data {
            Data::Concrete(s) => s.layout.clone(),
            Data::Symbolic { .. } => Layout::contiguous(self.shape()),
        }
    }
    /// The operation that produced this tensor, when it is part of an autodiff graph.
    pub fn grad_fn(&self) -> Option<&GradFn> {
        self.0.node.as_ref()
    }
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad
    }

    /// A new leaf sharing this tensor's data, with `requires_grad` set as asked.
    pub fn with_requires_grad(&self, requires_grad: bool) -> Tensor {
        Tensor::from_data(self.0.ty.clone(), self.0.data.clone(), None, requires_grad)
    }

    /// The same data with a gradient rule: gradients flowing into the result reach
    /// `inputs` through `op`'s `vjp` (used to give compiled calls a backward pass).
    pub fn with_grad_fn(&self, op: Op, inputs: Vec<Tensor>) -> Tensor {
        let track = crate::depth::is_grad_enabled() && inputs.iter().any(|t| t.requires_grad());
        let node = track.then_some(GradFn { op, inputs });
        Tensor::from_data(self.0.ty.clone(), self.0.data.clone(), node, track)
    }

    /// A leaf sharing the data, cut from the autodiff graph.
    pub fn detach(&self) -> Tensor {
        self.with_requires_grad(false)
    }

    /// The gradient accumulated by [`Tensor::backward`], if any.
    pub fn grad(&self) -> Option<Tensor> {
        self.0.grad.lock().ok().and_then(|g| g.clone())
    }

    /// Clears the accumulated gradient.
    pub fn zero_grad(&self) {
        if let Ok(mut g) = self.0.grad.lock() {
            *g = None;
        }
    }

    /// The elements in row-major order as `T` (which must be the tensor's dtype).
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let s = self.concrete_or_error("to_vec")?;
        match T::slice_of(&s.buffer) {
            Some(data) => Ok(spore_kernels::layout::to_contiguous(data, &s.layout)),
            None => Err(Error::invalid_here(format!(
                "to_vec: the tensor holds {} but {} was requested; cast first",
                self.dtype(),
                T::DTYPE
            ))),
        }
    }

    /// The elements converted to f64, whatever the dtype.
    #[track_caller]
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let s = self.concrete_or_error("to_f64_vec")?;
        Ok(elementwise::copy(&s.buffer, &s.layout).to_f64_vec())
    }

    /// Reading numbers from a traced tensor is how a Rust `if` on a tensor value would
    /// silently bake one branch into a graph; it is an error instead.
    #[track_caller]
    fn concrete_or_error(&self, what: &str) -> Result<&Storage> {
        let location = std::panic::Location::caller();
        self.storage().ok_or_else(|| Error::Invalid {
            location: Some(location),
            message: format!(
                "{what}: this tensor is symbolic (it is being traced for Graph mode or jit), so its value is not known yet; \
                 use ops::cond / ops::while_loop for control flow that depends on tensor values"
            ),
        })
    }

    /// The single element of a one-element tensor, as `f64`.
    #[track_caller]
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::invalid_here(format!(
                "item: expected a tensor with one element, got shape {:?}",
                self.shape()
            )));
        }
        Ok(self.to_f64_vec()?[0])
    }

    /// A contiguous buffer with this tensor's elements (shared when already contiguous).
    /// The tensor must be concrete.
    pub(crate) fn contiguous_buffer(&self) -> Arc<Buffer> {
        let s = self.buf();
        if s.layout.is_contiguous() && s.layout.offset == 0 && s.buffer.len() == self.numel() {
            s.buffer.clone()
        } else {
            Arc::new(elementwise::copy(&s.buffer, &s.layout))
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor#{}({})", self.id(), self.tensor_type())
    }
}
