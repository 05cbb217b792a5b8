//! Collectives on whole buffers, as the communication thread runs them: first the ranks
//! agree on what they are doing (op, dtype, shape, root), so a mismatch is an error on
//! every rank naming both sides instead of a hang or garbage; then the data moves, timed
//! for the profiler's communication track.
//!
//! ```
//! use spore_parallel::{init, collective_sum_f64};
//! init().unwrap();
//! // One process: the sum over ranks is the value itself.
//! assert_eq!(collective_sum_f64(&[1.5, 2.0]).unwrap(), vec![1.5, 2.0]);
//! ```

use std::sync::Arc;
use std::time::Instant;

use spore_core::{DType, Error, Result};
use spore_kernels::Buffer;

use crate::backend::{Backend, ReduceOp};
use crate::engine::Pending;
use crate::management::{GroupInfo, engine, group};
use crate::recycle;

/// What a rank says it is about to do; every rank must say the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Signature {
    pub(crate) op: &'static str,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    /// The reduce op, root or split axes: whatever else must match.
    pub(crate) extra: i64,
}

const HEADER: usize = 12;

/// The collectives a signature can name; its first slot is the index here, so that a
/// mismatch can say which op each rank ran.
const OPS: &[&str] = &[
    "AllReduce",
    "AllGather",
    "ReduceScatter",
    "Broadcast",
    "AllToAll",
    "Barrier",
    "Send",
];

/// A gradient bucket's AllReduce carries its bucket number in the attribute slot, above
/// the reduce op: buckets of equal size issued in another order on another rank would
/// otherwise be summed into the wrong parameters without a word.
pub(crate) fn bucket_attribute(op: ReduceOp, bucket: usize) -> i64 {
    op.code() + 16 * (bucket as i64 + 1)
}

/// An op's attribute slot in words.
fn describe_attribute(op: i64, code: i64) -> String {
    match OPS.get((op - 1).max(0) as usize).copied().unwrap_or("") {
        "AllReduce" | "ReduceScatter" => {
            let reduce = ReduceOp::from_code(code % 16).map_or("?", |r| r.name());
            match code / 16 {
                0 => format!("reduce op {reduce}"),
                b => format!("reduce op {reduce}, gradient bucket {}", b - 1),
            }
        }
        "Broadcast" => format!("root {code}"),
        "AllToAll" => format!("split axis {}, concat axis {}", code / 64, code % 64),
        "Send" => format!("tag {code}"),
        _ => code.to_string(),
    }
}

fn op_name(slot: i64) -> &'static str {
    OPS.get((slot - 1).max(0) as usize)
        .copied()
        .unwrap_or("an unknown op")
}
const MAX_DIMS: usize = 8;

impl Signature {
    pub(crate) fn of(op: &'static str, dtype: DType, shape: &[usize], extra: i64) -> Signature {
        Signature {
            op,
            dtype,
            shape: shape.to_vec(),
            extra,
        }
    }

    fn encode(&self) -> [i64; HEADER] {
        let mut h = [0i64; HEADER];
        h[0] = OPS
            .iter()
            .position(|o| *o == self.op)
            .map_or(0, |i| i as i64 + 1);
        h[1] = DType::ALL
            .iter()
            .position(|d| *d == self.dtype)
            .unwrap_or(99) as i64;
        h[2] = self.shape.len() as i64;
        for (i, &d) in self.shape.iter().enumerate() {
            let slot = 3 + i.min(MAX_DIMS - 1);
            // Dimensions past the eighth fold into the last slot (still compared).
            h[slot] = if i < MAX_DIMS - 1 {
                d as i64
            } else {
                h[slot].wrapping_mul(1_000_003).wrapping_add(d as i64)
            };
        }
        h[11] = self.extra;
        h
    }

    fn describe(h: &[i64]) -> String {
        let dtype = usize::try_from(h[1])
            .ok()
            .and_then(|i| DType::ALL.get(i))
            .map_or("an unknown dtype".to_string(), |d| d.to_string());
        let ndim = h[2].clamp(0, 64) as usize;
        let shown: Vec<String> = (0..ndim.min(MAX_DIMS))
            .map(|i| h[3 + i].to_string())
            .collect();
        let more = if ndim > MAX_DIMS { ", ..." } else { "" };
        format!("{dtype}[{}{more}]", shown.join(", "))
    }
}

