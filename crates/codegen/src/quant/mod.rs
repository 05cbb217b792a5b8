//! Int8 post-training quantization, as TensorFlow Lite Micro and CMSIS-NN run it:
//! weights symmetric per output channel (`w ≈ scale[oc] · q`, q in [-127, 127]);
//! activations per tensor, asymmetric (`x ≈ scale · (q - zero)`, q in [-128, 127]) with
//! ranges measured on calibration inputs; sums in int32 (the bias quantized to the sum's
//! scale); each output requantized by a fixed-point multiplier (`mult · 2^-(31 + shift)`,
//! a 64-bit product and a rounding shift). The input's zero point is folded into the
//! bias, so the inner loops multiply raw int8 values. The network's inputs are quantized by the
//! first kernel and its outputs leave the last one in float32, so the C API is the float
//! one.
//!
//! ```
//! use spore_codegen::quant::{Multiplier, QParams};
//! let q = QParams::from_range(-1.0, 3.0);
//! assert_eq!(q.quantize(0.0), q.zero as i8); // zero is exact
//! let m = Multiplier::new(0.0123).unwrap();
//! assert!((m.apply(1000) - 12).abs() <= 1); // 1000 · 0.0123 = 12.3
//! ```

pub mod emit;

use spore_core::op::PoolAttrs;
use spore_core::{Error, Result, Tensor};

use crate::arena::{ArenaPlan, plan_buffers};
use crate::emit::conv::{channel_block, packed_channel};
use crate::freeze::Frozen;
use crate::program::{Act, Conv, Dense, PoolKind, Program, Step, Storage, Value, ValueId};

/// A per-tensor affine int8 quantization.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QParams {
    pub scale: f32,
    pub zero: i32,
}

impl QParams {
    /// Covers `[min, max]` widened to include 0 (so that zero, and padding, are exact).
    pub fn from_range(min: f32, max: f32) -> QParams {
        let (lo, hi) = (min.min(0.0), max.max(0.0));
        // At least the smallest normal float, so that 1 / scale stays finite.
        let scale = if hi > lo {
            ((hi - lo) / 255.0).max(f32::MIN_POSITIVE)
        } else {
            1.0
        };
        let zero = (-128.0 - lo / scale).round().clamp(-128.0, 127.0) as i32;
        QParams { scale, zero }
    }

    /// The level of `x` (saturating; NaN gives the zero point).
    pub fn quantize(&self, x: f32) -> i8 {
        let level = (x / self.scale).round() as i64 + self.zero as i64;
        level.clamp(-128, 127) as i8
    }

    /// The quantized value of `x`, clamped to int8 (for activation bounds).
    fn level(&self, x: f32) -> i32 {
        self.quantize(x) as i32
    }
}

/// A real multiplier as fixed point: `mult · 2^-(31 + shift)`, `mult` in [2^30, 2^31).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Multiplier {
    pub mult: i32,
    pub shift: i32,
}

impl Multiplier {
    pub fn new(real: f64) -> Result<Multiplier> {
        if !(real.is_finite() && real >= 0.0) {
            return Err(Error::invalid(format!(
                "int8 codegen: a requantization multiplier must be finite and not negative, got {real}"
            )));
        }
        // Below one part in 2^31 every sum rounds to 0 (an all-zero or pruned channel):
        // the output is the zero point.
        if real < 2f64.powi(-31) {
            return Ok(Multiplier { mult: 0, shift: 0 });
        }
        // real = m · 2^e with m in [0.5, 1).
        let e = real.log2().floor() as i32 + 1;
        let m = real / 2f64.powi(e);
        let mut mult = (m * 2f64.powi(31)).round() as i64;
        let mut e = e;
        if mult == 1 << 31 {
            mult /= 2;
            e += 1;
        }
        let shift = -e;
        if !(-30..=30).contains(&shift) {
            return Err(Error::invalid(format!(
                "int8 codegen: multiplier {real} is above the fixed-point range (at most 2^30)"
            )));
        }
        Ok(Multiplier {
            mult: mult as i32,
            shift,
        })
    }

    /// What the generated C computes (a rounding right shift of the 64-bit product,
    /// kept in 64 bits: it is clamped to int8 after the zero point is added).
    pub fn apply(&self, acc: i32) -> i64 {
        let total = 31 + self.shift;
        let p = acc as i64 * self.mult as i64;
        (p + (1i64 << (total - 1))) >> total
    }
}

/// Where a quantized kernel's result goes.
#[derive(Clone, Debug)]
pub enum QOut {
    /// Int8 in the workspace, with the output's parameters and activation bounds.
    Int8 {
        q: QParams,
        mults: Vec<Multiplier>,
        lo: i32,
        hi: i32,
    },
    /// Float32 into the caller's output: `act(sum · scale[oc])`.
    Float { scales: Vec<f32>, act: Act },
}

