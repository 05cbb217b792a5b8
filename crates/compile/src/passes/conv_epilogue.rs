//! Elementwise work that only finishes a convolution joins it: an elementwise loop that
//! reads a float32 `Conv2D` (its only reader) and computes
//!
//! ```text
//! y = conv * scale + shift    (scale, shift: one value per output channel; either alone)
//! y = y + residual            (shaped as the output)
//! y = relu(y)
//! ```
//!
//! (any of the three steps, in that order; the loop may be a lone `Add` or `Mul`)
//! becomes one `Conv2DEpilogue`, which applies
//! them in the convolution's tiles (see `spore_kernels::conv::epilogue`). That is an
//! inference BatchNorm, a convolution's bias, and ResNet's residual sum and ReLU: the
//! output is no longer written, read back and written again. A loop that sums two such
//! finished convolutions, `relu((c1 * s1 + t1) + (c2 * s2 + t2))` (ResNet's downsampling
//! blocks), becomes two: the cheaper convolution's, then the other's reading it as its
//! addend. The `conv_epilogue` stage of fusion, after `contract` (which makes the
//! `MulAdd`); skipped while a dump runs.
//!
//! ```
//! use spore_compile::{pass::Pass, passes::{Dce, FuseElementwise}};
//! use spore_core::prims::conv::Conv2dOptions;
//! use spore_core::{trace::trace, DType, TensorType};
//! let types = [
//!     TensorType::new(&[1, 2, 6, 6], DType::F32),
//!     TensorType::new(&[3, 2, 3, 3], DType::F32),
//!     TensorType::new(&[1, 3, 1, 1], DType::F32),
//!     TensorType::new(&[1, 3, 1, 1], DType::F32),
//! ];
//! let mut g = trace("bn", &types, |x| {
//!     let y = x[0].conv2d(&x[1], &Conv2dOptions::default())?;
//!     Ok(vec![y.mul(&x[2])?.add(&x[3])?.relu()?])
//! }).unwrap();
//! FuseElementwise.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap();
//! assert!(g.to_ir().contains("= Conv2DEpilogue("), "{}", g.to_ir());
//! ```
//!
//! Results keep their bits: the product by the scale is rounded before the shift is
//! added, as the `MulAdd` loop does, and the ReLU is the elementwise one.

use spore_core::ir::{Graph, Node, NodeKind};
use spore_core::op::{ConvEpilogueParts, Op};
use spore_core::prims::fused::{FusedInstr, FusedProgram};
use spore_core::{DType, TensorType};
use spore_kernels::{BinaryFn, UnaryFn};

/// Rewrites every match (the loop's node becomes the `Conv2DEpilogue`; a summed pair's
/// shortcut is inserted before it); the convolutions are left for DCE. Returns whether
/// anything changed.
pub(crate) fn fold_into_convolutions(g: &mut Graph) -> bool {
    let single = fold_single(g);
    let pairs = fold_pairs(g);
    single || pairs
}

/// The loops of the module's form.
fn fold_single(g: &mut Graph) -> bool {
    let uses = g.use_counts();
    let mut changed = false;
    for r in 0..g.nodes.len() {
        let Some((conv, parts, operands)) = finished_convolution(g, r) else {
            continue;
        };
        // `uses` counts graph outputs and updates too: the convolution's value must not
        // be needed anywhere but in this loop.
        if uses[conv] != 1 {
            continue;
        }
        let Some(kind) = epilogue_node(g, conv, parts, &operands) else {
            continue;
        };
        g.nodes[r].kind = kind;
        changed = true;
    }
    changed
}

