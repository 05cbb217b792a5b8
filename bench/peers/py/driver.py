"""Runs every (framework, workload, mode) in its own subprocess and collects the RESULT lines
into one JSON file ({"results": [...]}) for bench/report.py. Adapted from the peer anchors'
driver: same jobs and method, output path and logs chosen by the caller (bench/run_all.sh),
a fresh file every run (no merging with older results), a --quick mode, and no report step.

Noise control: this box has 2 cores and may be shared with other jobs. Before each job we wait
until other processes use < QUIET of the machine (probe over 2 s, up to WAIT_MAX s); each result
carries foreign_cpu_frac (other processes' share of CPU capacity during the timed loop). A job whose
foreign_cpu_frac > RETRY_ABOVE is re-run (up to RETRIES extra times) and the least-disturbed run kept.
bench/run_all.sh runs this in its own session at autogroup nice -20 and sets ANCHOR_WAIT_MAX=0.

usage: python driver.py --out PATH [--logs DIR] [--only SUBSTR ...] [--quick]
  --only keeps the jobs whose name (e.g. "lenet_train/torch/eager", "gemm/numpy") contains one
  of the given substrings.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import common

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
QUIET = float(os.environ.get("ANCHOR_QUIET", "0.05"))
WAIT_MAX = float(os.environ.get("ANCHOR_WAIT_MAX", "600"))
RETRY_ABOVE = float(os.environ.get("ANCHOR_RETRY_ABOVE", "0.08"))
RETRIES = int(os.environ.get("ANCHOR_RETRIES", "2"))
JOB_TIMEOUT = int(os.environ.get("ANCHOR_JOB_TIMEOUT", "1500"))
# MindSpore's CPU ResNet-18 takes minutes per step (anchors: the first step alone > 180 s).
MS_RESNET_TIMEOUT = int(os.environ.get("ANCHOR_MS_RESNET_TIMEOUT", "600"))

WORKLOADS = ["lenet_train", "mlp_train", "mlp_infer", "resnet18_train"]

# --quick: a smoke test of the whole path, not a measurement
QUICK_ENV = {"ANCHOR_REPEATS": "2", "ANCHOR_REPEAT_S": "0.2", "ANCHOR_WARMUP": "1"}


def jobs():
    """(name, framework, argv, extra env, timeout s)"""
    out = []
    for lib in ("numpy", "torch", "jax", "mindspore"):
        out.append((f"gemm/{lib}", lib, ["bench_gemm.py", lib], {}, JOB_TIMEOUT))
    for w in WORKLOADS:
        env = {"ANCHOR_WARMUP": "2"} if w.startswith("resnet") else {}
        out.append((f"{w}/torch/eager", "torch", ["bench_torch.py", w, "eager"], env, JOB_TIMEOUT))
        out.append((f"{w}/torch/compile", "torch", ["bench_torch.py", w, "compile"], env, JOB_TIMEOUT))
        # MindSpore CPU ResNet-18 steps take tens of seconds or more: 1 warm-up + 1 repeat (>= 1 step)
        if w.startswith("resnet"):
            ms_env, ms_timeout = {"ANCHOR_WARMUP": "1", "ANCHOR_REPEATS": "1"}, MS_RESNET_TIMEOUT
        else:
            ms_env, ms_timeout = {}, JOB_TIMEOUT
        for m in ("pynative", "graph", "pynative_jit"):
            out.append((f"{w}/mindspore/{m}", "mindspore", ["bench_mindspore.py", w, m], ms_env, ms_timeout))
        out.append((f"{w}/jax/jit", "jax", ["bench_jax.py", w, "jit"], env, JOB_TIMEOUT))
    return out


def wait_quiet():
    t0 = time.time()
    while True:
        f = common.foreign_load_probe(2.0)
        if f < QUIET:
            return f, time.time() - t0
        if time.time() - t0 > WAIT_MAX:
            return f, time.time() - t0
        print(f"  waiting for quiet machine: other processes use {f:.0%} of CPU", flush=True)
        time.sleep(8)


def run_one(name, argv, env_extra, timeout, logf):
    env = dict(os.environ)
    env.update(env_extra)
    load_before, waited = wait_quiet()
    t0 = time.time()
    try:
        p = subprocess.run([PY] + argv, cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        prog = [l for l in out.splitlines() if l.startswith("PROGRESS")]
        out += f"\nTIMEOUT after {timeout}s; progress so far: " + ("; ".join(p[9:] for p in prog) or "none")
        rc = -9
    wall = time.time() - t0
    logf.write(f"===== {name} rc={rc} wall={wall:.1f}s load_before={load_before:.3f} waited={waited:.0f}s\n")
    logf.write(out + "\n")
    logf.flush()
    recs = [json.loads(l[len("RESULT "):]) for l in out.splitlines() if l.startswith("RESULT ")]
    if not recs:
        tail = [l for l in out.strip().splitlines() if l.strip()][-1:] or ["(no output)"]
        fw = argv[1] if argv[0] == "bench_gemm.py" else argv[0][6:-3]
        recs = [{"framework": fw, "model": argv[1] if len(argv) > 2 else "gemm2048",
                 "mode": argv[2] if len(argv) > 2 else "fp32", "error": f"rc={rc}: {tail[0][:400]}"}]
    for r in recs:
        r["job"] = name
        r["job_wall_s"] = wall
        r["load_before"] = load_before
        r["argv"] = " ".join(argv)
    return recs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None, help="run only jobs whose name contains one of these")
    ap.add_argument("--out", required=True, help="results file (JSON), rewritten from scratch")
    ap.add_argument("--logs", default=None, help="folder for the raw job log (default: next to --out)")
    ap.add_argument("--quick", action="store_true", help="2 short repeats, 1 warm-up step, no retries")
    args = ap.parse_args()

    retries = 0 if args.quick else RETRIES
    logs = args.logs or os.path.join(os.path.dirname(os.path.abspath(args.out)), "logs")
    os.makedirs(logs, exist_ok=True)
    log_path = os.path.join(logs, time.strftime("peers-py-%Y%m%d-%H%M%S.log"))
    logf = open(log_path, "w")
    print(f"python peers: raw log {log_path}", flush=True)
    results = []
    json.dump({"results": results}, open(args.out, "w"), indent=1)
    t_start = time.time()
    for name, _, argv, env, timeout in jobs():
        if args.only is not None and not any(s in name for s in args.only):
            continue
        if args.quick:
            # quick settings, but never more steps than the job's own (MindSpore ResNet-18: 1 repeat)
            env = dict(QUICK_ENV, **{k: str(min(int(v), int(QUICK_ENV[k])))
                                     for k, v in env.items() if k in QUICK_ENV})
            timeout = min(timeout, 120 if name.startswith("resnet18_train/mindspore") else 300)
        best = None
        for attempt in range(1 + retries):
            print(f"[{time.time() - t_start:6.0f}s] {name} (attempt {attempt + 1})", flush=True)
            recs = run_one(name, argv, env, timeout, logf)
            r = recs[0]
            if best is None or ("error" not in r and ("error" in best or
                                r.get("foreign_cpu_frac", 1) < best.get("foreign_cpu_frac", 1))):
                best = r
            msg = r.get("error") or (f"median {r['median_ms']:.3f} ms  first {r['first_ms']:.0f} ms  "
                                     f"foreign {r['foreign_cpu_frac']:.1%}")
            print(f"         -> {msg}", flush=True)
            if "error" in r or r.get("foreign_cpu_frac", 0) <= RETRY_ABOVE:
                break
        best["attempts"] = attempt + 1
        results.append(best)
        json.dump({"results": results}, open(args.out, "w"), indent=1)  # after every job: partial runs keep theirs
    print(f"total python-peer wall time {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