/// One int8 kernel call.
#[derive(Clone, Debug)]
pub enum QStep {
    /// Float input to int8.
    Quantize {
        x: ValueId,
        y: ValueId,
        numel: usize,
        q: QParams,
    },
    Conv {
        conv: Conv,
        w: Vec<i8>,
        bias: Vec<i32>,
        input: QParams,
        out: QOut,
    },
    Dense {
        dense: Dense,
        w: Vec<i8>,
        bias: Vec<i32>,
        input: QParams,
        out: QOut,
    },
    /// Padding keeps its input's parameters (the fill is quantized with them).
    Pad {
        x: ValueId,
        y: ValueId,
        input: Vec<usize>,
        pads: Vec<(usize, usize)>,
        value: i8,
    },
    /// Pooling keeps its input's parameters (`zero`: the level of a real 0).
    Pool {
        x: ValueId,
        y: ValueId,
        zero: i32,
        kind: PoolKind,
        attrs: PoolAttrs,
        input: [usize; 4],
        output: [usize; 4],
    },
}

impl QStep {
    pub fn reads(&self) -> Vec<ValueId> {
        match self {
            QStep::Quantize { x, .. } | QStep::Pool { x, .. } | QStep::Pad { x, .. } => {
                vec![*x]
            }
            QStep::Conv { conv, .. } => vec![conv.x],
            QStep::Dense { dense, .. } => vec![dense.x],
        }
    }

    pub fn writes(&self) -> ValueId {
        match self {
            QStep::Quantize { y, .. } | QStep::Pool { y, .. } | QStep::Pad { y, .. } => *y,
            QStep::Conv { conv, .. } => conv.y,
            QStep::Dense { dense, .. } => dense.y,
        }
    }
}

/// A program in int8.
#[derive(Clone, Debug)]
pub struct Quantized {
    /// The buffers (the float program's, plus one int8 copy per quantized input).
    pub values: Vec<Value>,
    pub steps: Vec<QStep>,
    /// The scope of each step (comments).
    pub scopes: Vec<String>,
    /// Each buffer's parameters (inputs: of their int8 copies).
    pub params: Vec<Option<QParams>>,
}

impl Quantized {
    /// The workspace plan: every workspace buffer is int8.
    pub fn plan(&self) -> (Vec<Option<usize>>, ArenaPlan) {
        let buffers: Vec<Option<usize>> = self
            .values
            .iter()
            .map(|v| (v.storage == Storage::Arena).then_some(v.numel))
            .collect();
        let steps: Vec<(Vec<usize>, usize)> =
            self.steps.iter().map(|s| (s.reads(), s.writes())).collect();
        plan_buffers(&buffers, &steps)
    }

    /// Bytes of the int8 weights, int32 biases and the per-channel multipliers.
    pub fn weight_bytes(&self) -> usize {
        self.steps
            .iter()
            .map(|s| match s {
                QStep::Conv { w, bias, out, .. } | QStep::Dense { w, bias, out, .. } => {
                    w.len()
                        + 4 * bias.len()
                        + match out {
                            QOut::Int8 { mults, .. } => 8 * mults.len(),
                            QOut::Float { scales, .. } => 4 * scales.len(),
                        }
                }
                _ => 0,
            })
            .sum()
    }

    /// One line per quantized tensor.
    pub fn describe(&self) -> Vec<String> {
        self.values
            .iter()
            .zip(&self.params)
            .filter_map(|(v, q)| {
                q.map(|q| format!("{}: scale {:e}, zero point {}", v.scope, q.scale, q.zero))
            })
            .collect()
    }
}

/// The range of every buffer's values over the calibration samples.
fn calibrate(p: &Program, frozen: &Frozen, samples: &[Vec<Tensor>]) -> Result<Vec<(f32, f32)>> {
    if samples.is_empty() {
        return Err(Error::invalid(
            "int8 codegen: calibration needs at least one sample",
        ));
    }
    let mut g = frozen.graph.clone();
    g.outputs = p.values.iter().map(|v| v.node).collect();
    g.updates.clear();
    let mut ranges = vec![(f32::INFINITY, f32::NEG_INFINITY); p.values.len()];
    for (k, sample) in samples.iter().enumerate() {
        let out = g.interpret(sample).map_err(|e| {
            Error::invalid(format!(
                "int8 codegen: calibration sample {k} does not fit the network: {e}"
            ))
        })?;
        for (r, t) in ranges.iter_mut().zip(&out.outputs) {
            for v in t.to_vec::<f32>()? {
                if v.is_finite() {
                    r.0 = r.0.min(v);
                    r.1 = r.1.max(v);
                }
            }
        }
    }
    Ok(ranges)
}

