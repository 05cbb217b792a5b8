//! Every collective and its gradient against references built from every rank's input
//! (each rank's input is a known function of its rank, so every rank can compute what
//! gathering all inputs would give), in PyNative mode and inside a compiled function.

use spore_compile::jit::jit;
use spore_core::{DType, Tensor, value_and_grad};
use spore_parallel::{ReduceOp, ops};

use crate::launch::{expect_success, world};

#[test]
fn collectives_and_gradients_match_references_on_2_ranks() {
    expect_success(2, "collectives::rank_collectives");
}

#[test]
fn collectives_and_gradients_match_references_on_4_ranks() {
    expect_success(4, "collectives::rank_collectives");
}

const ROWS: usize = 2;
const COLS: usize = 3;

/// Rank `r`'s input: `n * ROWS` rows of `COLS`, distinct across ranks and positions,
/// with some ties between ranks (for max and min).
fn input(r: usize, n: usize) -> Vec<f32> {
    (0..n * ROWS * COLS)
        .map(|i| (((i * 7 + r * 5) % 11) as f32) - 4.0 + (r as f32) * 0.25 * ((i % 2) as f32))
        .collect()
}

/// Rank `r`'s output weights (the gradient each rank feeds back).
fn weights(r: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| 1.0 + (r as f32) + 0.1 * (i as f32))
        .collect()
}

fn tensor(v: Vec<f32>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(v, shape).unwrap()
}

fn close(got: &Tensor, want: &[f32], what: &str) {
    let got = got.to_vec::<f32>().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
            "{what}[{i}]: got {a}, want {b}"
        );
    }
}

