//! Explainers against analytic answers and direct f64 implementations of their formulas.

mod analytic;
mod metrics;
mod modes;