/// Per-output-channel symmetric quantization of a weight; `channel_of` gives the output
/// channel of each element (packed convolution weights, `[K][N]` dense ones).
fn quantize_weights(
    w: &[f32],
    channels: usize,
    channel_of: impl Fn(usize) -> usize,
) -> (Vec<i8>, Vec<f32>) {
    let mut max = vec![0f32; channels];
    for (i, v) in w.iter().enumerate() {
        let c = channel_of(i);
        max[c] = max[c].max(v.abs());
    }
    let scales: Vec<f32> = max
        .iter()
        .map(|&m| if m > 0.0 { m / 127.0 } else { 1.0 })
        .collect();
    let q = w
        .iter()
        .enumerate()
        .map(|(i, v)| (v / scales[channel_of(i)]).round().clamp(-127.0, 127.0) as i8)
        .collect();
    (q, scales)
}

fn act_bounds(act: Act, q: QParams) -> (i32, i32) {
    match act {
        Act::None => (-128, 127),
        Act::Relu => (q.level(0.0).max(-128), 127),
        Act::Relu6 => (q.level(0.0).max(-128), q.level(6.0).min(127)),
    }
}

fn output_of(
    p: &Program,
    y: ValueId,
    act: Act,
    input: QParams,
    wscales: &[f32],
    params: &[Option<QParams>],
) -> Result<QOut> {
    if let Storage::Output(_) = p.values[y].storage {
        return Ok(QOut::Float {
            scales: wscales.iter().map(|s| s * input.scale).collect(),
            act,
        });
    }
    let q = params[y].ok_or_else(|| {
        Error::invalid(format!(
            "int8 codegen: {} had no finite value on any calibration sample",
            p.values[y].scope
        ))
    })?;
    let mults = wscales
        .iter()
        .map(|s| Multiplier::new(input.scale as f64 * *s as f64 / q.scale as f64))
        .collect::<Result<Vec<_>>>()?;
    let (lo, hi) = act_bounds(act, q);
    Ok(QOut::Int8 { q, mults, lo, hi })
}

/// The int8 program while it is built.
struct Builder<'p> {
    p: &'p Program,
    values: Vec<Value>,
    params: Vec<Option<QParams>>,
    steps: Vec<QStep>,
    scopes: Vec<String>,
    /// The int8 copy of each float input a kernel reads, made once.
    copies: Vec<Option<ValueId>>,
}

impl Builder<'_> {
    /// Buffer `x` as an int8 kernel reads it: itself, or for a float input its int8 copy
    /// (made by a Quantize step the first time).
    fn read(&mut self, x: ValueId) -> Result<(ValueId, QParams)> {
        let q = self.params[x].unwrap_or(QParams::from_range(0.0, 0.0));
        match self.values[x].storage {
            Storage::Arena => return Ok((x, q)),
            Storage::Output(_) => {
                return Err(Error::invalid(format!(
                    "int8 codegen: {} is a network output (float32) and also read by a later kernel; int8 code needs each output to be a last result (generate float32 instead)",
                    self.values[x].scope
                )));
            }
            Storage::Input(_) => {}
        }
        if let Some(c) = self.copies[x] {
            return Ok((c, q));
        }
        let mut copy = self.values[x].clone();
        copy.storage = Storage::Arena;
        copy.scope = format!("{} (int8)", self.values[x].scope);
        let numel = copy.numel;
        self.values.push(copy);
        self.params.push(Some(q));
        let y = self.values.len() - 1;
        self.copies[x] = Some(y);
        self.steps.push(QStep::Quantize { x, y, numel, q });
        self.scopes
            .push(format!("quantize {}", self.values[x].scope));
        Ok((y, q))
    }

    fn conv(&mut self, c: &Conv) -> Result<QStep> {
        let p = self.p;
        let (x, input) = self.read(c.x)?;
        let per = c.kernel[0] * c.kernel[1] * c.input[1] / c.attrs.groups.max(1);
        let block = channel_block(c.conv[1] / c.attrs.groups.max(1));
        let channel = |i| packed_channel(i, per, block);
        let (w, ws) = quantize_weights(&p.consts[c.w].data, c.conv[1], channel);
        let bias = quantized_bias(p, c.bias, &ws, input, c.conv[1]);
        let bias = int32_bias(bias, &w, input.zero, channel, per, &c_scope(p, c.y))?;
        let out = output_of(p, c.y, c.act, input, &ws, &self.params)?;
        let mut conv = c.clone();
        conv.x = x;
        Ok(QStep::Conv {
            conv,
            w,
            bias,
            input,
            out,
        })
    }

    fn dense(&mut self, d: &Dense) -> Result<QStep> {
        let p = self.p;
        let (x, input) = self.read(d.x)?;
        let n = d.n;
        let (w, ws) = quantize_weights(&p.consts[d.w].data, n, |i| i % n);
        let bias = quantized_bias(p, d.bias, &ws, input, n);
        let bias = int32_bias(bias, &w, input.zero, |i| i % n, d.k, &c_scope(p, d.y))?;
        let out = output_of(p, d.y, d.act, input, &ws, &self.params)?;
        let mut dense = d.clone();
        dense.x = x;
        Ok(QStep::Dense {
            dense,
            w,
            bias,
            input,
            out,
        })
    }

    /// The int8 form of float step `s`.
    fn step(&mut self, s: usize) -> Result<QStep> {
        let p = self.p;
        Ok(match &p.steps[s] {
            Step::Conv(c) => self.conv(c)?,
            Step::Dense(d) => self.dense(d)?,
            Step::Pad {
                x,
                y,
                input,
                pads,
                value,
            } if p.values[*y].storage == Storage::Arena => {
                let (x, q) = self.read(*x)?;
                self.params[*y] = Some(q);
                QStep::Pad {
                    x,
                    y: *y,
                    input: input.clone(),
                    pads: pads.clone(),
                    value: q.quantize(*value),
                }
            }
            Step::Pool {
                x,
                y,
                kind,
                attrs,
                input,
                output,
            } if p.values[*y].storage == Storage::Arena => {
                let (x, q) = self.read(*x)?;
                self.params[*y] = Some(q);
                QStep::Pool {
                    x,
                    y: *y,
                    zero: q.zero,
                    kind: *kind,
                    attrs: *attrs,
                    input: *input,
                    output: *output,
                }
            }
            other => {
                return Err(Error::invalid(format!(
                    "int8 codegen: {} at scope {} has no int8 kernel (int8 code covers Conv2D, Dense/MatMul with their bias, ReLU, ReLU6 and pooling, reshapes, and a Conv2D or Dense as the output); generate float32 instead",
                    other.kind(),
                    p.scopes[s]
                )));
            }
        })
    }
}

