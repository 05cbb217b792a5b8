//! `MaxPool2d` and `AvgPool2d` over NCHW inputs (MindSpore's defaults: kernel 1,
//! stride 1, `valid`). With `same`, average pooling leaves the padding out of the divisor.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32).unwrap().reshape(&[1, 1, 4, 4]).unwrap();
//! let y = MaxPool2d::new(2, 2).unwrap().call1(&x).unwrap();
//! assert_eq!(y.to_vec::<f32>().unwrap(), vec![5.0, 7.0, 13.0, 15.0]);
//! let a = AvgPool2d::new(2, 2).unwrap().call1(&x).unwrap();
//! assert_eq!(a.to_vec::<f32>().unwrap(), vec![2.5, 4.5, 10.5, 12.5]);
//! ```

use std::sync::Arc;

use spore_core::ops::{PadMode, Pool2dOptions};
use spore_core::{Error, Result, Tensor};

use super::{label, positive, single};
use crate::cell::{Cell, CellBase};

fn check(class: &str, opts: &Pool2dOptions) -> Result<()> {
    positive(
        class,
        &[
            ("kernel height", opts.kernel[0]),
            ("kernel width", opts.kernel[1]),
            ("stride height", opts.stride[0]),
            ("stride width", opts.stride[1]),
        ],
    )
}

fn rank4(base: &CellBase, class: &str, x: &Tensor) -> Result<()> {
    if x.rank() != 4 {
        return Err(Error::invalid(format!(
            "{}: expected an NCHW (4-d) input, got shape {:?}",
            label(base, class),
            x.shape()
        )));
    }
    Ok(())
}

macro_rules! pool_layer {
    ($(#[$doc:meta])* $name:ident, $class:literal, $method:ident) => {
        $(#[$doc])*
        pub struct $name {
            base: CellBase,
            pub options: Pool2dOptions,
        }

        impl $name {
            /// Square kernel and stride, `valid` padding.
            pub fn new(kernel_size: usize, stride: usize) -> Result<Arc<$name>> {
                $name::with_options(Pool2dOptions::new(kernel_size, stride))
            }
            /// Square kernel and stride with a padding mode (`valid` or `same`).
            pub fn with_pad_mode(kernel_size: usize, stride: usize, mode: PadMode) -> Result<Arc<$name>> {
                $name::with_options(Pool2dOptions::new(kernel_size, stride).pad_mode(mode))
            }
            pub fn with_options(options: Pool2dOptions) -> Result<Arc<$name>> {
                check($class, &options)?;
                Ok(Arc::new($name { base: CellBase::new(), options }))
            }
        }

        impl Cell for $name {
            fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
                let x = single(&self.base, $class, inputs)?;
                rank4(&self.base, $class, x)?;
                Ok(vec![x.$method(&self.options)?])
            }
            fn base(&self) -> &CellBase {
                &self.base
            }
            fn class_name(&self) -> &'static str {
                $class
            }
        }
    };
}

pool_layer!(
    /// Max pooling; the gradient goes to the first maximum of each window.
    MaxPool2d,
    "MaxPool2d",
    max_pool2d
);
pool_layer!(
    /// Average pooling.
    AvgPool2d,
    "AvgPool2d",
    avg_pool2d
);
