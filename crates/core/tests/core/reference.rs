//! Naive f64 reference implementations: plain loops over an `Nd` array, written for
//! clarity, never speed, and sharing no code with the kernels.

#[derive(Clone, Debug, PartialEq)]
pub struct Nd {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(strides(shape)).map(|(i, s)| i * s).sum()
}

impl Nd {
    pub fn new(shape: &[usize], data: Vec<f64>) -> Nd {
        assert_eq!(shape.iter().product::<usize>(), data.len());
        Nd {
            shape: shape.to_vec(),
            data,
        }
    }
    pub fn zeros(shape: &[usize]) -> Nd {
        Nd::new(shape, vec![0.0; shape.iter().product()])
    }
    pub fn at(&self, idx: &[usize]) -> f64 {
        self.data[ravel(idx, &self.shape)]
    }
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Nd {
        Nd::new(&self.shape, self.data.iter().map(|&x| f(x)).collect())
    }
    pub fn numel(&self) -> usize {
        self.data.len()
    }
}

pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            da.max(db)
        })
        .collect()
}

/// Reads `x` at an index of the broadcast shape `out`.
pub fn at_broadcast(x: &Nd, idx: &[usize]) -> f64 {
    let off = idx.len() - x.shape.len();
    let own: Vec<usize> = (0..x.shape.len())
        .map(|i| if x.shape[i] == 1 { 0 } else { idx[i + off] })
        .collect();
    x.at(&own)
}

pub fn zip(a: &Nd, b: &Nd, f: impl Fn(f64, f64) -> f64) -> Nd {
    let shape = broadcast_shape(&a.shape, &b.shape);
    let n = shape.iter().product();
    let data = (0..n)
        .map(|i| {
            let idx = unravel(i, &shape);
            f(at_broadcast(a, &idx), at_broadcast(b, &idx))
        })
        .collect();
    Nd::new(&shape, data)
}

pub fn zip3(c: &Nd, a: &Nd, b: &Nd, f: impl Fn(f64, f64, f64) -> f64) -> Nd {
    let shape = broadcast_shape(&broadcast_shape(&c.shape, &a.shape), &b.shape);
    let n = shape.iter().product();
    let data = (0..n)
        .map(|i| {
            let idx = unravel(i, &shape);
            f(
                at_broadcast(c, &idx),
                at_broadcast(a, &idx),
                at_broadcast(b, &idx),
            )
        })
        .collect();
    Nd::new(&shape, data)
}

/// Reduces `axes` with `f` over the collected values of each output cell.
pub fn reduce(x: &Nd, axes: &[usize], keep: bool, f: impl Fn(&[f64]) -> f64) -> Nd {
    let kept: Vec<usize> = (0..x.shape.len())
        .map(|i| if axes.contains(&i) { 1 } else { x.shape[i] })
        .collect();
    let mut groups: Vec<Vec<f64>> = vec![vec![]; kept.iter().product()];
    for i in 0..x.numel() {
        let mut idx = unravel(i, &x.shape);
        for &a in axes {
            idx[a] = 0;
        }
        groups[ravel(&idx, &kept)].push(x.data[i]);
    }
    let shape: Vec<usize> = if keep {
        kept
    } else {
        (0..x.shape.len())
            .filter(|i| !axes.contains(i))
            .map(|i| x.shape[i])
            .collect()
    };
    Nd::new(&shape, groups.iter().map(|g| f(g)).collect())
}

pub fn permute(x: &Nd, perm: &[usize]) -> Nd {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let data = (0..x.numel())
        .map(|i| {
            let o = unravel(i, &shape);
            let mut src = vec![0; perm.len()];
            for (k, &p) in perm.iter().enumerate() {
                src[p] = o[k];
            }
            x.at(&src)
        })
        .collect();
    Nd::new(&shape, data)
}

pub fn matmul(a: &Nd, b: &Nd) -> Nd {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    let batch = broadcast_shape(&a.shape[..ra - 2], &b.shape[..rb - 2]);
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let nb: usize = batch.iter().product();
    let mut data = vec![0.0; nb * m * n];
    for bi in 0..nb {
        let bidx = unravel(bi, &batch);
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for p in 0..k {
                    let mut ia = bidx.clone();
                    ia.extend([i, p]);
                    let mut ib = bidx.clone();
                    ib.extend([p, j]);
                    s += at_broadcast(a, &ia) * at_broadcast(b, &ib);
                }
                data[(bi * m + i) * n + j] = s;
            }
        }
    }
    Nd::new(&shape, data)
}

/// Conv geometry for the references: stride, dilation, pads (t, b, l, r), groups.
#[derive(Clone, Copy)]
pub struct ConvSpec {
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub pads: [usize; 4],
    pub groups: usize,
}

/// Output spatial size of a convolution.
pub fn conv_out(h: usize, w: usize, kh: usize, kw: usize, s: &ConvSpec) -> (usize, usize) {
    let eh = s.dilation[0] * (kh - 1) + 1;
    let ew = s.dilation[1] * (kw - 1) + 1;
    (
        (h + s.pads[0] + s.pads[1] - eh) / s.stride[0] + 1,
        (w + s.pads[2] + s.pads[3] - ew) / s.stride[1] + 1,
    )
}

/// Calls `visit(x_index, w_index, y_index)` for every product term of the convolution of
/// an input of `xs` with a weight of `ws`.
pub fn conv_terms(
    xs: &[usize],
    ws: &[usize],
    s: &ConvSpec,
    mut visit: impl FnMut(usize, usize, usize),
) {
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (o, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let (oh, ow) = conv_out(h, w, kh, kw, s);
    let og = o / s.groups;
    for b in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for oy in 0..oh {
                for ox in 0..ow {
                    for ic in 0..cg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let iy = (oy * s.stride[0] + i * s.dilation[0]) as isize
                                    - s.pads[0] as isize;
                                let ix = (ox * s.stride[1] + j * s.dilation[1]) as isize
                                    - s.pads[2] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let xi =
                                    ((b * c + g * cg + ic) * h + iy as usize) * w + ix as usize;
                                let wi = ((oc * cg + ic) * kh + i) * kw + j;
                                let yi = ((b * o + oc) * oh + oy) * ow + ox;
                                visit(xi, wi, yi);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Calls `visit(plane, output_index_in_plane, window_input_indices)` for each pooling window.
pub fn pool_windows(
    xs: &[usize],
    k: [usize; 2],
    st: [usize; 2],
    pads: [usize; 4],
    mut visit: impl FnMut(usize, usize, Vec<usize>),
) -> (usize, usize) {
    let (h, w) = (xs[2], xs[3]);
    let oh = (h + pads[0] + pads[1] - k[0]) / st[0] + 1;
    let ow = (w + pads[2] + pads[3] - k[1]) / st[1] + 1;
    for p in 0..xs[0] * xs[1] {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut cells = vec![];
                for i in 0..k[0] {
                    for j in 0..k[1] {
                        let y = (oy * st[0] + i) as isize - pads[0] as isize;
                        let x = (ox * st[1] + j) as isize - pads[2] as isize;
                        if y >= 0 && x >= 0 && y < h as isize && x < w as isize {
                            cells.push(p * h * w + y as usize * w + x as usize);
                        }
                    }
                }
                visit(p, oy * ow + ox, cells);
            }
        }
    }
    (oh, ow)
}