/// Quantizes a float program from calibration samples (each one list of input tensors
/// of the generated input types).
pub fn quantize(p: &Program, frozen: &Frozen, samples: &[Vec<Tensor>]) -> Result<Quantized> {
    let ranges = calibrate(p, frozen, samples)?;
    let mut b = Builder {
        p,
        values: p.values.clone(),
        params: ranges
            .iter()
            .map(|&(lo, hi)| (lo <= hi).then(|| QParams::from_range(lo, hi)))
            .collect(),
        steps: vec![],
        scopes: vec![],
        copies: vec![None; p.values.len()],
    };
    for s in 0..p.steps.len() {
        let step = b.step(s)?;
        b.steps.push(step);
        b.scopes.push(p.scopes[s].clone());
    }
    for &o in &p.outputs {
        b.params[o] = None;
    }
    Ok(Quantized {
        values: b.values,
        steps: b.steps,
        scopes: b.scopes,
        params: b.params,
    })
}

fn c_scope(p: &Program, y: ValueId) -> String {
    p.values[y].scope.clone()
}

/// The int32 bias of a kernel summing `per` products per output. `Σ w·(x - zero) =
/// Σ w·x - zero·Σ w`: the input's zero point moves into the bias, so the kernels multiply
/// raw int8 values (exact because every tap reads a real element: padding is a copy
/// filled with the zero point, never a skipped tap). An error when the bias, or a sum
/// of `per` products of at most 128·127 on top of it, could leave int32.
fn int32_bias(
    bias: Vec<i64>,
    w: &[i8],
    zero: i32,
    channel_of: impl Fn(usize) -> usize,
    per: usize,
    scope: &str,
) -> Result<Vec<i32>> {
    let mut b = bias;
    for (i, &v) in w.iter().enumerate() {
        b[channel_of(i)] -= zero as i64 * v as i64;
    }
    let products = per as i64 * 128 * 127;
    b.iter()
        .map(|&v| {
            i32::try_from(v)
                .ok()
                .filter(|_| v.abs() + products <= i32::MAX as i64)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "int8 codegen: {scope}: the int32 sums could overflow (bias {v}, {per} products per output); its bias is too large for its weights' scale, generate float32 instead"
                    ))
                })
        })
        .collect()
}

fn quantized_bias(
    p: &Program,
    bias: Option<usize>,
    wscales: &[f32],
    input: QParams,
    channels: usize,
) -> Vec<i64> {
    match bias {
        // `as` saturates: an absurd bias becomes i64::MAX and fails the check above.
        Some(b) => p.consts[b]
            .data
            .iter()
            .zip(wscales)
            .map(|(v, s)| (*v as f64 / (input.scale as f64 * *s as f64)).round() as i64)
            .collect(),
        None => vec![0; channels],
    }
}