/// The loops that sum two finished convolutions, `relu((c1 * s1 + t1) + (c2 * s2 + t2))`
/// (ResNet's downsampling blocks: the main branch and the shortcut's 1x1 convolution,
/// each with its BatchNorm), ReLU optional: the convolution with fewer multiply-adds
/// becomes a `Conv2DEpilogue` of its own, inserted before the loop, and the loop the
/// other's, with that one as its addend. (The sum's order does not change its bits.)
fn fold_pairs(g: &mut Graph) -> bool {
    let uses = g.use_counts();
    let pairs: Vec<(usize, SummedPair)> = (0..g.nodes.len())
        .filter_map(|r| summed_convolutions(g, r).map(|p| (r, p)))
        .filter(|(_, p)| p.branches.iter().all(|b| uses[b.conv] == 1))
        .collect();
    let mut changed = false;
    // From the last, so that each insertion leaves the matches before it in place.
    for &(r, ref pair) in pairs.iter().rev() {
        // Both convolutions have the loop's output type, so the one with the smaller
        // filter does fewer multiply-adds.
        let filter_len = |b: &Finished| g.nodes[g.nodes[b.conv].args()[1]].ty().numel();
        let [first, second] = &pair.branches;
        let (small, large) = if filter_len(first) <= filter_len(second) {
            (first, second)
        } else {
            (second, first)
        };
        // The shortcut goes to index r; the loop, moved to r + 1, reads it as its addend.
        let (Some(small_node), Some(large_node)) = (
            finished_node(g, small, None, false),
            finished_node(g, large, Some(r), pair.relu),
        ) else {
            continue;
        };
        // The shortcut takes its convolution's scope name: the convolution, read by
        // nothing now, goes in the next `dce` (the stages before it do not read names).
        let conv = &g.nodes[small.conv];
        let shortcut = Node {
            kind: small_node,
            types: vec![g.nodes[r].ty().clone()],
            name: conv.name.clone(),
            location: conv.location,
        };
        insert_before(g, r, shortcut);
        g.nodes[r + 1].kind = large_node;
        changed = true;
    }
    changed
}

/// One finished convolution of a summed pair: the `Conv2D` and its per-channel values.
struct Finished {
    conv: usize,
    scale: usize,
    shift: usize,
}

struct SummedPair {
    branches: [Finished; 2],
    relu: bool,
}

/// `Conv2DEpilogue` of `b` (scale and shift), with `addend` and ReLU where given.
fn finished_node(g: &Graph, b: &Finished, addend: Option<usize>, relu: bool) -> Option<NodeKind> {
    let parts = ConvEpilogueParts {
        scale: true,
        shift: true,
        addend: addend.is_some(),
        relu,
    };
    let operands: Vec<usize> = [b.scale, b.shift].into_iter().chain(addend).collect();
    epilogue_node(g, b.conv, parts, &operands)
}

/// `Conv2DEpilogue` of the `Conv2D` at `conv` with `parts`, reading `operands` (scale,
/// shift, addend: those `parts` has) after the convolution's own inputs.
fn epilogue_node(
    g: &Graph,
    conv: usize,
    parts: ConvEpilogueParts,
    operands: &[usize],
) -> Option<NodeKind> {
    let NodeKind::Op {
        op: Op::Conv2d(attrs),
        args,
    } = &g.nodes[conv].kind
    else {
        return None;
    };
    Some(NodeKind::Op {
        op: Op::Conv2dEpilogue {
            attrs: *attrs,
            parts,
        },
        args: args.iter().chain(operands).copied().collect(),
    })
}

