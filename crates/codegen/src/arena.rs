//! The workspace plan: every intermediate buffer gets a fixed offset in one arena,
//! computed now from liveness, so the generated code allocates nothing. Liveness is the
//! compiler's rule ([`spore_compile::plan::MemoryPlan`] releases a value after its last
//! reader); placement is greedy by size: the largest buffers first, each at the lowest
//! offset free for its whole lifetime (the strategy TensorFlow Lite Micro's planner uses).
//!
//! ```
//! use spore_codegen::arena::{Interval, place};
//! // a lives over steps 0-1, b over 1-2, c over 2-3: c reuses a's bytes.
//! let plan = place(&[Interval { start: 0, end: 1, bytes: 64 },
//!                    Interval { start: 1, end: 2, bytes: 32 },
//!                    Interval { start: 2, end: 3, bytes: 64 }]);
//! assert_eq!(plan.size, 96);
//! assert_eq!(plan.lower_bound, 96);
//! assert_eq!(plan.offsets[0], plan.offsets[2]);
//! ```

use crate::program::{Program, Storage};

/// Offsets are multiples of this many bytes: a buffer starts on a 16-byte boundary of the
/// workspace (the API requires the workspace itself to be 4-byte aligned, as floats are).
pub const ALIGN: usize = 16;

/// A buffer's lifetime in steps (both ends included) and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub start: usize,
    pub end: usize,
    pub bytes: usize,
}

/// Where each buffer lives in the arena.
#[derive(Clone, Debug, Default)]
pub struct ArenaPlan {
    /// Byte offset of each interval.
    pub offsets: Vec<usize>,
    /// Bytes the arena needs.
    pub size: usize,
    /// The largest total of (aligned) buffers alive at once: no placement does better.
    pub lower_bound: usize,
}

fn aligned(bytes: usize) -> usize {
    bytes.div_ceil(ALIGN) * ALIGN
}

/// Places the intervals.
pub fn place(intervals: &[Interval]) -> ArenaPlan {
    let steps = intervals.iter().map(|i| i.end + 1).max().unwrap_or(0);
    let mut live = vec![0usize; steps];
    for iv in intervals {
        for l in &mut live[iv.start..=iv.end] {
            *l += aligned(iv.bytes);
        }
    }
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(aligned(intervals[i].bytes)), i));
    let mut offsets = vec![0usize; intervals.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut size = 0;
    for i in order {
        let me = intervals[i];
        let bytes = aligned(me.bytes);
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&j| intervals[j].start <= me.end && me.start <= intervals[j].end)
            .map(|&j| (offsets[j], offsets[j] + aligned(intervals[j].bytes)))
            .collect();
        busy.sort_unstable();
        let mut at = 0;
        for (lo, hi) in busy {
            if at + bytes <= lo {
                break;
            }
            at = at.max(hi);
        }
        offsets[i] = at;
        size = size.max(at + bytes);
        placed.push(i);
    }
    ArenaPlan {
        offsets,
        size,
        lower_bound: live.into_iter().max().unwrap_or(0),
    }
}

/// The arena of a float32 program: the offset of each workspace buffer (`None` for the
/// caller's inputs and outputs) and the plan.
pub fn plan_program(p: &Program) -> (Vec<Option<usize>>, ArenaPlan) {
    let buffers: Vec<Option<usize>> = p
        .values
        .iter()
        .map(|v| (v.storage == Storage::Arena).then_some(v.numel * 4))
        .collect();
    let steps: Vec<(Vec<usize>, usize)> = p.steps.iter().map(|s| (s.reads(), s.writes())).collect();
    plan_buffers(&buffers, &steps)
}

/// Plans buffers given as their size in bytes (`None`: not in the workspace) for steps
/// given as (buffers read, buffer written), in execution order.
pub fn plan_buffers(
    buffers: &[Option<usize>],
    steps: &[(Vec<usize>, usize)],
) -> (Vec<Option<usize>>, ArenaPlan) {
    let mut start = vec![None; buffers.len()];
    let mut end = vec![0usize; buffers.len()];
    for (s, (reads, y)) in steps.iter().enumerate() {
        start[*y].get_or_insert(s);
        end[*y] = end[*y].max(s);
        for &x in reads {
            end[x] = end[x].max(s);
        }
    }
    let mut ids = vec![];
    let mut intervals = vec![];
    for (v, bytes) in buffers.iter().enumerate() {
        let (Some(bytes), Some(s)) = (bytes, start[v]) else {
            continue;
        };
        ids.push(v);
        intervals.push(Interval {
            start: s,
            end: end[v].max(s),
            bytes: *bytes,
        });
    }
    let plan = place(&intervals);
    let mut offsets = vec![None; buffers.len()];
    for (k, &v) in ids.iter().enumerate() {
        offsets[v] = Some(plan.offsets[k]);
    }
    (offsets, plan)
}
