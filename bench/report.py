#!/usr/bin/env python3
"""Merge the results of one bench/run_all.sh run and rewrite the generated section of BENCHMARKS.md
(the text between <!-- generated:start --> and <!-- generated:end -->; everything else is kept).

Inputs, all in --dir (target/bench/ by default):
  spore.jsonl         Spore's harness (`cargo run --release -p spore --example bench -- --json ...`)
  peers_py.json       Python peers (bench/peers/py/driver.py): {"results": [...]}
  peers_rust.jsonl    Rust peers (bench/peers/rust): one JSON object per line
  pipeline_torch.txt, pipeline_mindspore.txt   output of bench/peers/pipeline_*.py
  status.tsv          one line per run_all.sh step: name, ok|skipped|failed, reason
  host_speed.tsv      the host's two-thread FMA peak before each phase: phase, GFLOP/s, UTC time

  python3 bench/report.py [--dir target/bench] [--benchmarks BENCHMARKS.md] [--stdout] ...

Standard library only (Python 3.10+).
"""
import argparse
import datetime
import json
import os
import re
import sys

from report_host import ROOT, host_speed_lines, lock_versions, machine, py_versions, run

START = "<!-- generated:start -->"
END = "<!-- generated:end -->"
NOISY = 0.08  # foreign CPU share above which a number is flagged

STEP_BENCHES = [
    ("lenet5_train_b32", "LeNet5 train step, batch 32"),
    ("mlp_train_b64", "MLP 784-512-512-10 train step, batch 64"),
    ("mlp_infer_b64", "MLP 784-512-512-10 inference, batch 64"),
    ("resnet18_train_b32", "ResNet-18 (CIFAR-10 form) train step, batch 32"),
]
ALL_BENCHES = [b for b, _ in STEP_BENCHES] + ["gemm_2048", "fma_peak", "pipeline_mnist"]
SHORT = {"lenet5_train_b32": "LeNet5 train", "mlp_train_b64": "MLP train", "mlp_infer_b64": "MLP infer",
         "resnet18_train_b32": "ResNet-18 train"}
MODE_NAME = {"pynative": "PyNative", "graph": "Graph"}

# (lib, mode, label, status step)
SPORE_ROWS = [("spore", "pynative", "Spore PyNative", "spore"), ("spore", "graph", "Spore Graph", "spore")]
PEER_ROWS = [
    ("torch", "eager", "PyTorch eager", "python-peers"),
    ("torch", "compile", "PyTorch torch.compile", "python-peers"),
    ("mindspore", "pynative", "MindSpore PyNative", "python-peers"),
    ("mindspore", "graph", "MindSpore Graph", "python-peers"),
    ("mindspore", "pynative_jit", "MindSpore PyNative + @ms.jit", "python-peers"),
    ("jax", "jit", "JAX jit", "python-peers"),
    ("candle", "-", "Candle", "rust-candle"),
    ("burn-flex", "-", "Burn (flex backend)", "rust-burn-flex"),
]
GEMM_ROWS = [
    ("spore", "-", "Spore", "spore"),
    ("numpy", "-", "NumPy (OpenBLAS)", "python-peers"),
    ("torch", "-", "PyTorch", "python-peers"),
    ("jax", "-", "JAX", "python-peers"),
    ("mindspore", "-", "MindSpore", "python-peers"),
    ("candle", "-", "Candle", "rust-candle"),
    ("burn-flex", "-", "Burn (flex backend)", "rust-burn-flex"),
]
PY_MODEL = {"lenet_train": "lenet5_train_b32", "mlp_train": "mlp_train_b64", "mlp_infer": "mlp_infer_b64",
            "resnet18_train": "resnet18_train_b32", "gemm2048": "gemm_2048"}
RUST_BENCH = {"lenet5_train_b32": "lenet5_train_b32", "mlp_train_b64": "mlp_train_b64",
              "mlp_infer_b64": "mlp_infer_b64", "resnet18_train_b32": "resnet18_train_b32",
              "matmul_2048_f32": "gemm_2048",
              # error lines written by run_all.sh use the BENCHES names
              "lenet": "lenet5_train_b32", "mlp_train": "mlp_train_b64", "mlp_infer": "mlp_infer_b64",
              "resnet18": "resnet18_train_b32", "matmul": "gemm_2048"}
