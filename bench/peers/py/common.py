"""Shared timing harness for the peer benchmarks (copied from the peer anchors; adds peak RSS).

Every benchmark is a pair (step, sync):
  step()  -> runs ONE training/inference step and returns something
  sync(r) -> blocks until the result r (and everything queued before it) is ready

Protocol (identical for every framework / mode):
  1. first call: t0 -> step() -> sync -> t1   => "first_ms" (includes tracing/compile/lazy init)
  2. warm-up: WARMUP further steps (synced), also used to estimate per-step time
  3. REPEATS repeats; each repeat runs n steps back to back and syncs once at the end.
     n is chosen so that one repeat lasts >= REPEAT_S seconds, hence the timed total is
     >= REPEATS * REPEAT_S (>= 5 s by default).
  4. report median over repeats of (repeat_time / n)  => "median_ms", steps/s = 1000/median_ms.
"""
import json
import math
import os
import statistics
import sys
import time

THREADS = int(os.environ.get("ANCHOR_THREADS", "2"))
REPEATS = int(os.environ.get("ANCHOR_REPEATS", "5"))
REPEAT_S = float(os.environ.get("ANCHOR_REPEAT_S", "1.2"))  # 5 x 1.2 s = 6 s timed
WARMUP = int(os.environ.get("ANCHOR_WARMUP", "5"))
SEED = 0


def pin_env_threads(n=THREADS):
    """Must be called before importing numpy / torch / mindspore / jax."""
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
        os.environ[k] = str(n)


def _cpu_busy_jiffies():
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    vals = [int(v) for v in parts]
    idle = vals[3] + vals[4]  # idle + iowait
    return sum(vals[:8]) - idle  # user nice system idle iowait irq softirq steal


def _own_cpu_s():
    t = os.times()
    return t.user + t.system


def foreign_load_probe(seconds=1.0):
    """Fraction of the machine's CPU capacity used by OTHER processes over `seconds`."""
    hz = os.sysconf("SC_CLK_TCK")
    ncpu = os.cpu_count() or 1
    b0, o0, t0 = _cpu_busy_jiffies(), _own_cpu_s(), time.perf_counter()
    time.sleep(seconds)
    b1, o1, t1 = _cpu_busy_jiffies(), _own_cpu_s(), time.perf_counter()
    return max(0.0, ((b1 - b0) / hz - (o1 - o0)) / ((t1 - t0) * ncpu))


def measure(step, sync, warmup=WARMUP, repeats=REPEATS, repeat_s=REPEAT_S, max_steps_per_repeat=100000):
    t0 = time.perf_counter()
    sync(step())
    first_ms = (time.perf_counter() - t0) * 1e3
    print(f"PROGRESS first call {first_ms:.0f} ms", flush=True)

    # warm-up (synced each step) + per-step estimate
    times = []
    for _ in range(max(1, warmup)):
        t = time.perf_counter()
        sync(step())
        times.append(time.perf_counter() - t)
        print(f"PROGRESS warm-up step {times[-1] * 1e3:.0f} ms", flush=True)
    est = max(min(times), 1e-6)
    n = max(1, min(max_steps_per_repeat, math.ceil(repeat_s / est)))

    per_step = []
    total = 0.0
    hz = os.sysconf("SC_CLK_TCK")
    ncpu = os.cpu_count() or 1
    b0, o0 = _cpu_busy_jiffies(), _own_cpu_s()
    for _ in range(repeats):
        t = time.perf_counter()
        r = None
        for _ in range(n):
            r = step()
        sync(r)
        dt = time.perf_counter() - t
        total += dt
        per_step.append(dt / n * 1e3)
    b1, o1 = _cpu_busy_jiffies(), _own_cpu_s()
    # share of the machine's CPU capacity used by other processes while we were timing
    foreign = max(0.0, ((b1 - b0) / hz - (o1 - o0)) / (total * ncpu))
    own_util = (o1 - o0) / total  # cores kept busy by this process (<= THREADS ideally)
    med = statistics.median(per_step)
    return {
        "first_ms": first_ms,
        "warmup_steps": warmup,
        "warmup_min_ms": est * 1e3,
        "steps_per_repeat": n,
        "repeats": repeats,
        "timed_total_s": total,
        "per_repeat_ms": per_step,
        "median_ms": med,
        "min_ms": min(per_step),
        "max_ms": max(per_step),
        "steps_per_s": 1e3 / med,
        "foreign_cpu_frac": foreign,
        "own_cores_busy": own_util,
    }


def peak_rss_mb():
    """Peak resident set size of this process so far, in MiB (Linux ru_maxrss is in KiB)."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


_IDLE_RSS_MB = None


def rss_mb():
    """Resident set size of this process now, in MiB (VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def mark_idle():
    """Records the framework's idle footprint: call after importing it and running one trivial
    op, before building the workload. emit() then reports idle_rss_mb and net_peak_mb (peak minus
    idle), the memory the workload itself added."""
    global _IDLE_RSS_MB
    _IDLE_RSS_MB = rss_mb()


def emit(framework, model, mode, res, **extra):
    rec = {"framework": framework, "model": model, "mode": mode, "threads": THREADS,
           "peak_rss_mb": peak_rss_mb()}
    if _IDLE_RSS_MB is not None:
        rec["idle_rss_mb"] = _IDLE_RSS_MB
        rec["net_peak_mb"] = rec["peak_rss_mb"] - _IDLE_RSS_MB
    rec.update(res)
    rec.update(extra)
    print("RESULT " + json.dumps(rec), flush=True)


def emit_error(framework, model, mode, err):
    line = str(err).strip().splitlines()
    msg = line[-1] if line else repr(err)
    rec = {"framework": framework, "model": model, "mode": mode, "error": f"{type(err).__name__}: {msg}"[:500]}
    print("RESULT " + json.dumps(rec), flush=True)


def parse_args():
    # usage: python bench_X.py MODEL MODE
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} MODEL MODE", file=sys.stderr)
        sys.exit(2)
    return sys.argv[1], sys.argv[2]