/// All ranks of `g` exchange signatures; an error (the same on every rank) names the
/// first rank that differs from rank 0.
fn agree(b: &mut dyn Backend, g: &GroupInfo, sig: &Signature) -> std::result::Result<(), String> {
    let mine = sig.encode();
    let mut all = Buffer::I64(vec![0; HEADER * g.size()]);
    b.all_gather(g.comm, &Buffer::I64(mine.to_vec()), &mut all)?;
    let Buffer::I64(all) = all else {
        return Err("internal: header exchange returned another dtype".into());
    };
    let first = &all[..HEADER];
    for (r, h) in all.chunks(HEADER).enumerate().skip(1) {
        if h == first {
            continue;
        }
        if h[0] != first[0] {
            return Err(format!(
                "the ranks are not running the same collective: rank 0 runs {}, rank {r} runs {} \
                 (they issued different sequences of collectives)",
                op_name(first[0]),
                op_name(h[0])
            ));
        }
        if h[1..11] != first[1..11] {
            return Err(format!(
                "the ranks' inputs differ: rank 0 has {}, rank {r} has {}; every rank must pass the same shape and dtype",
                Signature::describe(first),
                Signature::describe(h)
            ));
        }
        return Err(format!(
            "the ranks disagree on the op's attributes: rank 0 has {}, rank {r} has {}",
            describe_attribute(first[0], first[11]),
            describe_attribute(h[0], h[11])
        ));
    }
    Ok(())
}

/// Runs `data_op` on the communication thread after the ranks agreed on `sig`, timing
/// it for the profiler.
fn on_thread<R: Send + 'static>(
    b: &mut dyn Backend,
    g: &GroupInfo,
    sig: &Signature,
    bytes: usize,
    data_op: impl FnOnce(&mut dyn Backend) -> std::result::Result<R, String>,
) -> std::result::Result<R, String> {
    agree(b, g, sig)?;
    let start = Instant::now();
    let out = data_op(b)?;
    if let Some(p) = spore_core::debug::profiler::current() {
        let name = format!("{}[{}, {} bytes]", sig.op, g.name, bytes);
        p.record_communication(sig.op, &name, start, Instant::now());
    }
    Ok(out)
}

/// A collective in flight: its result, once the communication thread has run it.
pub(crate) struct InFlight {
    pending: Pending<std::result::Result<Buffer, String>>,
    what: String,
}

impl InFlight {
    pub(crate) fn wait(self) -> Result<Buffer> {
        let what = self.what;
        let e = engine()?;
        let label = what.clone();
        self.pending
            .wait(e, move || label)?
            .map_err(|m| Error::invalid(format!("{what}: {m}")))
    }
}

/// Submits `data_op` for group `g` without waiting.
fn submit(
    g: GroupInfo,
    sig: Signature,
    bytes: usize,
    data_op: impl FnOnce(&mut dyn Backend, &GroupInfo) -> std::result::Result<Buffer, String>
    + Send
    + 'static,
) -> Result<InFlight> {
    let what = g.describe(sig.op);
    let pending = engine()?.submit(move |b| on_thread(b, &g, &sig, bytes, |b| data_op(b, &g)))?;
    Ok(InFlight { pending, what })
}

fn bytes_of(data: &Buffer) -> usize {
    data.len() * data.dtype().size_in_bytes()
}

fn divide_by(data: &mut Buffer, n: usize) -> std::result::Result<(), String> {
    match data {
        Buffer::F32(v) => v.iter_mut().for_each(|x| *x /= n as f32),
        Buffer::F64(v) => v.iter_mut().for_each(|x| *x /= n as f64),
        other => {
            return Err(format!(
                "a mean needs floating-point data, got {}",
                other.dtype()
            ));
        }
    }
    Ok(())
}

/// Every rank's `send` reduced with `op`, started now; `shape` is only compared. The
/// result goes into a recycled buffer (see `recycle`); `send` is only read, so it can be
/// the caller's tensor's own memory.
pub(crate) fn all_reduce_start(
    g: &GroupInfo,
    send: Arc<Buffer>,
    shape: &[usize],
    op: ReduceOp,
    attribute: i64,
) -> Result<InFlight> {
    let sig = Signature::of("AllReduce", send.dtype(), shape, attribute);
    let bytes = bytes_of(&send);
    submit(g.clone(), sig, bytes, move |b, g| {
        reduced(&send, send.len(), op, g.size(), |s, r| {
            b.all_reduce(g.comm, s, r, op)
        })
    })
}

