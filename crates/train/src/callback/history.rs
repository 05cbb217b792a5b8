//! `History`: records the loss and metrics of every epoch, writes them as CSV and draws
//! them as a PNG curve (loss in blue, accuracy-like metrics in orange, each scaled to the
//! plot height; grid lines mark every epoch).
//!
//! ```
//! use spore_train::callback::{Callback, History, RunContext};
//! let mut h = History::new();
//! let mut ctx = RunContext::new(2, 1, false);
//! for (e, loss) in [(1, 0.9), (2, 0.4)] {
//!     ctx.cur_epoch_num = e;
//!     ctx.loss = Some(loss);
//!     h.on_epoch_end(&mut ctx).unwrap();
//! }
//! assert_eq!(h.to_csv(), "epoch,loss\n1,0.9\n2,0.4\n");
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use image::{Rgb, RgbImage};

use super::{Callback, RunContext};
use spore_core::{Error, Result};

#[derive(Default, Clone)]
pub struct History {
    /// (epoch, loss, metrics) per finished epoch.
    pub epochs: Vec<(usize, f64, BTreeMap<String, f64>)>,
}

impl History {
    pub fn new() -> Self {
        Self::default()
    }

    fn metric_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .epochs
            .iter()
            .flat_map(|(_, _, m)| m.keys().cloned())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    pub fn to_csv(&self) -> String {
        let names = self.metric_names();
        let mut out = String::from("epoch,loss");
        for n in &names {
            out.push(',');
            out.push_str(n);
        }
        out.push('\n');
        for (e, loss, m) in &self.epochs {
            out.push_str(&format!("{e},{loss}"));
            for n in &names {
                out.push(',');
                if let Some(v) = m.get(n) {
                    out.push_str(&v.to_string());
                }
            }
            out.push('\n');
        }
        out
    }

    pub fn write_csv(&self, path: impl AsRef<Path>) -> Result<()> {
        let p = path.as_ref();
        std::fs::write(p, self.to_csv())
            .map_err(|e| Error::io(p, format!("cannot write the history: {e}")))
    }

    /// Draws the curves into a `width x height` PNG.
    pub fn plot_png(&self, path: impl AsRef<Path>, width: u32, height: u32) -> Result<()> {
        let p = path.as_ref();
        if self.epochs.is_empty() {
            return Err(Error::invalid("History::plot_png: no epochs recorded yet"));
        }
        let (w, h) = (width.max(64), height.max(48));
        let mut img = RgbImage::from_pixel(w, h, Rgb([255, 255, 255]));
        let (left, right, top, bottom) = (32u32, w - 12, 12u32, h - 24);
        let n = self.epochs.len();
        let x_of = |i: usize| {
            left as f64
                + (right - left) as f64
                    * if n > 1 {
                        i as f64 / (n - 1) as f64
                    } else {
                        0.5
                    }
        };
        // Axes and one vertical grid line per epoch.
        for x in left..=right {
            img.put_pixel(x, bottom, Rgb([0, 0, 0]));
        }
        for y in top..=bottom {
            img.put_pixel(left, y, Rgb([0, 0, 0]));
        }
        for i in 0..n {
            let x = x_of(i).round() as u32;
            for y in (top..bottom).step_by(3) {
                img.put_pixel(x, y, Rgb([200, 200, 200]));
            }
        }
        let mut series: Vec<(Vec<f64>, Rgb<u8>)> = vec![(
            self.epochs.iter().map(|e| e.1).collect(),
            Rgb([31, 119, 180]),
        )];
        for name in self.metric_names().iter().filter(|n| n.contains("acc")) {
            series.push((
                self.epochs
                    .iter()
                    .map(|e| e.2.get(name).copied().unwrap_or(f64::NAN))
                    .collect(),
                Rgb([255, 127, 14]),
            ));
        }
        for (values, colour) in series {
            let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
            let (lo, hi) = finite
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                    (a.min(v), b.max(v))
                });
            let span = if hi > lo { hi - lo } else { 1.0 };
            let y_of = |v: f64| bottom as f64 - (bottom - top) as f64 * (v - lo) / span;
            let points: Vec<(f64, f64)> = values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, &v)| (x_of(i), y_of(v)))
                .collect();
            for pair in points.windows(2) {
                draw_line(&mut img, pair[0], pair[1], colour);
            }
            for &(x, y) in &points {
                for dx in -2i32..=2 {
                    for dy in -2i32..=2 {
                        let (px, py) = (x as i32 + dx, y as i32 + dy);
                        if px >= 0 && py >= 0 && (px as u32) < w && (py as u32) < h {
                            img.put_pixel(px as u32, py as u32, colour);
                        }
                    }
                }
            }
        }
        img.save(p)
            .map_err(|e| Error::io(p, format!("cannot write the plot: {e}")))
    }
}

fn draw_line(img: &mut RgbImage, a: (f64, f64), b: (f64, f64), colour: Rgb<u8>) {
    let steps = ((b.0 - a.0).abs().max((b.1 - a.1).abs()).ceil() as usize).max(1);
    for s in 0..=steps {
        let t = s as f64 / steps as f64;
        let (x, y) = (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
        if x >= 0.0 && y >= 0.0 && (x as u32) < img.width() && (y as u32) < img.height() {
            img.put_pixel(x as u32, y as u32, colour);
        }
    }
}

impl Callback for History {
    fn on_epoch_end(&mut self, ctx: &mut RunContext) -> Result<()> {
        self.epochs.push((
            ctx.cur_epoch_num,
            ctx.loss.unwrap_or(f64::NAN),
            ctx.metrics.clone(),
        ));
        Ok(())
    }
}