/// For a fused loop `r` computing `(c1 * s1 + t1) + (c2 * s2 + t2)`, then perhaps ReLU,
/// with two float32 convolutions of its type and per-channel values: the pair.
fn summed_convolutions(g: &Graph, r: usize) -> Option<SummedPair> {
    let NodeKind::Op {
        op: Op::Fused(program),
        args,
    } = &g.nodes[r].kind
    else {
        return None;
    };
    let ty = g.nodes[r].ty();
    let f32_loop = program.compute == DType::F32 && program.out_dtype == DType::F32;
    if !f32_loop || ty.dtype != DType::F32 || ty.rank() != 4 {
        return None;
    }
    let n = program.num_inputs;
    let (sum, relu) = match program.instrs.as_slice() {
        [_, _, sum] => (sum, false),
        [_, _, sum, FusedInstr::Unary(UnaryFn::Relu, a)] if *a == n + 2 => (sum, true),
        _ => return None,
    };
    match *sum {
        FusedInstr::Binary(BinaryFn::Add, a, b) if (a.min(b), a.max(b)) == (n, n + 1) => {}
        _ => return None,
    }
    let input = |reg: usize| (reg < n).then(|| args[reg]);
    let branch = |instr: &FusedInstr| {
        let FusedInstr::MulAdd {
            a,
            b,
            c,
            subtract: false,
        } = *instr
        else {
            return None;
        };
        let is_conv =
            |v: usize| matches!(g.nodes[v].op(), Some(Op::Conv2d(_))) && g.nodes[v].ty() == ty;
        let per_channel = |v: usize| is_per_channel(g.nodes[v].ty(), ty);
        let (x, y, t) = (input(a)?, input(b)?, input(c)?);
        let (conv, scale) = match (is_conv(x), is_conv(y)) {
            (true, false) => (x, y),
            (false, true) => (y, x),
            _ => return None,
        };
        // Per-channel values that are not convolutions (a `[1, C, 1, 1]` output would
        // pass as one, and be computed twice).
        let values_ok = per_channel(scale) && per_channel(t) && !is_conv(t);
        values_ok.then_some(Finished {
            conv,
            scale,
            shift: t,
        })
    };
    let first = branch(&program.instrs[0])?;
    let second = branch(&program.instrs[1])?;
    (first.conv != second.conv).then_some(SummedPair {
        branches: [first, second],
        relu,
    })
}

/// Inserts `node` at index `at`, renumbering every later value (the node reads only
/// earlier ones).
fn insert_before(g: &mut Graph, at: usize, node: Node) {
    let shift = |v: &mut usize| {
        if *v >= at {
            *v += 1
        }
    };
    for n in &mut g.nodes[at..] {
        n.map_args(shift);
    }
    g.nodes.insert(at, node);
    g.inputs.iter_mut().for_each(shift);
    g.outputs.iter_mut().for_each(shift);
    g.updates.iter_mut().for_each(|(_, v)| shift(v));
}

/// For a fused loop `r` of the module's form: (the convolution, the parts, the values
/// of the parts' operands in the op's order: scale, shift, addend).
fn finished_convolution(g: &Graph, r: usize) -> Option<(usize, ConvEpilogueParts, Vec<usize>)> {
    let NodeKind::Op { op, args } = &g.nodes[r].kind else {
        return None;
    };
    let ty = g.nodes[r].ty();
    // A lone `Add` or `Mul` (fusion builds no loop of one op) reads as a loop of it.
    let lone;
    let program = match op {
        Op::Fused(program) if program.compute == DType::F32 && program.out_dtype == DType::F32 => {
            program
        }
        Op::Binary(f @ (BinaryFn::Add | BinaryFn::Mul)) => {
            lone = FusedProgram {
                num_inputs: 2,
                instrs: vec![FusedInstr::Binary(*f, 0, 1)],
                compute: ty.dtype,
                out_dtype: ty.dtype,
            };
            &lone
        }
        _ => return None,
    };
    if ty.dtype != DType::F32 || ty.rank() != 4 {
        return None;
    }
    let n = program.num_inputs;
    let input = |reg: usize| (reg < n).then(|| args[reg]);
    // The convolution: the register the first step reads that holds a float32 `Conv2D`
    // shaped as the result.
    let is_conv = |reg: usize| {
        input(reg)
            .filter(|&v| matches!(g.nodes[v].op(), Some(Op::Conv2d(_))) && g.nodes[v].ty() == ty)
    };
    let (conv_reg, conv) = program
        .instrs
        .first()?
        .operands()
        .into_iter()
        .find_map(|reg| is_conv(reg).map(|v| (reg, v)))?;
    // The operands, never the convolution itself (which would then be computed twice).
    let operand = |reg: usize| input(reg).filter(|&v| v != conv);
    let per_channel = |reg: usize| operand(reg).filter(|&v| is_per_channel(g.nodes[v].ty(), ty));
    let full = |reg: usize| operand(reg).filter(|&v| g.nodes[v].ty() == ty);
    // Step 1: `* scale + shift`, `* scale`, `+ shift` or none.
    let (scale, shift, taken) = affine_steps(&program.instrs, conv_reg, n, per_channel)?;
    let mut cur = if taken > 0 { n + taken - 1 } else { conv_reg };
    let mut steps = program.instrs.iter().enumerate().skip(taken).peekable();
    // Step 2: `+ residual`.
    let mut addend = None;
    if let Some(&(k, &FusedInstr::Binary(BinaryFn::Add, a, b))) = steps.peek() {
        addend = Some(other_operand(a, b, cur).and_then(full)?);
        cur = n + k;
        steps.next();
    }
    // Step 3: ReLU.
    let mut relu = false;
    if let Some(&(k, &FusedInstr::Unary(UnaryFn::Relu, a))) = steps.peek() {
        if a != cur {
            return None;
        }
        relu = true;
        cur = n + k;
        steps.next();
    }
    // Every step taken, and the last one's value is the loop's result.
    if steps.next().is_some() || cur != n + program.instrs.len() - 1 {
        return None;
    }
    let parts = ConvEpilogueParts {
        scale: scale.is_some(),
        shift: shift.is_some(),
        addend: addend.is_some(),
        relu,
    };
    let operands = [scale, shift, addend].into_iter().flatten().collect();
    Some((conv, parts, operands))
}

