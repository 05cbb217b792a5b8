#!/usr/bin/env python3
"""Spore against its peers with a method host drift cannot bias (issue 40).

    python3 bench/interleaved.py [--workloads W1,W2] [--threads N | --sweep | --thread-list 2,4,8]
                                 [--rounds R] [--peers torch_eager,torch_compile,jax]
                                 [--spore-modes graph,pynative] [--out DIR] [--quick]
    python3 bench/interleaved.py --report-from DIR/interleaved.jsonl

Every round runs each workload once in every framework and mode, each in its own process, in
an order that rotates from round to round (so no framework is always first after a pause, or
always last when the host slows). A round's ratio compares measurements taken minutes apart at
most; the report gives each ratio's median over rounds and its spread (min..max), never a
ratio of medians taken at different times.

Ratios (>1 means Spore is faster):
  speed     best peer (its best mode) / best Spore mode, per round
  pynative  PyTorch eager / Spore PyNative, per round
  memory    peak resident set minus the framework's idle runtime (import and one trivial op),
            peer / Spore
GEMM compares against the best BLAS peer (NumPy's OpenBLAS, PyTorch's MKL). Spore's measuring
processes check their own results (see crates/spore/examples/bench/checks.rs): a failed check
is a failed measurement, reported as such, never a figure.

--threads reaches every process (Spore's kernel pool, torch.set_num_threads, OMP/MKL/OpenBLAS,
XLA); --sweep runs 1, 2 and the machine's core count in one command, --thread-list the counts
it names. Raw records go to DIR/interleaved.jsonl and the tables to DIR/interleaved.md (DIR:
target/bench).

On a machine without Rust (a lent host): --spore-bin names a `bench` binary built elsewhere
(nothing is built then) and --python the peers' interpreter.

Environment: SPORE_PEER_VENV (the peers' Python, as bench/run_all.sh; default
~/.cache/spore-peer-venv), ANCHOR_REPEATS / ANCHOR_REPEAT_S / ANCHOR_WARMUP (the protocol of
every process; defaults here 3 / 0.6 / 2, --quick 2 / 0.2 / 1).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_DIR = os.path.join(ROOT, "bench", "peers", "py")
SPORE_BIN = os.path.join(ROOT, "target", "release", "examples", "bench")

# Spore workload -> the peers' name for it (bench/peers/py/models_spec.py)
WORKLOADS = {
    "lenet5_train_b32": "lenet_train",
    "mlp_train_b64": "mlp_train",
    "mlp_infer_b64": "mlp_infer",
    "resnet18_train_b32": "resnet18_train",
    "bert_train_b16": "bert_train",
    "resnet50_train_b8": "resnet50_train",
    "resnet50_infer_b1": "resnet50_infer",
    "gemm_2048": "gemm2048",
}
DEFAULT_WORKLOADS = ["gemm_2048", "lenet5_train_b32", "mlp_train_b64", "mlp_infer_b64",
                     "resnet18_train_b32", "bert_train_b16", "resnet50_train_b8", "resnet50_infer_b1"]
# peer name -> (framework, mode, script argv builder)
PEERS = {
    "torch_eager": ("torch", "eager", lambda w: ["bench_torch.py", w, "eager"]),
    "torch_compile": ("torch", "compile", lambda w: ["bench_torch.py", w, "compile"]),
    "jax": ("jax", "jit", lambda w: ["bench_jax.py", w, "jit"]),
}
BLAS_PEERS = {"numpy": ["bench_gemm.py", "numpy"], "torch": ["bench_gemm.py", "torch"]}
JAX_WORKLOADS = {"lenet_train", "mlp_train", "mlp_infer", "resnet18_train", "bert_train"}


def peer_python():
    venv = os.environ.get("SPORE_PEER_VENV", os.path.expanduser("~/.cache/spore-peer-venv"))
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        sys.exit(f"interleaved.py: no peer venv at {venv} (bash bench/run_all.sh creates it, or set "
                 f"SPORE_PEER_VENV)")
    return py


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
            else:
                name = "unknown CPU"
        with open("/proc/cpuinfo") as f:
            flags = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return "unknown CPU"
    isa = "AVX-512" if " avx512f" in flags else ("AVX2-only" if " avx2" in flags else "no AVX2")
    # Spore's kernels capped below the CPU (crates/kernels/src/isa.rs) are said so.
    cap = os.environ.get("SPORE_MAX_ISA")
    capped = f", Spore capped at SPORE_MAX_ISA={cap}" if cap else ""
    return f"{name}, {isa}{capped}, {os.cpu_count()} logical CPUs"


def run(argv, env, timeout):
    """Runs one measuring process; returns its RESULT record or {"error": ...}."""
    try:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    except OSError as e:
        return {"error": f"could not start {argv[0]}: {e}"}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            try:
                rec = json.loads(line[len("RESULT "):])
            except json.JSONDecodeError as e:
                return {"error": f"malformed RESULT line ({e})"}
            return rec if isinstance(rec, dict) else {"error": "RESULT line is not a JSON object"}
    tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": tail[:300]}


def jobs_for(workload, peers, spore_bin, spore_modes):
    """(label, kind, argv) for one workload: Spore's modes, then the peers'."""
    name = WORKLOADS[workload]
    if workload == "gemm_2048":
        out = [("spore", "spore", [spore_bin, "--child", "gemm_2048:n/a"])]
        return out + [(f"{lib} (BLAS)", "peer", BLAS_PEERS[lib]) for lib in BLAS_PEERS
                      if lib == "numpy" or any(p.startswith(lib) for p in peers)]
    out = [(f"spore {m}", "spore", [spore_bin, "--child", f"{workload}:{m}"]) for m in spore_modes]
    for p in peers:
        if p == "jax" and name not in JAX_WORKLOADS:
            continue
        out.append((p, "peer", PEERS[p][2](name)))
    return out


def measure(job, threads, py, protocol, timeout):
    label, kind, argv = job
    env = dict(os.environ, ANCHOR_THREADS=str(threads), **protocol)
    if kind == "spore":
        rec = run(argv + ["--threads", str(threads)], env, timeout)
    else:
        script = os.path.join(PEERS_DIR, argv[0])
        rec = run([py, script] + argv[1:], dict(env, PYTHONPATH=PEERS_DIR), timeout)
    rec["label"] = label
    return rec


def ms(rec):
    """The record's median ms, or None for a failed (or figure-less) measurement."""
    v = rec.get("median_ms") if "error" not in rec else None
    return v if isinstance(v, (int, float)) and v > 0 else None