PIPELINE_PEERS = [("torch", "PyTorch DataLoader", [0, 1, 2]), ("mindspore", "MindSpore dataset", [1, 2])]


# ------------------------------------------------------------------ loading
def load_jsonl(path, problems):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                problems.append(f"{os.path.basename(path)} line {i}: not JSON ({e.msg})")
    return out


def num(r, key):
    v = r.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def norm(r, lib, bench, mode, source):
    """One measurement in a common form."""
    foreign = num(r, "foreign_cpu_frac")
    if foreign is None and num(r, "foreign_cpu_pct") is not None:
        foreign = num(r, "foreign_cpu_pct") / 100.0
    peak = num(r, "peak_rss_mb")
    if peak is None:
        peak = num(r, "peak_mem_mb")
    if peak is not None and peak <= 0:
        peak = None
    return {"lib": lib, "bench": bench, "mode": mode, "source": source, "error": r.get("error"),
            "median_ms": num(r, "median_ms"), "first_ms": num(r, "first_ms"), "gflops": num(r, "gflops"),
            "gflop_per_step": num(r, "gflop_per_step"),
            "samples_per_s": num(r, "samples_per_s"), "peak_mb": peak, "foreign": foreign,
            "alloc": num(r, "steady_alloc_bytes"), "version": r.get("version"), "raw": r}


def load_all(d, problems):
    recs = {}

    def put(n):
        recs[(n["lib"], n["bench"], n["mode"])] = n

    for r in load_jsonl(os.path.join(d, "spore.jsonl"), problems):
        bench = r.get("bench")
        if bench not in ALL_BENCHES:
            problems.append(f"spore.jsonl: unknown bench {bench!r}")
            continue
        mode = r.get("mode", "n/a")
        mode = "-" if mode in ("n/a", None, "") or bench in ("gemm_2048", "fma_peak", "pipeline_mnist") else mode
        if bench == "pipeline_mnist" and "workers" in r:
            mode = f"workers={r['workers']}"
        put(norm(r, "spore", bench, mode, "spore"))

    py_path = os.path.join(d, "peers_py.json")
    if os.path.exists(py_path):
        try:
            py = json.load(open(py_path)).get("results", [])
        except (json.JSONDecodeError, AttributeError) as e:
            problems.append(f"peers_py.json: unreadable ({e})")
            py = []
        for r in py:
            bench = PY_MODEL.get(r.get("model"))
            if bench is None:
                problems.append(f"peers_py.json: unknown model {r.get('model')!r}")
                continue
            mode = "-" if bench == "gemm_2048" else r.get("mode")
            put(norm(r, r.get("framework"), bench, mode, "python-peers"))

    for r in load_jsonl(os.path.join(d, "peers_rust.jsonl"), problems):
        bench = RUST_BENCH.get(r.get("bench"))
        if bench is None:
            problems.append(f"peers_rust.jsonl: unknown bench {r.get('bench')!r}")
            continue
        lib = r.get("lib")
        put(norm(r, lib, bench, "-", "rust-" + str(lib)))

    for lib, _, _ in PIPELINE_PEERS:
        path = os.path.join(d, f"pipeline_{lib}.txt")
        if not os.path.exists(path):
            continue
        text = open(path).read()
        version = None
        m = re.match(r"(?:torch|MindSpore) (\S+)", text)
        if m:
            version = m.group(1)
        for m in re.finditer(r"^workers=(\d+)[^:\n]*:\s*([\d.]+) samples/s", text, re.M):
            put(norm({"samples_per_s": float(m.group(2)), "version": version}, lib, "pipeline_mnist",
                     f"workers={m.group(1)}", f"pipeline-{lib}"))
    return recs