/// The reduction `run` writes (`len` values), divided by `ranks` for a mean. 16-bit
/// values are reduced and divided in float32 and rounded once at the end: their sum may
/// not fit 16 bits where the mean does.
fn reduced(
    send: &Buffer,
    len: usize,
    op: ReduceOp,
    ranks: usize,
    run: impl FnOnce(&Buffer, &mut Buffer) -> std::result::Result<(), String>,
) -> std::result::Result<Buffer, String> {
    let dtype = send.dtype();
    let half = dtype.is_half();
    let wide;
    let send = if half {
        wide = spore_kernels::half_float::widen(
            send,
            &spore_kernels::Layout::contiguous(&[send.len()]),
        );
        &wide
    } else {
        send
    };
    let mut recv = recycle::take(send.dtype(), len);
    run(send, &mut recv)?;
    if op == ReduceOp::Mean {
        divide_by(&mut recv, ranks)?;
    }
    Ok(match half {
        true => spore_kernels::half_float::narrow(&recv, dtype),
        false => recv,
    })
}

pub(crate) fn all_reduce(
    g: &GroupInfo,
    send: Arc<Buffer>,
    shape: &[usize],
    op: ReduceOp,
) -> Result<Buffer> {
    all_reduce_start(g, send, shape, op, op.code())?.wait()
}

/// Every rank's `data` concatenated in rank order.
pub(crate) fn all_gather(g: &GroupInfo, data: Buffer, shape: &[usize]) -> Result<Buffer> {
    let sig = Signature::of("AllGather", data.dtype(), shape, 0);
    let bytes = bytes_of(&data);
    submit(g.clone(), sig, bytes, move |b, g| {
        let mut out = Buffer::zeros(data.dtype(), data.len() * g.size());
        b.all_gather(g.comm, &data, &mut out)?;
        Ok(out)
    })?
    .wait()
}

/// Block `rank` of the reduction of every rank's `data` (group-size blocks).
pub(crate) fn reduce_scatter(
    g: &GroupInfo,
    data: Buffer,
    shape: &[usize],
    op: ReduceOp,
) -> Result<Buffer> {
    let sig = Signature::of("ReduceScatter", data.dtype(), shape, op.code());
    let bytes = bytes_of(&data);
    submit(g.clone(), sig, bytes, move |b, g| {
        let len = data.len() / g.size();
        reduced(&data, len, op, g.size(), |s, r| {
            b.reduce_scatter(g.comm, s, r, op)
        })
    })?
    .wait()
}

/// `root`'s `data` on every rank.
pub(crate) fn broadcast(
    g: &GroupInfo,
    mut data: Buffer,
    shape: &[usize],
    root: usize,
) -> Result<Buffer> {
    let sig = Signature::of("Broadcast", data.dtype(), shape, root as i64);
    let bytes = bytes_of(&data);
    submit(g.clone(), sig, bytes, move |b, g| {
        b.broadcast(g.comm, &mut data, root)?;
        Ok(data)
    })?
    .wait()
}

/// Block j of `data` to rank j; block i of the result from rank i.
pub(crate) fn all_to_all(
    g: &GroupInfo,
    data: Buffer,
    shape: &[usize],
    axes: i64,
) -> Result<Buffer> {
    let sig = Signature::of("AllToAll", data.dtype(), shape, axes);
    let bytes = bytes_of(&data);
    submit(g.clone(), sig, bytes, move |b, g| {
        let mut out = Buffer::zeros(data.dtype(), data.len());
        b.all_to_all(g.comm, &data, &mut out)?;
        Ok(out)
    })?
    .wait()
}

/// Waits until every rank of the group (`None`: the world) has arrived.
pub fn barrier(group_name: Option<&str>) -> Result<()> {
    let g = group(group_name)?;
    let sig = Signature::of("Barrier", DType::U8, &[], 0);
    submit(g, sig, 0, |b, g| {
        b.barrier(g.comm)?;
        Ok(Buffer::U8(vec![]))
    })?
    .wait()
    .map(|_| ())
}

