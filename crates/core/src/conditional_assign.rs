//! Parameter updates that hold only where a flag is true: inside [`assign_if`], each
//! `Parameter::assign(v)` this thread runs (in eager code, or in the trace being
//! recorded) stores `select(flag, v, current)` instead of `v`, and later reads in the
//! same block see that value. A compiled cell called inside runs its own graph, which
//! the flag does not reach, and work sent to other threads does not see it: the block
//! is for code that assigns directly, as an optimizer's update does. A compiled training step uses it to apply or
//! drop its optimizer's update on a flag computed in the same graph (amp's overflow
//! check), without control flow.
//!
//! ```
//! use spore_core::{conditional_assign::assign_if, Parameter, Tensor};
//! let p = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap(), "p");
//! let double = || p.assign(&p.value().mul_scalar(2.0)?);
//! assign_if(&Tensor::scalar(false), double).unwrap();
//! assert_eq!(p.value().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
//! assign_if(&Tensor::scalar(true), double).unwrap();
//! assert_eq!(p.value().to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
//! ```
//!
//! Why select at each assignment rather than once at the end: an optimizer reads what it
//! just wrote (Momentum's weight step reads the new moment). Selected at the
//! assignment, that read is the selected moment, so the moment is computed and selected
//! in one loop and the weight step reads it; selected at the end, the unselected moment
//! would be a second value the compiled step writes out.

use std::cell::RefCell;

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use spore_kernels::DType;

thread_local! {
    /// The flags of the enclosing `assign_if` blocks, innermost last.
    static FLAGS: RefCell<Vec<Tensor>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with every parameter assignment inside it kept only where `flag` (a boolean
/// scalar) is true; elsewhere the parameter keeps its value. Blocks nest (all their
/// flags must hold).
pub fn assign_if<R>(flag: &Tensor, f: impl FnOnce() -> Result<R>) -> Result<R> {
    // Rank 0 exactly: a flag of shape [1] would broadcast a scalar parameter's value to
    // [1] in the select.
    if flag.dtype() != DType::Bool || flag.rank() != 0 {
        return Err(Error::invalid(format!(
            "assign_if: expected a boolean scalar flag, got {}",
            flag.tensor_type()
        )));
    }
    FLAGS.with(|f| f.borrow_mut().push(flag.clone()));
    // Popped however `f` ends, so that a failed block leaves no flag behind.
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            FLAGS.with(|f| f.borrow_mut().pop());
        }
    }
    let _pop = Pop;
    f()
}

/// The value an assignment of `value` over `current` stores under the enclosing
/// [`assign_if`] blocks: `value` itself outside any.
pub(crate) fn guarded(value: &Tensor, current: impl FnOnce() -> Tensor) -> Result<Tensor> {
    let flags = FLAGS.with(|f| f.borrow().clone());
    if flags.is_empty() {
        return Ok(value.clone());
    }
    let current = current();
    flags
        .iter()
        .try_fold(value.clone(), |v, flag| Tensor::select(flag, &v, &current))
}
