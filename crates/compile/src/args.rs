//! An op's arguments borrowed from the executor's value slots, without a vector for the
//! usual handful.
//!
//! ```text
//! let out = with_args(&slots, &[3, 7], |refs| apply_in_graph(op, refs, loc, &mut ctx));
//! ```

use spore_core::Tensor;

/// Runs `f` on the arguments `args`, borrowed from their slots: up to eight without
/// allocating a vector (almost every op), more through one.
pub(crate) fn with_args<R>(
    slots: &[Vec<Tensor>],
    args: &[usize],
    f: impl FnOnce(&[&Tensor]) -> R,
) -> R {
    const INLINE: usize = 8;
    let Some(&first) = args.first() else {
        return f(&[]);
    };
    if args.len() > INLINE {
        let refs: Vec<&Tensor> = args.iter().map(|&a| &slots[a][0]).collect();
        return f(&refs);
    }
    let mut buf = [&slots[first][0]; INLINE];
    for (b, &a) in buf.iter_mut().zip(args) {
        *b = &slots[a][0];
    }
    f(&buf[..args.len()])
}
