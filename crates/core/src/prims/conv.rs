//! `Conv2D` (NCHW input, OIHW weight) and its two gradient primitives. MindSpore's
//! `pad_mode` (`valid`, `same`, `pad`) is resolved to explicit padding when the op is built.
//!
//! ```
//! use spore_core::{Tensor, DType, prims::conv::{Conv2dOptions, PadMode}};
//! let x = Tensor::ones(&[1, 1, 5, 5], DType::F32).unwrap();
//! let w = Tensor::ones(&[2, 1, 3, 3], DType::F32).unwrap();
//! let y = x.conv2d(&w, &Conv2dOptions::default().pad_mode(PadMode::Same)).unwrap();
//! assert_eq!(y.shape(), &[1, 2, 5, 5]);
//! ```

use std::panic::Location;

use spore_kernels::Buffer;
use spore_kernels::conv::{self as k, ConvGeometry, Pass};

use super::elementwise::when;
use super::require_same_dtype;
use crate::apply::{apply, op_error};
use crate::error::Result;
use crate::op::{ConvAttrs, ConvEpilogueParts, Op};
use crate::tensor::{Storage, Tensor, TensorType};

/// MindSpore's padding modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    /// No padding; windows that do not fit are dropped.
    Valid,
    /// Output size `ceil(in / stride)`; an odd total puts the extra row/column at the
    /// bottom/right (TensorFlow's rule, which MindSpore follows).
    Same,
    /// Explicit (top, bottom, left, right) padding.
    Pad([usize; 4]),
}

/// Options of [`Tensor::conv2d`] with MindSpore's defaults (stride 1, dilation 1, valid, 1 group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dOptions {
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub pad_mode: PadMode,
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: [1, 1],
            dilation: [1, 1],
            pad_mode: PadMode::Valid,
            groups: 1,
        }
    }
}

impl Conv2dOptions {
    pub fn stride(mut self, s: usize) -> Self {
        self.stride = [s, s];
        self
    }
    pub fn dilation(mut self, d: usize) -> Self {
        self.dilation = [d, d];
        self
    }
    pub fn pad_mode(mut self, p: PadMode) -> Self {
        self.pad_mode = p;
        self
    }
    pub fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }
}

/// (before, after) padding of one spatial axis for `same`: output = ceil(in / stride).
pub fn same_padding(input: usize, kernel_extent: usize, stride: usize) -> (usize, usize) {
    let out = input.div_ceil(stride);
    let total = ((out.saturating_sub(1)) * stride + kernel_extent).saturating_sub(input);
    (total / 2, total - total / 2)
}

/// Resolves `mode` to explicit (top, bottom, left, right) padding.
pub fn resolve_padding(
    mode: PadMode,
    hw: [usize; 2],
    extent: [usize; 2],
    stride: [usize; 2],
) -> [usize; 4] {
    match mode {
        PadMode::Valid => [0; 4],
        PadMode::Pad(p) => p,
        PadMode::Same => {
            let (t, b) = same_padding(hw[0], extent[0], stride[0]);
            let (l, r) = same_padding(hw[1], extent[1], stride[1]);
            [t, b, l, r]
        }
    }
}

fn geometry(a: &ConvAttrs, input: [usize; 4], weight: [usize; 4]) -> ConvGeometry {
    ConvGeometry::new(input, weight, a.stride, a.dilation, a.pads, a.groups)
}

fn shape4(t: &TensorType, what: &str) -> Result<[usize; 4], String> {
    <[usize; 4]>::try_from(t.shape.as_slice())
        .map_err(|_| format!("{what} must be 4-d, got {:?}", t.shape))
}