def summarize(records, workload, threads):
    """Per-round figures for one workload at one thread count: (best Spore ms, its label),
    (best peer ms, its label), and the speed, PyNative and memory ratios of each round."""
    out = {"spore": [], "peer": [], "speed": [], "pynative": [], "memory": []}
    for rnd in sorted({r["round"] for r in records}):
        here = [r for r in records if r["round"] == rnd and r["workload"] == workload
                and r["threads_asked"] == threads and ms(r)]
        spore = [r for r in here if r["label"].startswith("spore")]
        peers = [r for r in here if not r["label"].startswith("spore")]
        if spore and peers:
            best_spore, best_peer = min(spore, key=ms), min(peers, key=ms)
            out["spore"].append((ms(best_spore), best_spore["label"]))
            out["peer"].append((ms(best_peer), best_peer["label"]))
            out["speed"].append(ms(best_peer) / ms(best_spore))
            s_mem, p_mem = best_spore.get("net_peak_mb"), best_peer.get("net_peak_mb")
            if s_mem and p_mem and s_mem > 0:
                out["memory"].append(p_mem / s_mem)
        eager = [ms(r) for r in here if r["label"] == "spore pynative"]
        torch_eager = [ms(r) for r in here if r["label"] == "torch_eager"]
        if eager and torch_eager:
            out["pynative"].append(torch_eager[0] / eager[0])
    return out