/// `d/dx sum(f(x) * w_r)` summed over ranks, as this rank sees it.
fn grad_of(f: impl Fn(&Tensor) -> spore_core::Result<Tensor>, x: &Tensor, w: &Tensor) -> Tensor {
    let loss = move |t: &[Tensor]| f(&t[0])?.mul(w)?.sum(&[], false);
    let out = value_and_grad(loss, Some(&[0]), &[], false)(std::slice::from_ref(x)).unwrap();
    out.input_grads[0].clone()
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_collectives() {
    let (r, n) = world();
    let len = n * ROWS * COLS;
    let shape = [n * ROWS, COLS];
    let all: Vec<Vec<f32>> = (0..n).map(|k| input(k, n)).collect();
    let x = tensor(all[r].clone(), &shape);
    let fold = |f: fn(f32, f32) -> f32| -> Vec<f32> {
        (0..len)
            .map(|i| all.iter().skip(1).fold(all[0][i], |a, v| f(a, v[i])))
            .collect()
    };
    let sum = fold(|a, b| a + b);
    let sum_w: Vec<f32> = (0..len)
        .map(|i| (0..n).map(|k| weights(k, len)[i]).sum())
        .collect();
    let w = tensor(weights(r, len), &shape);

    // AllReduce: sum, mean, max, min; the gradient is the AllReduce (sum) of the output
    // gradients, masked for max/min to the positions where this rank's value won.
    close(
        &ops::all_reduce(&x, ReduceOp::Sum, None).unwrap(),
        &sum,
        "AllReduce sum",
    );
    let mean: Vec<f32> = sum.iter().map(|s| s / n as f32).collect();
    close(
        &ops::all_reduce(&x, ReduceOp::Mean, None).unwrap(),
        &mean,
        "AllReduce mean",
    );
    // 16-bit values travel and are reduced as float32, then rounded once: a float16 sum
    // past 65504 still gives its mean.
    let big = tensor(vec![30000.0 + r as f32; 4], &[4])
        .cast(DType::F16)
        .unwrap();
    let mean_big = (0..n).map(|k| 30000.0 + k as f32).sum::<f32>() / n as f32;
    let got = ops::all_reduce(&big, ReduceOp::Mean, None).unwrap();
    let want = tensor(vec![mean_big; 4], &[4]).cast(DType::F16).unwrap();
    assert_eq!(
        got.to_f64_vec().unwrap(),
        want.to_f64_vec().unwrap(),
        "AllReduce mean of large float16"
    );
    for dtype in [DType::F16, DType::BF16] {
        let x16 = x.cast(dtype).unwrap();
        let want16 = |v: &[f32]| -> Vec<f32> {
            let t = tensor(v.to_vec(), &shape).cast(dtype).unwrap();
            t.cast(DType::F32).unwrap().to_vec::<f32>().unwrap()
        };
        let inputs16: Vec<Vec<f32>> = all.iter().map(|v| want16(v)).collect();
        let sum16: Vec<f32> = (0..len)
            .map(|i| inputs16.iter().map(|v| v[i]).sum())
            .collect();
        let mean16: Vec<f32> = sum16.iter().map(|s| s / n as f32).collect();
        for (op, want, what) in [
            (ReduceOp::Sum, &sum16, "sum"),
            (ReduceOp::Mean, &mean16, "mean"),
        ] {
            let got = ops::all_reduce(&x16, op, None).unwrap();
            assert_eq!(got.dtype(), dtype, "AllReduce {what} {dtype}");
            close(
                &got.cast(DType::F32).unwrap(),
                &want16(want),
                &format!("AllReduce {what} {dtype}"),
            );
        }
    }
    let max = fold(f32::max);
    let min = fold(f32::min);
    close(
        &ops::all_reduce(&x, ReduceOp::Max, None).unwrap(),
        &max,
        "AllReduce max",
    );
    close(
        &ops::all_reduce(&x, ReduceOp::Min, None).unwrap(),
        &min,
        "AllReduce min",
    );
    let g = grad_of(|t| ops::all_reduce(t, ReduceOp::Sum, None), &x, &w);
    close(&g, &sum_w, "AllReduce sum gradient");
    let g = grad_of(|t| ops::all_reduce(t, ReduceOp::Mean, None), &x, &w);
    close(
        &g,
        &sum_w.iter().map(|s| s / n as f32).collect::<Vec<_>>(),
        "AllReduce mean gradient",
    );
    let won: Vec<f32> = (0..len)
        .map(|i| if all[r][i] == max[i] { sum_w[i] } else { 0.0 })
        .collect();
    let g = grad_of(|t| ops::all_reduce(t, ReduceOp::Max, None), &x, &w);
    let g = g.to_vec::<f32>().unwrap();
    for i in 0..len {
        // With ties the gradient is shared among the winners; it is zero for losers.
        if all[r][i] != max[i] {
            assert_eq!(g[i], 0.0, "AllReduce max gradient at a losing position {i}");
        } else {
            assert!(
                g[i] > 0.0 && g[i] <= won[i] + 1e-5,
                "AllReduce max gradient {i}: {}",
                g[i]
            );
        }
    }

    check_gather_and_scatter(r, n, &all, &x);
    check_broadcast_and_all_to_all(r, n, &all, &x);
    check_send_recv(r, n, &x);
    check_graph_mode(r, n, &x, &sum);
    check_dump(r, &x);
    check_groups(r, n, &all);
    check_mismatch_is_an_error(r, n);
    check_other_mismatches(r, n, &x);
    spore_parallel::barrier(None).unwrap();
    crate::launch::passed(r);
}

fn check_gather_and_scatter(r: usize, n: usize, all: &[Vec<f32>], x: &Tensor) {
    let len = n * ROWS * COLS;
    // AllGather: every rank's input stacked along axis 0; gradient: ReduceScatter (sum).
    let gathered = ops::all_gather(x, None).unwrap();
    assert_eq!(gathered.shape(), &[n * n * ROWS, COLS]);
    close(&gathered, &all.concat(), "AllGather");
    let big = n * len;
    let w = tensor(weights(r, big), &[n * n * ROWS, COLS]);
    let want: Vec<f32> = (0..len)
        .map(|i| (0..n).map(|k| weights(k, big)[r * len + i]).sum())
        .collect();
    close(
        &grad_of(|t| ops::all_gather(t, None), x, &w),
        &want,
        "AllGather gradient",
    );

    // ReduceScatter: block r of the sum; gradient: AllGather of the output gradients.
    let block = ROWS * COLS;
    let scattered = ops::reduce_scatter(x, ReduceOp::Sum, None).unwrap();
    assert_eq!(scattered.shape(), &[ROWS, COLS]);
    let want: Vec<f32> = (0..block)
        .map(|i| all.iter().map(|v| v[r * block + i]).sum())
        .collect();
    close(&scattered, &want, "ReduceScatter");
    let w = tensor(weights(r, block), &[ROWS, COLS]);
    let want: Vec<f32> = (0..n).flat_map(|k| weights(k, block)).collect();
    close(
        &grad_of(|t| ops::reduce_scatter(t, ReduceOp::Sum, None), x, &w),
        &want,
        "ReduceScatter gradient",
    );
}

fn check_broadcast_and_all_to_all(r: usize, n: usize, all: &[Vec<f32>], x: &Tensor) {
    let len = n * ROWS * COLS;
    let root = n - 1;
    // Broadcast: the root's input everywhere; gradient: every rank's output gradient
    // summed on the root, zero elsewhere.
    close(
        &ops::broadcast(x, root, None).unwrap(),
        &all[root],
        "Broadcast",
    );
    let w = tensor(weights(r, len), &[n * ROWS, COLS]);
    let g = grad_of(|t| ops::broadcast(t, root, None), x, &w);
    let want: Vec<f32> = if r == root {
        (0..len)
            .map(|i| (0..n).map(|k| weights(k, len)[i]).sum())
            .collect()
    } else {
        vec![0.0; len]
    };
    close(&g, &want, "Broadcast gradient");

    // AllToAll (split axis 0, concat axis 1): block j of every rank to rank j, the
    // received blocks side by side in rank order.
    let out = ops::all_to_all(x, 0, 1, None).unwrap();
    assert_eq!(out.shape(), &[ROWS, n * COLS]);
    let want: Vec<f32> = (0..ROWS)
        .flat_map(|row| (0..n).flat_map(move |k| (0..COLS).map(move |c| (k, row, c))))
        .map(|(k, row, c)| all[k][(r * ROWS + row) * COLS + c])
        .collect();
    close(&out, &want, "AllToAll");
    // Its gradient is the AllToAll with the axes swapped: feeding back the output itself
    // must give back this rank's input.
    let back = ops::all_to_all(&out, 1, 0, None).unwrap();
    close(&back, &all[r], "AllToAll then its inverse");
    let wt = tensor(weights(r, len), &[ROWS, n * COLS]);
    let g = grad_of(|t| ops::all_to_all(t, 0, 1, None), x, &wt);
    let inverse = ops::all_to_all(&wt, 1, 0, None).unwrap();
    close(&g, &inverse.to_vec::<f32>().unwrap(), "AllToAll gradient");
}

/// A ring: every rank sends its input to the next and receives the previous one's.
/// Even ranks send first, odd ranks receive first, so no send waits on a send.
fn check_send_recv(r: usize, n: usize, x: &Tensor) {
    let next = (r + 1) % n;
    let prev = (r + n - 1) % n;
    let received = if r.is_multiple_of(2) {
        let sent = ops::send(x, next, 7, None).unwrap();
        ops::recv(&sent, x.shape(), DType::F32, prev, 7, None).unwrap()
    } else {
        let got = ops::recv(x, x.shape(), DType::F32, prev, 7, None).unwrap();
        ops::send(x, next, 7, None).unwrap();
        got
    };
    close(&received, &input(prev, n), "Receive");
}

/// The same collectives inside a compiled function: same results, and the graph shows them.
fn check_graph_mode(r: usize, n: usize, x: &Tensor, sum: &[f32]) {
    let f = jit("collectives", |t: &[Tensor]| {
        let s = ops::all_reduce(&t[0], ReduceOp::Sum, None)?;
        let g = ops::all_gather(&s, None)?;
        Ok(vec![s, g])
    });
    let out = f.call(std::slice::from_ref(x)).unwrap();
    close(&out[0], sum, "AllReduce in Graph mode");
    let stacked: Vec<f32> = (0..n).flat_map(|_| sum.iter().copied()).collect();
    close(&out[1], &stacked, "AllGather in Graph mode");
    let graph = f.graph_for(&[x.tensor_type().clone()]).unwrap();
    let text = graph.to_ir();
    assert!(
        text.contains("AllReduce") && text.contains("AllGather"),
        "rank {r}: {text}"
    );
}

/// The Dump tool writes a collective's inputs and outputs like any op's, under this
/// rank's `rank_{id}` folder, named by its scope.
fn check_dump(r: usize, x: &Tensor) {
    use spore_core::debug::dump::{self, config::DumpConfig};
    let dir = std::env::temp_dir().join(format!("spore-dump-collective-{}", std::process::id()));
    let json = format!(
        r#"{{"common_dump_settings": {{"dump_mode": 0, "path": "{}", "net_name": "Net", "iteration": "all",
           "input_output": 0, "kernels": [], "support_device": [0]}}, "e2e_dump_settings": {{"enable": true, "trans_flag": true}}}}"#,
        dir.display()
    );
    dump::enable(DumpConfig::parse(&json).unwrap()).unwrap();
    let f = jit("dumped", |t: &[Tensor]| {
        spore_core::trace::with_scope("sync", || {
            Ok(vec![ops::all_reduce(&t[0], ReduceOp::Sum, None)?])
        })
    });
    let out = f.call(std::slice::from_ref(x));
    dump::disable().unwrap();
    out.unwrap();
    let mut names = vec![];
    let mut stack = vec![dir.join(format!("rank_{r}"))];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                names.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    std::fs::remove_dir_all(dir.join(format!("rank_{r}"))).ok();
    // The last rank to finish removes the (then empty) folder.
    std::fs::remove_dir(&dir).ok();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("AllReduce.") && n.contains("sync") && n.ends_with(".npy")),
        "rank {r}: no AllReduce dump among {names:?}"
    );
}

