//! Spore's error type: every failure a user can cause says what was expected, what was
//! found, and where (operator, input types, the user's source line).
//!
//! ```
//! use spore_core::Tensor;
//! let a = Tensor::zeros(&[2, 3], spore_core::DType::F32).unwrap();
//! let b = Tensor::zeros(&[4, 5], spore_core::DType::F32).unwrap();
//! let err = a.matmul(&b).unwrap_err().to_string();
//! assert!(err.contains("MatMul") && err.contains("[2, 3]") && err.contains("[4, 5]"));
//! ```

use std::fmt;
use std::panic::Location;

use crate::types::TensorType;

/// Where in the user's code an operation was requested (`#[track_caller]`).
pub type SourceLocation = &'static Location<'static>;

#[derive(Debug, Clone)]
pub enum Error {
    /// An operator rejected its inputs (shape, dtype, attribute).
    Op {
        op: String,
        message: String,
        inputs: Vec<TensorType>,
        location: Option<SourceLocation>,
    },
    /// An invalid argument or value outside any operator (creation, autodiff, config).
    Invalid {
        message: String,
        location: Option<SourceLocation>,
    },
    /// A file could not be read or written.
    Io { path: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::Invalid {
            message: message.into(),
            location: None,
        }
    }

    #[track_caller]
    pub fn invalid_here(message: impl Into<String>) -> Error {
        Error::Invalid {
            message: message.into(),
            location: Some(Location::caller()),
        }
    }

    pub fn io(path: impl AsRef<std::path::Path>, message: impl fmt::Display) -> Error {
        Error::Io {
            path: path.as_ref().display().to_string(),
            message: message.to_string(),
        }
    }

    /// The source location attached to the error, if any.
    pub fn location(&self) -> Option<SourceLocation> {
        match self {
            Error::Op { location, .. } | Error::Invalid { location, .. } => *location,
            Error::Io { .. } => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Op {
                op,
                message,
                inputs,
                location,
            } => {
                write!(f, "{op}: {message}")?;
                if !inputs.is_empty() {
                    let list: Vec<String> = inputs.iter().map(|t| t.to_string()).collect();
                    write!(f, " (inputs: {})", list.join(", "))?;
                }
                if let Some(l) = location {
                    write!(f, ", at {}:{}:{}", l.file(), l.line(), l.column())?;
                }
                Ok(())
            }
            Error::Invalid { message, location } => {
                write!(f, "{message}")?;
                if let Some(l) = location {
                    write!(f, ", at {}:{}:{}", l.file(), l.line(), l.column())?;
                }
                Ok(())
            }
            Error::Io { path, message } => write!(f, "{path}: {message}"),
        }
    }
}

impl std::error::Error for Error {}