/// Validates a convolution and returns the output's spatial size.
fn check(a: &ConvAttrs, input: [usize; 4], weight: [usize; 4]) -> Result<[usize; 2], String> {
    let [_, c, h, w] = input;
    let [o, cg, kh, kw] = weight;
    if a.groups == 0 || a.stride.contains(&0) || a.dilation.contains(&0) {
        return Err("stride, dilation and groups must be at least 1".into());
    }
    if c % a.groups != 0 || o % a.groups != 0 || c / a.groups != cg {
        return Err(format!(
            "input channels {c} and output channels {o} must divide by groups {} and the weight must have {} input channels, got {cg}",
            a.groups,
            c / a.groups.max(1)
        ));
    }
    let eh = a.dilation[0] * (kh.max(1) - 1) + 1;
    let ew = a.dilation[1] * (kw.max(1) - 1) + 1;
    let (ph, pw) = (h + a.pads[0] + a.pads[1], w + a.pads[2] + a.pads[3]);
    if kh == 0 || kw == 0 || ph < eh || pw < ew {
        return Err(format!(
            "kernel {kh}x{kw} (dilated {eh}x{ew}) does not fit the padded input {ph}x{pw}"
        ));
    }
    Ok([(ph - eh) / a.stride[0] + 1, (pw - ew) / a.stride[1] + 1])
}

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    if let Op::Conv2dEpilogue { attrs, parts } = op {
        return infer_epilogue(*attrs, *parts, inputs);
    }
    let (p, q) = (inputs[0], inputs[1]);
    require_same_dtype(p, q)?;
    super::require_float(p, "input")?;
    let dtype = p.dtype;
    match op {
        Op::Conv2d(a) | Op::Conv2dRelu(a) => {
            let (x, w) = (shape4(p, "input")?, shape4(q, "weight")?);
            let [oh, ow] = check(a, x, w)?;
            Ok(TensorType::new(&[x[0], w[0], oh, ow], dtype))
        }
        Op::Conv2dBackpropInput { attrs, input_shape } => {
            let (dy, w) = (shape4(p, "dy")?, shape4(q, "weight")?);
            let [oh, ow] = check(attrs, *input_shape, w)?;
            if dy != [input_shape[0], w[0], oh, ow] {
                return Err(format!(
                    "dy must be {:?}, got {dy:?}",
                    [input_shape[0], w[0], oh, ow]
                ));
            }
            Ok(TensorType::new(input_shape, dtype))
        }
        Op::Conv2dBackpropFilter {
            attrs,
            weight_shape,
        } => {
            let (dy, x) = (shape4(p, "dy")?, shape4(q, "input")?);
            let [oh, ow] = check(attrs, x, *weight_shape)?;
            if dy != [x[0], weight_shape[0], oh, ow] {
                return Err(format!(
                    "dy must be {:?}, got {dy:?}",
                    [x[0], weight_shape[0], oh, ow]
                ));
            }
            Ok(TensorType::new(weight_shape, dtype))
        }
        _ => Err(format!("{} is not a convolution", op.name())),
    }
}

/// `Conv2DEpilogue`: a convolution, then one value per output channel for the scale and
/// the shift and the output's type for the addend, all of one float dtype. (The compiler
/// makes it for float32 graphs; float64 runs for the op table, and 16-bit inputs go
/// through float32 and round once, like the other convolutions.)
fn infer_epilogue(
    attrs: ConvAttrs,
    parts: ConvEpilogueParts,
    inputs: &[&TensorType],
) -> Result<TensorType, String> {
    let want = 2 + parts.operands();
    if inputs.len() != want {
        return Err(format!(
            "expected {want} inputs for {parts:?}, got {}",
            inputs.len()
        ));
    }
    let y = infer(&Op::Conv2d(attrs), &inputs[..2])?;
    let channels = y.shape[1];
    let names = [("scale", parts.scale), ("shift", parts.shift)];
    let per_channel = names.iter().filter(|(_, present)| *present);
    for ((name, _), t) in per_channel.zip(&inputs[2..]) {
        if t.dtype != y.dtype || t.numel() != channels {
            return Err(format!(
                "{name} must hold {channels} {} values (one per output channel), got {:?} of {}",
                y.dtype, t.shape, t.dtype
            ));
        }
    }
    if parts.addend && *inputs[want - 1] != y {
        return Err(format!(
            "the addend must have the output's type {:?} of {}, got {:?} of {}",
            y.shape,
            y.dtype,
            inputs[want - 1].shape,
            inputs[want - 1].dtype
        ));
    }
    Ok(y)
}

/// `Conv2DEpilogue`'s output: its operands as a kernel epilogue, the convolution from
/// the weight's cached filters in evaluation mode.
fn eval_epilogue(
    attrs: ConvAttrs,
    parts: ConvEpilogueParts,
    inputs: &[&Tensor],
) -> Result<Buffer, String> {
    let buffers: Vec<_> = inputs.iter().map(|t| t.contiguous_buffer()).collect();
    let g = geometry(&attrs, dims(inputs[0]), dims(inputs[1]));
    if let Buffer::F64(_) = &*buffers[0] {
        return epilogue_f64(&g, parts, &buffers);
    }
    let (x, w) = (f32s(&buffers[0])?, f32s(&buffers[1])?);
    let mut rest = buffers[2..].iter();
    let mut next = |present: bool| match present {
        true => rest.next().map(|b| f32s(b)).transpose(),
        false => Ok(None),
    };
    let e = k::ChannelEpilogue {
        scale: next(parts.scale)?,
        shift: next(parts.shift)?,
        addend: next(parts.addend)?,
        relu: parts.relu,
    };
    e.check(&g)?;
    if let Some(y) = super::filter_cache::forward_finished(x, &buffers[1], &g, &e) {
        return Ok(Buffer::F32(y));
    }
    Ok(Buffer::F32(k::epilogue::conv2d_finished(x, w, &g, &e)))
}