/// The per-channel steps at the start of `instrs`, which read the convolution from
/// register `conv` (`n` inputs): `* scale + shift` (one `MulAdd`), `* scale` (then perhaps
/// a separate `+ shift`, a loop `contract` left alone) or `+ shift`. Returns the scale's
/// and the shift's values (from `per_channel`) and how many steps they take; `None`
/// when a multiplication does not have the form (the loop then keeps its op).
fn affine_steps(
    instrs: &[FusedInstr],
    conv: usize,
    n: usize,
    per_channel: impl Fn(usize) -> Option<usize>,
) -> Option<(Option<usize>, Option<usize>, usize)> {
    let scaled = match instrs.first() {
        Some(&FusedInstr::MulAdd {
            a,
            b,
            c,
            subtract: false,
        }) => {
            let s = other_operand(a, b, conv).and_then(&per_channel)?;
            let t = (c != conv).then(|| per_channel(c)).flatten()?;
            return Some((Some(s), Some(t), 1));
        }
        Some(&FusedInstr::Binary(BinaryFn::Mul, a, b)) => {
            other_operand(a, b, conv).and_then(&per_channel)?
        }
        Some(&FusedInstr::Binary(BinaryFn::Add, a, b)) => {
            // Not per channel: perhaps the residual (the caller's next step).
            return Some(match other_operand(a, b, conv).and_then(&per_channel) {
                Some(t) => (None, Some(t), 1),
                None => (None, None, 0),
            });
        }
        _ => return Some((None, None, 0)),
    };
    if let Some(&FusedInstr::Binary(BinaryFn::Add, a, b)) = instrs.get(1)
        && let Some(t) = other_operand(a, b, n).and_then(&per_channel)
    {
        return Some((Some(scaled), Some(t), 2));
    }
    Some((Some(scaled), None, 1))
}

/// The other operand of a binary step that reads register `cur` once.
fn other_operand(a: usize, b: usize, cur: usize) -> Option<usize> {
    match (a == cur, b == cur) {
        (true, false) => Some(b),
        (false, true) => Some(a),
        _ => None,
    }
}

/// Whether a value of type `t` holds one float32 value per channel of the 4-d `out`
/// (`[1, C, 1, 1]` or `[C, 1, 1]`), so that broadcasting reads it by channel alone.
fn is_per_channel(t: &TensorType, out: &TensorType) -> bool {
    let channels = out.shape[1];
    t.dtype == DType::F32
        && match t.shape.as_slice() {
            [1, c, 1, 1] | [c, 1, 1] => *c == channels,
            _ => false,
        }
}

/// The `conv_epilogue` stage.
pub struct ConvEpilogue;

impl crate::pass::Pass for ConvEpilogue {
    fn name(&self) -> &'static str {
        "conv_epilogue"
    }

    fn run(&self, g: &mut Graph) -> spore_core::Result<bool> {
        Ok(fold_into_convolutions(g))
    }
}