/// `values` reduced with `op` over the world's ranks, element by element, on every rank.
fn world_f64s(values: &[f64], op: ReduceOp) -> Result<Vec<f64>> {
    group_f64s(&group(None)?, values, op)
}

/// `values` reduced element by element over the ranks of `g` (every member calls it).
pub(crate) fn group_f64s(g: &GroupInfo, values: &[f64], op: ReduceOp) -> Result<Vec<f64>> {
    let data = Arc::new(Buffer::F64(values.to_vec()));
    match all_reduce(g, data, &[values.len()], op)? {
        Buffer::F64(v) if v.len() == values.len() => Ok(v),
        other => Err(Error::invalid(format!(
            "internal: a {} of {} f64 came back as {} {}",
            op.name(),
            values.len(),
            other.len(),
            other.dtype()
        ))),
    }
}

/// Sums `values` over the world's ranks (metrics, counts): every rank gets the sums.
pub fn collective_sum_f64(values: &[f64]) -> Result<Vec<f64>> {
    world_f64s(values, ReduceOp::Sum)
}

/// The largest of every rank's `values`, element by element.
pub(crate) fn collective_max_f64s(values: &[f64]) -> Result<Vec<f64>> {
    world_f64s(values, ReduceOp::Max)
}

/// The largest of every rank's `value` (the slowest rank's time, for example).
pub fn collective_max_f64(value: f64) -> Result<f64> {
    Ok(world_f64s(&[value], ReduceOp::Max)?[0])
}

/// Sends `data` to `dest` (a rank of `g`), preceded by its signature, so that the
/// receiver can check it expected this.
pub(crate) fn send(
    g: &GroupInfo,
    data: Buffer,
    shape: &[usize],
    dest: usize,
    tag: i32,
) -> Result<()> {
    let what = format!("{} to rank {dest}", g.describe("Send"));
    // The signature, then the element count (a shape past eight dimensions is folded in
    // the signature, and the receiver must know how much to take off the wire).
    let mut header = Signature::of("Send", data.dtype(), shape, tag as i64)
        .encode()
        .to_vec();
    header.push(data.len() as i64);
    let comm = g.comm;
    let label = what.clone();
    engine()?
        .run(
            move || label,
            move |b| {
                b.send(comm, &Buffer::I64(header), dest, tag)?;
                b.send(comm, &data, dest, tag)
            },
        )?
        .map_err(|m| Error::invalid(format!("{what}: {m}")))
}

/// Receives from `src` (a rank of `g`) what it sent with `tag`, which must be `shape`
/// and `dtype`.
pub(crate) fn recv(
    g: &GroupInfo,
    shape: &[usize],
    dtype: DType,
    src: usize,
    tag: i32,
) -> Result<Buffer> {
    let what = format!("{} from rank {src}", g.describe("Receive"));
    let expected = Signature::of("Send", dtype, shape, tag as i64);
    let numel = shape.iter().product::<usize>();
    let comm = g.comm;
    let label = what.clone();
    engine()?
        .run(
            move || label,
            move |b| {
                let mut header = Buffer::I64(vec![0; HEADER + 1]);
                b.recv(comm, &mut header, src, tag)?;
                let Buffer::I64(h) = header else {
                    return Err("internal: header of another dtype".to_string());
                };
                let want = expected.encode();
                if h[1..11] != want[1..11] {
                    let mismatch = format!(
                        "expected {}, but rank {src} sent {}",
                        Signature::describe(&want),
                        Signature::describe(&h[..HEADER])
                    );
                    // The data message is still on its way: take it off the wire before
                    // reporting, so that later messages stay in step (when the header
                    // makes sense; a nonsensical one is reported as it is).
                    let sent_dtype = usize::try_from(h[1])
                        .ok()
                        .and_then(|i| DType::ALL.get(i).copied());
                    let sent_len = usize::try_from(h[HEADER]).ok().filter(|&n| n <= 1 << 31);
                    if let (Some(d), Some(n)) = (sent_dtype, sent_len) {
                        let mut sink = Buffer::zeros(d, n);
                        b.recv(comm, &mut sink, src, tag)?;
                    }
                    return Err(mismatch);
                }
                let mut data = Buffer::zeros(dtype, numel);
                b.recv(comm, &mut data, src, tag)?;
                Ok(data)
            },
        )?
        .map_err(|m| Error::invalid(format!("{what}: {m}")))
}