def best_cell(pairs):
    """Median over rounds of the per-round best, with the label that won most rounds."""
    if not pairs:
        return "failed"
    labels = [label for _, label in pairs]
    return f"{statistics.median(v for v, _ in pairs):.3f} ({max(set(labels), key=labels.count)})"


def spread(values):
    if not values:
        return "n/a"
    return f"{statistics.median(values):.2f}x ({min(values):.2f}..{max(values):.2f})"


def report(records, workloads, thread_counts, cpu, rounds):
    lines = [f"CPU: {cpu}; {rounds} interleaved rounds; ratios >1 mean Spore is faster.", ""]
    for t in thread_counts:
        lines += [f"### {t} thread{'s' if t > 1 else ''}", "",
                  "| workload | Spore best (ms) | best peer (ms) | speed ratio | torch eager ÷ Spore PyNative | memory ratio |",
                  "|---|--:|--:|--:|--:|--:|"]
        for w in workloads:
            f = summarize(records, w, t)
            pyn_cell = "n/a" if w == "gemm_2048" else spread(f["pynative"])
            lines.append(f"| {w} | {best_cell(f['spore'])} | {best_cell(f['peer'])} | {spread(f['speed'])} | "
                         f"{pyn_cell} | {spread(f['memory'])} |")
        failures = [r for r in records if r["threads_asked"] == t and not ms(r)]
        for r in failures:
            lines.append(f"\n- failed: {r['workload']} {r['label']} (round {r['round']}): "
                         f"{r.get('error', 'no median_ms')}")
        lines.append("")
    return "\n".join(lines)