/// `Conv2DEpilogue` in float64 (the op table's reference runs; the compiler makes the op
/// for float32 graphs): the convolution, then each part as its elementwise op.
fn epilogue_f64(
    g: &ConvGeometry,
    parts: ConvEpilogueParts,
    buffers: &[std::sync::Arc<Buffer>],
) -> Result<Buffer, String> {
    let f64s = |b: &Buffer| match b {
        Buffer::F64(v) => Ok(v.clone()),
        other => Err(format!(
            "inputs must share one dtype, got {}",
            other.dtype()
        )),
    };
    let mut y = k::conv2d(&f64s(&buffers[0])?, &f64s(&buffers[1])?, g);
    let mut rest = buffers[2..].iter();
    let mut next = |present: bool| match present {
        true => rest.next().map(|b| f64s(b)).transpose(),
        false => Ok(None),
    };
    let (scale, shift, addend) = (next(parts.scale)?, next(parts.shift)?, next(parts.addend)?);
    let plane = y.len() / (g.n * g.o).max(1);
    for (i, v) in y.iter_mut().enumerate() {
        let channel = (i / plane) % g.o;
        *v = scale.as_ref().map_or(*v, |s| *v * s[channel]);
        *v = shift.as_ref().map_or(*v, |t| *v + t[channel]);
        *v = addend.as_ref().map_or(*v, |d| *v + d[i]);
        if parts.relu {
            *v = if *v > 0.0 { *v } else { 0.0 };
        }
    }
    Ok(Buffer::F64(y))
}

fn f32s(b: &Buffer) -> Result<&[f32], String> {
    match b {
        Buffer::F32(v) => Ok(v.as_slice()),
        other => Err(format!("takes Float32 values, got {}", other.dtype())),
    }
}

fn dims(t: &Tensor) -> [usize; 4] {
    [t.shape()[0], t.shape()[1], t.shape()[2], t.shape()[3]]
}

pub(crate) fn eval(op: &Op, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    if let Op::Conv2dEpilogue { attrs, parts } = op {
        let y = eval_epilogue(*attrs, *parts, inputs)?;
        return Ok(Storage::contiguous(y, &out.shape));
    }
    let (p, q) = (inputs[0].contiguous_buffer(), inputs[1].contiguous_buffer());
    let (pd, qd) = (dims(inputs[0]), dims(inputs[1]));
    // bfloat16 operands take `spore_kernels::conv::bf16` (accumulated in float32, rounded
    // once), on the path it finds fastest for the pass; float16 ones arrive widened
    // (`half_compute`).
    macro_rules! run {
        ($f:expr, $bf16:expr, $pass:expr, $g:expr) => {
            match (&*p, &*q) {
                (Buffer::F32(a), Buffer::F32(b)) => Buffer::F32($f(a.as_slice(), b.as_slice())),
                (Buffer::F64(a), Buffer::F64(b)) => Buffer::F64($f(a.as_slice(), b.as_slice())),
                (Buffer::BF16(a), Buffer::BF16(b)) => {
                    let path = k::bf16::best_path(&$g, $pass);
                    Buffer::BF16($bf16(path, a.as_slice(), b.as_slice()))
                }
                _ => return Err("inputs must be Float32, Float64 or BFloat16".into()),
            }
        };
    }
    let buf = match op {
        Op::Conv2d(a) | Op::Conv2dRelu(a) => {
            let g = geometry(a, pd, qd);
            let relu = matches!(op, Op::Conv2dRelu(_));
            // In evaluation mode a weight's prepared filters are reused across calls.
            if let Buffer::F32(x) = &*p
                && let Some(y) = super::filter_cache::forward(x, &q, &g, relu)
            {
                return Ok(Storage::contiguous(Buffer::F32(y), &out.shape));
            }
            let bf16 = |path, x, w| k::bf16::forward(path, x, w, &g, relu);
            if relu {
                run!(|x, w| k::conv2d_relu(x, w, &g), bf16, Pass::Forward, g)
            } else {
                run!(|x, w| k::conv2d(x, w, &g), bf16, Pass::Forward, g)
            }
        }
        Op::Conv2dBackpropInput { attrs, input_shape } => {
            let g = geometry(attrs, *input_shape, qd);
            let bf16 = |path, dy, w| k::bf16::input_gradient(path, dy, w, &g);
            run!(
                |dy, w| k::conv2d_backward_input(dy, w, &g),
                bf16,
                Pass::InputGradient,
                g
            )
        }
        Op::Conv2dBackpropFilter {
            attrs,
            weight_shape,
        } => {
            let g = geometry(attrs, qd, *weight_shape);
            let bf16 = |path, dy, x| k::bf16::filter_gradient(path, dy, x, &g);
            run!(
                |dy, x| k::conv2d_backward_filter(dy, x, &g),
                bf16,
                Pass::FilterGradient,
                g
            )
        }
        _ => return Err(format!("{} is not a convolution", op.name())),
    };
    Ok(Storage::contiguous(buf, &out.shape))
}