/// Ranks running different ops, buckets out of order, and a receive of the wrong
/// shape: errors naming both sides, after which the ranks are still in step.
fn check_other_mismatches(r: usize, n: usize, x: &Tensor) {
    let e = if r == 0 {
        ops::all_gather(x, None).unwrap_err()
    } else {
        ops::all_reduce(x, ReduceOp::Sum, None).unwrap_err()
    };
    let e = e.to_string();
    assert!(
        e.contains("rank 0 runs AllGather") && e.contains("runs AllReduce"),
        "rank {r}: {e}"
    );

    // Gradient buckets of equal size started in another order on rank 1.
    use spore_parallel::ops::bucket::start;
    let (first, second) = if r == 1 { (1, 0) } else { (0, 1) };
    let e = start(&[x], first, ReduceOp::Sum, None)
        .and_then(|t| spore_parallel::ops::bucket::wait(&t, x.numel(), DType::F32));
    let e = e.unwrap_err().to_string();
    assert!(
        e.contains("gradient bucket 0") && e.contains("gradient bucket 1"),
        "rank {r}: {e}"
    );
    let e = start(&[x], second, ReduceOp::Sum, None)
        .and_then(|t| spore_parallel::ops::bucket::wait(&t, x.numel(), DType::F32));
    assert!(
        e.is_err(),
        "rank {r}: the second bucket is out of order too"
    );

    // Rank 0 sends a shape rank 1 does not expect; the next message still arrives.
    if r < 2 {
        if r == 0 {
            ops::send(x, 1, 9, None).unwrap();
            ops::send(x, 1, 9, None).unwrap();
        } else {
            let e = ops::recv(x, &[1, 1], DType::F32, 0, 9, None)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("expected [1, 1] Float32") || e.contains("Float32[1, 1]"),
                "{e}"
            );
            let got = ops::recv(x, x.shape(), DType::F32, 0, 9, None).unwrap();
            close(&got, &input(0, n), "Receive after a mismatch");
        }
    }
    spore_parallel::barrier(None).unwrap();
}