def report_from(path):
    """Prints the report of a run's raw records (one JSON object per line)."""
    try:
        with open(path) as f:
            lines = [line for line in f if line.strip()]
    except OSError as e:
        sys.exit(f"interleaved.py: cannot read records from {path}: {e}")
    records = []
    for n, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            # A run killed mid-write leaves its last line cut short: that one is skipped.
            if n + 1 < len(lines):
                sys.exit(f"interleaved.py: {path} line {n + 1} is not JSON: {e}")
            print(f"interleaved.py: skipped the unfinished last line of {path}", file=sys.stderr)
    if not records or not all(isinstance(r, dict) and {"workload", "round", "threads_asked", "label"} <= r.keys()
                              for r in records):
        sys.exit(f"interleaved.py: {path} holds no run records (workload, round, threads_asked, label)")
    workloads = list(dict.fromkeys(r["workload"] for r in records))
    thread_counts = sorted({r["threads_asked"] for r in records})
    rounds = len({r["round"] for r in records})
    cpu = next((r["cpu"] for r in records if "cpu" in r), "CPU not recorded")
    print(report(records, workloads, thread_counts, cpu, rounds))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    ap.add_argument("--threads", type=int, default=int(os.environ.get("SPORE_BENCH_THREADS", "2")))
    ap.add_argument("--sweep", action="store_true", help="threads 1, 2 and the machine's core count")
    ap.add_argument("--thread-list", help="comma-separated thread counts, e.g. 2,4,8,16")
    ap.add_argument("--spore-modes", default="graph,pynative")
    ap.add_argument("--spore-bin", help="a prebuilt bench binary (then nothing is built)")
    ap.add_argument("--python", help="the peers' Python (default: the venv of bench/run_all.sh)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers", default="torch_eager,torch_compile,jax")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "bench"))
    ap.add_argument("--quick", action="store_true", help="short protocol: a smoke test, not a measurement")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per measuring process")
    ap.add_argument("--report-from", metavar="JSONL",
                    help="only write the report of the records in JSONL (a run's raw records, "
                         "possibly cut short)")
    a = ap.parse_args()
    if a.report_from:
        return report_from(a.report_from)
    workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    for w in workloads:
        if w not in WORKLOADS:
            sys.exit(f"interleaved.py: unknown workload {w!r}; known: {', '.join(WORKLOADS)}")
    peers = [p.strip() for p in a.peers.split(",") if p.strip()]
    for p in peers:
        if p not in PEERS:
            sys.exit(f"interleaved.py: unknown peer {p!r}; known: {', '.join(PEERS)}")
    spore_modes = [m.strip() for m in a.spore_modes.split(",") if m.strip()]
    if not spore_modes or any(m not in ("graph", "pynative") for m in spore_modes):
        sys.exit(f"interleaved.py: --spore-modes takes graph and/or pynative, got {a.spore_modes!r}")
    if a.thread_list and a.sweep:
        sys.exit("interleaved.py: --thread-list and --sweep each choose the thread counts; give one")
    if a.thread_list:
        try:
            thread_counts = sorted({int(t) for t in a.thread_list.split(",") if t.strip()})
        except ValueError:
            sys.exit(f"interleaved.py: --thread-list takes integers, got {a.thread_list!r}")
    else:
        thread_counts = sorted({1, 2, os.cpu_count() or 2}) if a.sweep else [a.threads]
    if not thread_counts or min(thread_counts) < 1 or a.rounds < 1:
        sys.exit("interleaved.py: thread counts and --rounds must be at least 1")
    protocol = {"ANCHOR_REPEATS": "2", "ANCHOR_REPEAT_S": "0.2", "ANCHOR_WARMUP": "1"} if a.quick else \
        {k: os.environ.get(k, d) for k, d in (("ANCHOR_REPEATS", "3"), ("ANCHOR_REPEAT_S", "0.6"), ("ANCHOR_WARMUP", "2"))}
    spore_bin = a.spore_bin or SPORE_BIN
    if a.spore_bin is None:
        # Always: a no-op when the binary is current, and never a stale binary measured.
        subprocess.run(["cargo", "build", "--release", "-p", "spore", "--example", "bench"], cwd=ROOT, check=True)
    elif not os.access(spore_bin, os.X_OK):
        sys.exit(f"interleaved.py: --spore-bin {spore_bin!r} is not an executable file")
    py = a.python or peer_python()
    if shutil.which(py) is None:
        sys.exit(f"interleaved.py: --python {py!r} is not an executable (a path, or a name on PATH)")
    os.makedirs(a.out, exist_ok=True)
    raw_path = os.path.join(a.out, "interleaved.jsonl")
    records = []
    cpu = cpu_name()
    with open(raw_path, "w") as raw:
        # Rounds outermost: a run cut short still has every thread count's first round.
        for rnd in range(a.rounds):
            for t in thread_counts:
                for w in workloads:
                    jobs = jobs_for(w, peers, spore_bin, spore_modes)
                    shift = rnd % len(jobs)
                    for job in jobs[shift:] + jobs[:shift]:
                        t0 = time.time()
                        rec = measure(job, t, py, protocol, a.timeout)
                        rec.update(workload=w, round=rnd, threads_asked=t, cpu=cpu)
                        records.append(rec)
                        raw.write(json.dumps(rec) + "\n")
                        raw.flush()
                        shown = f"{ms(rec):.3f} ms" if ms(rec) else f"failed: {rec.get('error', 'no median_ms')}"
                        print(f"[{t} thr, round {rnd + 1}/{a.rounds}] {w:<20} {job[0]:<16} {shown} "
                              f"({time.time() - t0:.0f} s)", flush=True)
    text = report(records, workloads, thread_counts, cpu, a.rounds)
    with open(os.path.join(a.out, "interleaved.md"), "w") as f:
        f.write(text + "\n")
    print("\n" + text)
    print(f"raw records: {raw_path}")


if __name__ == "__main__":
    main()