pub(crate) fn vjp(op: &Op, inputs: &[Tensor], g: &Tensor) -> Result<Vec<Option<Tensor>>> {
    let loc = Location::caller();
    let (p, q) = (&inputs[0], &inputs[1]);
    // All three are bilinear; each one's gradients are the other two (see ARCHITECTURE.md).
    let bpi = |attrs: ConvAttrs, dy: &Tensor, w: &Tensor, input_shape: [usize; 4]| {
        apply(
            Op::Conv2dBackpropInput { attrs, input_shape },
            &[dy, w],
            loc,
        )
    };
    let bpf = |attrs: ConvAttrs, dy: &Tensor, x: &Tensor, weight_shape: [usize; 4]| {
        apply(
            Op::Conv2dBackpropFilter {
                attrs,
                weight_shape,
            },
            &[dy, x],
            loc,
        )
    };
    let conv = |attrs: ConvAttrs, x: &Tensor, w: &Tensor| apply(Op::Conv2d(attrs), &[x, w], loc);
    // Gradients only for inputs that take part in differentiation.
    let (np, nq) = (p.requires_grad(), q.requires_grad());
    Ok(match op {
        // y = conv(x, w)
        Op::Conv2d(a) => vec![
            when(np, || bpi(*a, g, q, dims(p)))?,
            when(nq, || bpf(*a, g, p, dims(q)))?,
        ],
        // z = bpi(dy, w): <g, z> = <dy, conv(g, w)>
        Op::Conv2dBackpropInput { attrs, .. } => vec![
            when(np, || conv(*attrs, g, q))?,
            when(nq, || bpf(*attrs, p, g, dims(q)))?,
        ],
        // z = bpf(dy, x): <g, z> = <dy, conv(x, g)>
        Op::Conv2dBackpropFilter { attrs, .. } => vec![
            when(np, || conv(*attrs, q, g))?,
            when(nq, || bpi(*attrs, p, g, dims(q)))?,
        ],
        Op::Conv2dRelu(_) | Op::Conv2dEpilogue { .. } => {
            return Err(crate::error::Error::invalid(format!(
                "{} has no gradient rule: fusion runs after autodiff, on compiled graphs only",
                op.name()
            )));
        }
        _ => vec![None, None],
    })
}

impl Tensor {
    /// 2-D convolution of an NCHW input with an OIHW weight (no bias; add it separately).
    #[track_caller]
    pub fn conv2d(&self, weight: &Tensor, opts: &Conv2dOptions) -> Result<Tensor> {
        let loc = Location::caller();
        let probe = Op::Conv2d(ConvAttrs {
            stride: opts.stride,
            dilation: opts.dilation,
            pads: [0; 4],
            groups: opts.groups,
        });
        if self.rank() != 4 || weight.rank() != 4 {
            return Err(op_error(
                &probe,
                format!(
                    "input and weight must be 4-d, got {:?} and {:?}",
                    self.shape(),
                    weight.shape()
                ),
                &[self, weight],
                loc,
            ));
        }
        let extent = [
            opts.dilation[0] * weight.shape()[2].saturating_sub(1) + 1,
            opts.dilation[1] * weight.shape()[3].saturating_sub(1) + 1,
        ];
        let pads = resolve_padding(
            opts.pad_mode,
            [self.shape()[2], self.shape()[3]],
            extent,
            opts.stride,
        );
        let attrs = ConvAttrs {
            stride: opts.stride,
            dilation: opts.dilation,
            pads,
            groups: opts.groups,
        };
        apply(Op::Conv2d(attrs), &[self, weight], loc)
    }
}