/// A group of the first two ranks (in reverse order) reduces only their inputs.
fn check_groups(r: usize, n: usize, all: &[Vec<f32>]) {
    if r >= 2 {
        return;
    }
    spore_parallel::create_group("pair", &[1, 0]).unwrap();
    assert_eq!(spore_parallel::get_rank(Some("pair")).unwrap(), 1 - r);
    assert_eq!(spore_parallel::get_group_size(Some("pair")).unwrap(), 2);
    assert_eq!(
        spore_parallel::get_world_rank_from_group_rank("pair", 0).unwrap(),
        1
    );
    let x = tensor(all[r].clone(), &[n * ROWS, COLS]);
    let s = ops::all_reduce(&x, ReduceOp::Sum, Some("pair")).unwrap();
    let want: Vec<f32> = all[0].iter().zip(&all[1]).map(|(a, b)| a + b).collect();
    close(&s, &want, "AllReduce on a group");
    spore_parallel::destroy_group("pair").unwrap();
}

/// Ranks passing different shapes get an error naming both, the op, the group and rank.
fn check_mismatch_is_an_error(r: usize, _n: usize) {
    let x = Tensor::ones(&[r + 1, 2], DType::F32).unwrap();
    let e = ops::all_reduce(&x, ReduceOp::Sum, None)
        .unwrap_err()
        .to_string();
    for part in [
        "AllReduce",
        "world_group",
        &format!("rank {r} of"),
        "Float32[1, 2]",
        "Float32[2, 2]",
    ] {
        assert!(e.contains(part), "rank {r}: expected {part:?} in: {e}");
    }
}