def load_status(d):
    st = {}
    path = os.path.join(d, "status.tsv")
    if os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2 and parts[0]:
                st[parts[0]] = (parts[1], parts[2] if len(parts) > 2 else "")
    return st


# ------------------------------------------------------------------ formatting
def md(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def short(s, n=110):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[:n - 1] + "…"


def fmt_ms(v):
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def fmt_first(v):
    if v is None:
        return "—"
    if v >= 10000:
        return f"{v / 1000:.1f} s"
    return f"{v / 1000:.2f} s" if v >= 1000 else f"{fmt_ms(v)} ms"


def fmt_ratio(x):
    if x is None:
        return "—"
    if x >= 99.5:
        return f"{x:.0f}×"
    if x >= 9.995:
        return f"{x:.1f}×"
    return f"{x:.2f}×"


def fmt_mb(v):
    return "—" if v is None else (f"{v:.0f}" if v >= 10 else f"{v:.1f}")


def fmt_bytes(v):
    if v is None:
        return "—"
    for unit, div in (("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if v >= div:
            return f"{v / div:.1f} {unit}"
    return f"{v:.0f} B"


def ok(r):
    return r is not None and not r["error"]


class Ctx:
    def __init__(self, recs, status, selected):
        self.recs, self.status, self.selected = recs, status, selected

    def get(self, lib, bench, mode):
        return self.recs.get((lib, bench, mode))

    def missing(self, step, bench=None):
        """Text for a row without a number."""
        if bench is not None and bench not in self.selected:
            return "not run (not selected by --only)"
        keys = [step] + (["python"] if step.startswith(("python", "pipeline")) else [])
        for k in keys:
            if k in self.status:
                state, reason = self.status[k]
                if state == "skipped":
                    return f"not run ({reason})" if reason else "not run"
                if state == "failed":
                    return f"failed: {short(reason)}"
        if step in self.status and self.status[step][0] == "ok":
            return "no result (the step ran but reported none)"
        return "not run"

    def cell_error(self, r):
        return f"failed: {short(r['error'])}"


def flag(r):
    return " ⚠" if r is not None and r.get("foreign") is not None and r["foreign"] > NOISY else ""


# ------------------------------------------------------------------ sections
def step_table(ctx, bench, label, notes):
    L = [f"### {label}", ""]
    pyn, graph = ctx.get("spore", bench, "pynative"), ctx.get("spore", bench, "graph")
    spore_ok = [r for r in (pyn, graph) if ok(r) and r["median_ms"]]
    best = min(spore_ok, key=lambda r: r["median_ms"]) if spore_ok else None
    gref = graph if ok(graph) and graph["median_ms"] else None
    best_name = MODE_NAME.get(best["mode"]) if best else None
    L.append(f"| framework / mode | median ms | first step | peak MB | alloc/step | "
             f"÷ Spore best{f' ({best_name})' if best_name else ''} | ÷ Spore Graph |")
    L.append("|---|--:|--:|--:|--:|--:|--:|")
    for lib, mode, name, step in SPORE_ROWS + PEER_ROWS:
        r = ctx.get(lib, bench, mode)
        name_md = f"**{name}**" if lib == "spore" else name
        if r is None:
            L.append(f"| {name_md} | {md(ctx.missing(step, bench))} | | | | | |")
            continue
        if r["error"]:
            L.append(f"| {name_md} | {md(ctx.cell_error(r))} | | | | | |")
            continue
        ms = r["median_ms"]
        rb = ms / best["median_ms"] if best and ms else None
        rg = ms / gref["median_ms"] if gref and ms else None
        alloc = fmt_bytes(r["alloc"]) if lib == "spore" else "—"
        L.append(f"| {name_md} | {fmt_ms(ms)}{flag(r)} | {fmt_first(r['first_ms'])} | {fmt_mb(r['peak_mb'])} | "
                 f"{alloc} | {fmt_ratio(rb)} | {fmt_ratio(rg)} |")
        if r.get("foreign") is not None and r["foreign"] > NOISY:
            notes.append(f"{name}, {bench}: other processes used {r['foreign']:.0%} of the CPU while timing")
    L.append("")
    return L


def gemm_table(ctx, notes):
    bench = "gemm_2048"
    L = ["### fp32 GEMM 2048×2048×2048", ""]
    sp = ctx.get("spore", bench, "-")
    sg = sp["gflops"] if ok(sp) and sp["gflops"] else None
    L.append("| library | median ms | GFLOP/s | Spore as % of it |")
    L.append("|---|--:|--:|--:|")
    for lib, mode, name, step in GEMM_ROWS:
        r = ctx.get(lib, bench, mode)
        name_md = f"**{name}**" if lib == "spore" else name
        if r is None:
            L.append(f"| {name_md} | {md(ctx.missing(step, bench))} | | |")
        elif r["error"]:
            L.append(f"| {name_md} | {md(ctx.cell_error(r))} | | |")
        else:
            g = r["gflops"]
            pct = f"{100 * sg / g:.0f} %" if sg and g else "—"
            if lib == "spore":
                pct = "100 %" if sg else "—"
            L.append(f"| {name_md} | {fmt_ms(r['median_ms'])} | {g:.0f}{flag(r)} | {pct} |" if g is not None
                     else f"| {name_md} | {fmt_ms(r['median_ms'])} | — | — |")
            if r.get("foreign") is not None and r["foreign"] > NOISY:
                notes.append(f"{name}, GEMM: other processes used {r['foreign']:.0%} of the CPU while timing")
    L.append("")
    return L


def ceiling_table(ctx):
    """Each workload's useful FLOP rate (its products' and convolutions' FLOP, counted on
    Spore's compiled graph, over the step's time) as a share of the FMA peak of this run."""
    peak = ctx.get("spore", "fma_peak", "-")
    L = ["### Compute ceiling", ""]
    if not ok(peak) or not peak["gflops"]:
        reason = ctx.cell_error(peak) if peak is not None else ctx.missing("spore", "fma_peak")
        L += [f"FMA peak not measured: {md(reason)}", ""]
        return L
    P = peak["gflops"]
    L += [f"FMA peak of this machine: **{P:.0f} GFLOP/s** (`fma_peak`: every thread runs only independent "
          "8-lane multiply-adds in registers; no GEMM or convolution can exceed it). *GFLOP/step* counts "
          "the products and convolutions of Spore's compiled step (`Graph::flops`); elementwise work is "
          "not counted, so a rate is useful FLOP over the whole step's time. *At peak*: the step's "
          "products alone at the FMA peak, a floor for any framework that computes them as direct "
          "products. Spore's 3x3 stride-1 convolutions run as Winograd F(4x4, 3x3) "
          "(`crates/kernels/src/winograd/`), 4x fewer multiply-adds than the FLOP counted here, "
          "so its ResNet-18 step can go below that floor (above 100 % of peak).", "",
          "| workload | GFLOP/step | at peak | goal | goal as % of peak | Spore best | % of peak | "
          "PyTorch eager | % of peak |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    goals = {"lenet5_train_b32": 1.0, "mlp_train_b64": 1.3, "mlp_infer_b64": 0.5, "resnet18_train_b32": 600}
    for bench, _ in STEP_BENCHES:
        g = ctx.get("spore", bench, "graph")
        flop = g["gflop_per_step"] if ok(g) and g.get("gflop_per_step") else None
        if flop is None:
            L.append(f"| {SHORT[bench]} | — | | | | | | | |")
            continue
        floor = flop / P * 1e3
        spore = [r["median_ms"] for r in (ctx.get("spore", bench, m) for m in ("pynative", "graph"))
                 if ok(r) and r["median_ms"]]
        best_ms = min(spore) if spore else None
        t = ctx.get("torch", bench, "eager")
        t_ms = t["median_ms"] if ok(t) and t["median_ms"] else None
        goal = goals[bench]
        pct = lambda ms: f"{100 * floor / ms:.0f} %" if ms else "—"
        ms = lambda v: f"{fmt_ms(v)} ms" if v else "—"
        L.append(f"| {SHORT[bench]} | {flop:.3g} | {ms(floor)} | {ms(goal)} | {pct(goal)} | "
                 f"{ms(best_ms)} | {pct(best_ms)} | {ms(t_ms)} | {pct(t_ms)} |")
    gemm = ctx.get("spore", "gemm_2048", "-")
    if ok(gemm) and gemm["gflops"]:
        L += ["", f"Spore's GEMM 2048³ reaches {gemm['gflops']:.0f} GFLOP/s, {100 * gemm['gflops'] / P:.0f} % of the peak."]
    L.append("")
    return L


def pipeline_table(ctx):
    bench = "pipeline_mnist"
    L = ["### Data pipeline (seed 001 MNIST transforms, batches of 32)", ""]
    spore = sorted([r for (lib, b, _), r in ctx.recs.items() if lib == "spore" and b == bench],
                   key=lambda r: r["mode"])
    sref = max((r["samples_per_s"] for r in spore if ok(r) and r["samples_per_s"]), default=None)
    L.append("| pipeline | samples/s | Spore ÷ it |")
    L.append("|---|--:|--:|")
    if not spore:
        L.append(f"| **Spore** | {md(ctx.missing('spore', bench))} | |")
    for r in spore:
        name = "**Spore**" + (f" ({r['mode']})" if r["mode"] != "-" else "")
        if r["error"]:
            L.append(f"| {name} | {md(ctx.cell_error(r))} | |")
        else:
            v = r["samples_per_s"]
            L.append(f"| {name} | {v:,.0f} | {'1.00×' if v == sref else fmt_ratio(sref / v if v else None)} |"
                     if v else f"| {name} | — | — |")
    for lib, label, workers in PIPELINE_PEERS:
        rows = [ctx.get(lib, bench, f"workers={w}") for w in workers]
        if not any(rows):
            L.append(f"| {label} | {md(ctx.missing('pipeline-' + lib, bench))} | |")
            continue
        for w, r in zip(workers, rows):
            name = f"{label}, {'main process' if w == 0 else f'{w} worker process' + ('es' if w > 1 else '')}"
            if r is None:
                L.append(f"| {name} | no result | |")
            else:
                v = r["samples_per_s"]
                L.append(f"| {name} | {v:,.0f} | {fmt_ratio(sref / v if sref and v else None)} |")
    L.append("")
    L.append("Spore's figure is its best configuration when the harness reports several; "
             "\"Spore ÷ it\" > 1 means Spore delivers more samples per second.")
    L.append("")
    return L


def targets_table(ctx):
    rows = []

    def med(lib, bench, mode):
        r = ctx.get(lib, bench, mode)
        return r["median_ms"] if ok(r) else None

    def best(bench):
        c = [(r["median_ms"], m) for m in ("pynative", "graph")
             for r in [ctx.get("spore", bench, m)] if ok(r) and r["median_ms"]]
        return min(c) if c else (None, None)

    def nm(bench, why=None):
        return "not measured" + (f" ({why})" if why else "")

    def why(lib, bench, mode, step):
        """Why a needed number is missing: the failure or the reason it was not run."""
        r = ctx.get(lib, bench, mode)
        if r is not None and r["error"]:
            return ctx.cell_error(r)
        return ctx.missing(step, bench)

    def spore_why(bench, modes=("graph",)):
        reasons = [why("spore", bench, m, "spore") for m in modes]
        if len(set(reasons)) == 1:
            return f"Spore {'/'.join(MODE_NAME[m] for m in modes)}: {reasons[0]}"
        return "; ".join(f"Spore {MODE_NAME[m]}: {r}" for m, r in zip(modes, reasons))

    def le(name, v, goal, unit, where="", missing=""):
        if v is None:
            rows.append((name, f"≤ {goal} {unit}", "—", nm(None, missing or None)))
            return
        meas = f"{fmt_ms(v)} {unit}{where}"
        if v <= goal:
            rows.append((name, f"≤ {goal} {unit}", meas, "met"))
        else:
            rows.append((name, f"≤ {goal} {unit}", meas,
                         f"missed by {fmt_ms(v - goal)} {unit} ({v / goal:.1f}× the goal)"))

    le("LeNet5 train step, Graph", med("spore", "lenet5_train_b32", "graph"), 1.0, "ms",
       missing=spore_why("lenet5_train_b32"))

    p, t = med("spore", "lenet5_train_b32", "pynative"), med("torch", "lenet5_train_b32", "eager")
    if p is None or t is None:
        miss = ([spore_why("lenet5_train_b32", ("pynative",))] if p is None else []) + \
               ([f"PyTorch eager: {why('torch', 'lenet5_train_b32', 'eager', 'python-peers')}"] if t is None else [])
        rows.append(("LeNet5 train step, PyNative vs PyTorch eager", "< PyTorch eager",
                     f"{fmt_ms(p)} vs {fmt_ms(t)} ms", nm(None, "; ".join(miss))))
    else:
        rows.append(("LeNet5 train step, PyNative vs PyTorch eager", "< PyTorch eager",
                     f"{fmt_ms(p)} vs {fmt_ms(t)} ms",
                     "met" if p < t else f"missed by {fmt_ms(p - t)} ms ({p / t - 1:.0%} slower)"))

    for bench, name, goal in (("mlp_train_b64", "MLP train step (best mode)", 1.3),
                              ("mlp_infer_b64", "MLP inference (best mode)", 0.5),
                              ("resnet18_train_b32", "ResNet-18 train step (best mode)", 600)):
        v, m = best(bench)
        le(name, v, goal, "ms", f" ({MODE_NAME[m]})" if m else "",
           missing=spore_why(bench, ("pynative", "graph")))

    sp, tp = ctx.get("spore", "gemm_2048", "-"), ctx.get("torch", "gemm_2048", "-")
    if ok(sp) and ok(tp) and sp["gflops"] and tp["gflops"]:
        pct = 100 * sp["gflops"] / tp["gflops"]
        rows.append(("fp32 GEMM 2048³ vs PyTorch", "≥ 90 %",
                     f"{sp['gflops']:.0f} vs {tp['gflops']:.0f} GFLOP/s = {pct:.0f} %",
                     "met" if pct >= 90 else f"missed by {90 - pct:.0f} points"))
    else:
        miss = ([f"Spore: {why('spore', 'gemm_2048', '-', 'spore')}"] if not ok(sp) else []) + \
               ([f"PyTorch: {why('torch', 'gemm_2048', '-', 'python-peers')}"] if not ok(tp) else [])
        rows.append(("fp32 GEMM 2048³ vs PyTorch", "≥ 90 %", "—", nm(None, "; ".join(miss) or None)))

    g = ctx.get("spore", "lenet5_train_b32", "graph")
    le("LeNet5 compile (Graph first step)", g["first_ms"] if ok(g) else None, 50, "ms",
       missing=spore_why("lenet5_train_b32"))

    graphs = [(b, r) for (lib, b, m), r in sorted(ctx.recs.items()) if lib == "spore" and m == "graph" and ok(r)]
    known = [(b, r["alloc"]) for b, r in graphs if r["alloc"] is not None]
    if not known:
        rows.append(("Steady-state allocation, Graph mode", "0 B per step", "—", nm(None)))
    else:
        bad = [(b, a) for b, a in known if a > 0]
        meas = ("0 B in " + ", ".join(SHORT.get(b, b) for b, _ in known)) if not bad else \
            "; ".join(f"{SHORT.get(b, b)} {fmt_bytes(a)}" for b, a in bad)
        rows.append(("Steady-state allocation, Graph mode", "0 B per step", meas,
                     "met" if not bad else f"missed: {len(bad)} of {len(known)} workloads allocate "
                                           f"(up to {fmt_bytes(max(a for _, a in bad))} per step)"))

    pairs = []
    for bench, _ in STEP_BENCHES:
        t = ctx.get("torch", bench, "eager")
        s = [ctx.get("spore", bench, m) for m in ("pynative", "graph")]
        s = [r["peak_mb"] for r in s if ok(r) and r["peak_mb"]]
        if ok(t) and t["peak_mb"] and s:
            pairs.append((bench, max(s), t["peak_mb"]))
    if not pairs:
        rows.append(("Peak memory (larger Spore mode) vs PyTorch eager", "≤ PyTorch", "—", nm(None, "needs both")))
    else:
        over = [(b, s, t) for b, s, t in pairs if s > t]
        meas = "; ".join(f"{SHORT[b]} {fmt_mb(s)} vs {fmt_mb(t)} MB" for b, s, t in pairs)
        rows.append(("Peak memory (larger Spore mode) vs PyTorch eager", "≤ PyTorch", meas,
                     "met" if not over else "missed: " + ", ".join(
                         f"{SHORT[b]} +{fmt_mb(s - t)} MB" for b, s, t in over)))

    L = ["### Targets (issue #8)", "", "| target | goal | measured | status |", "|---|---|---|---|"]
    for name, goal, meas, status in rows:
        st = f"**{status}**" if status == "met" else status
        L.append(f"| {name} | {goal} | {md(meas)} | {md(st)} |")
    L.append("")
    return L


# ------------------------------------------------------------------ environment
def header(args, recs):
    model, cpus, mem, isa = machine()
    commit = run(["git", "rev-parse", "--short=12", "HEAD"])
    commit = f"`{commit}`" if commit else "(commit unknown)"
    # BENCHMARKS.md itself does not count: this script rewrites it.
    changed = [
        name
        for name in (run(["git", "diff", "--name-only", "HEAD"]) or "").splitlines()
        if name.strip() and name.strip() != "BENCHMARKS.md"
    ]
    if changed:
        commit += " with uncommitted changes to " + ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "")
    rustc = run(["rustc", "--version"]) or "rustc not found"
    pv = py_versions(args.venv_python)
    # the version a result reports beats the venv's metadata
    for (lib, bench, _), r in recs.items():
        if ok(r) and r["version"] and lib in ("torch", "jax", "mindspore") and bench != "pipeline_mnist":
            pv[lib] = r["version"]
    lv = lock_versions(os.path.join(ROOT, "bench", "peers", "rust", "Cargo.lock"), {"candle-core", "burn"})
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    vers = [f"Spore {commit}", rustc]
    for key, name in (("torch", "PyTorch"), ("jax", "JAX"), ("jaxlib", "jaxlib"), ("mindspore", "MindSpore"),
                      ("numpy", "NumPy")):
        if key in pv:
            vers.append(f"{name} {pv[key]}")
    vers += [f"Candle {lv.get('candle-core', '?')}", f"Burn {lv.get('burn', '?')}"]
    L = []
    if args.quick:
        L += ["> **Quick smoke run** (`--quick`: few, short repeats). These numbers check that the "
              "script works; do not quote them.", ""]
    wall = f" (wall time {args.wall_s / 60:.0f} min)" if args.wall_s is not None else ""
    L.append(f"Generated {now} by `{args.command}`{wall}.")
    L.append("")
    L.append(f"- Machine: {model}, {cpus} logical CPUs, "
             f"{f'{mem:.1f} GiB' if mem else '? GiB'} RAM; ISA: {', '.join(isa) or 'n/a'}"
             f"{'' if 'avx512f' in isa else ' (no AVX-512)'}.")
    L.append(f"- Threads: {args.threads} for every framework (OMP/MKL/OpenBLAS/Rayon); "
             f"noise control: {args.priority}.")
    L.append(f"- Versions: {', '.join(vers)}.")
    L += host_speed_lines(args.dir)
    not_sel = [b for b in ALL_BENCHES if b not in args.selected]
    if not_sel:
        L.append(f"- Not selected in this run: {', '.join(not_sel)}.")
    L.append("")
    L.append("Median ms per step over repeats (each repeat runs n steps back to back and syncs once); "
             "*first step* is the very first call, including tracing, compilation and lazy "
             "initialisation. Ratios are peer ms ÷ Spore ms: **above 1 means Spore is faster**. "
             "*Peak MB*: peers report the peak resident set size of their process (one process per "
             "measurement, framework runtime included); Spore reports its harness's `peak_rss_mb` when "
             "present, else `peak_mem_mb`. *alloc/step*: bytes Spore allocates per steady-state step. "
             "⚠: other processes used more than 8 % of the CPU while that number was timed.")
    L.append("")
    return L


def status_section(ctx, problems):
    L = ["### Run status", "", "| step | status |", "|---|---|"]
    names = {"python": "Python venv", "spore": "Spore harness", "python-peers": "Python peers",
             "rust-candle": "Candle", "rust-burn-flex": "Burn (flex)", "pipeline-torch": "PyTorch pipeline",
             "pipeline-mindspore": "MindSpore pipeline"}
    if not ctx.status:
        L.append("| (no target/bench/status.tsv) | unknown |")
    for k, (state, reason) in ctx.status.items():
        text = state + (f": {short(reason, 200)}" if reason else "")
        L.append(f"| {names.get(k, k)} | {md(text)} |")
    for p in problems:
        L.append(f"| report | {md(p)} |")
    L += ["", "Raw results and logs: `target/bench/` (per-repeat times, foreign CPU share, job logs).", ""]
    return L


def generate(args):
    problems = []
    recs = load_all(args.dir, problems)
    status = load_status(args.dir)
    ctx = Ctx(recs, status, args.selected)
    notes = []
    L = [START, "<!-- Written by bench/report.py (bash bench/run_all.sh); edits between these markers "
                "are overwritten. -->", "", "## Side-by-side results", ""]
    L += header(args, recs)
    L += targets_table(ctx)
    for bench, label in STEP_BENCHES:
        if bench in args.selected:
            L += step_table(ctx, bench, label, notes)
    if "gemm_2048" in args.selected:
        L += gemm_table(ctx, notes)
    if "fma_peak" in args.selected:
        L += ceiling_table(ctx)
    if "pipeline_mnist" in args.selected:
        L += pipeline_table(ctx)
    if notes:
        L += ["Disturbed measurements:", ""] + [f"- {n}" for n in notes] + [""]
    L += status_section(ctx, problems)
    L.append(END)
    return "\n".join(L) + "\n"


def splice(doc, section):
    if START in doc and END in doc and doc.index(START) < doc.index(END):
        a = doc.index(START)
        b = doc.index(END) + len(END)
        if doc[b:b + 1] == "\n":
            b += 1
        return doc[:a] + section + doc[b:]
    # no markers yet: insert after the title line
    lines = doc.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("# "):
            return "".join(lines[:i + 1]) + "\n" + section + "\n" + "".join(lines[i + 1:]).lstrip("\n")
    return section + "\n" + doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(ROOT, "target", "bench"))
    ap.add_argument("--benchmarks", default=os.path.join(ROOT, "BENCHMARKS.md"))
    ap.add_argument("--stdout", action="store_true", help="print the section instead of writing files")
    ap.add_argument("--command", default="bash bench/run_all.sh")
    ap.add_argument("--selected", default=",".join(ALL_BENCHES), help="benchmarks this run selected")
    ap.add_argument("--venv-python", default=None, help="python of the peer venv (for package versions)")
    ap.add_argument("--priority", default="unknown")
    ap.add_argument("--threads", default=os.environ.get("SPORE_BENCH_THREADS", "2"))
    ap.add_argument("--wall-s", type=float, default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    args.selected = [b for b in args.selected.split(",") if b]
    section = generate(args)
    if args.stdout:
        sys.stdout.write(section)
        return
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "report.md"), "w") as f:
        f.write(section)
    doc = open(args.benchmarks).read() if os.path.exists(args.benchmarks) else "# Benchmarks\n"
    tmp = args.benchmarks + ".tmp"
    with open(tmp, "w") as f:
        f.write(splice(doc, section))
    os.replace(tmp, args.benchmarks)
    print(f"wrote the generated section of {args.benchmarks} (copy: {os.path.join(args.dir, 'report.md')})")


if __name__ == "__main__":
    main()
