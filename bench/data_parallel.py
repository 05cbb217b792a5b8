#!/usr/bin/env python3
"""Distributed-training figures for BENCHMARKS.md, measured by alternating runs.

Weak scaling: `bench_data_parallel` on one process against `mpirun -n 2`, every rank on
one thread (RAYON_NUM_THREADS=1), and against two independent one-process runs at once
(the machine's ceiling for two ranks), in rounds A B C D A B C D ... so that a noisy host
affects every configuration alike; the figures are medians over the rounds. AllReduce:
`bench_allreduce --raw` (plain MPI_Allreduce) against Spore's operator, alternated the
same way.

Build first:
  cargo build --release --features mpi -p spore --example bench_data_parallel
  cargo build --release -p spore-parallel --features mpi --example bench_allreduce
Run:
  python3 bench/data_parallel.py [--rounds 5] [--only lenet|resnet18|allreduce] [--ranks 2,4,8]
                                 [--bin-dir DIR]

`--ranks` adds, for each N, N ranks against N independent processes (a host with at least
N spare cores is where those rows mean anything); `--bin-dir` reads the binaries from DIR
(bench/lent_host.sh stages them for a host without Rust).
"""

import argparse
import os
import statistics
import subprocess

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "-x", "RAYON_NUM_THREADS", "-n"]
BIN_DIR = "target/release/examples"


def binary(name):
    return os.path.join(BIN_DIR, name)


def run(cmd):
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    if cmd and cmd[0] == "independent":
        # N independent one-process runs at once: what N ranks could do on this machine
        # with no communication at all (shared caches, memory and cores).
        n = int(cmd[1])
        procs = [subprocess.Popen(cmd[2:], env=env, stdout=subprocess.PIPE, text=True) for _ in range(n)]
        rows = [parse(p.communicate()[0])[0] for p in procs]
        slow = max(rows, key=lambda r: float(r["step_ms"]))
        return [dict(slow, samples_per_s=str(n * float(slow["samples_per_s"])))]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return parse(out)


def parse(out):
    rows = []
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields:
            rows.append(fields)
    return rows


def scaling(model, rounds, ranks):
    steps = ["--steps", "1000", "--warmup", "50"] if model == "lenet" else ["--steps", "6", "--warmup", "2"]
    train = [binary("bench_data_parallel"), "--model", model]
    configs = {"1 rank": train + steps}
    for n in ranks:
        configs[f"{n} independent processes (no communication)"] = ["independent", str(n)] + train + steps
        configs[f"{n} ranks, 25 MB buckets"] = MPIRUN + [str(n)] + train + ["--fusion", "25"] + steps
        if n == 2:
            configs["2 ranks, one bucket (no overlap)"] = MPIRUN + ["2"] + train + ["--fusion", "one"] + steps
    seen = {k: [] for k in configs}
    for _ in range(rounds):
        for name, cmd in configs.items():
            seen[name].append(run(cmd)[0])
    base = statistics.median(float(r["samples_per_s"]) for r in seen["1 rank"])
    print(f"## {model}, batch 32 per rank, Graph mode, medians of {rounds} alternated runs")
    print("| configuration | step ms | samples/s | vs 1 rank | comm ms/step | exposed ms/step |")
    print("|---|---|---|---|---|---|")
    for name, rows in seen.items():
        med = {k: statistics.median(float(r[k]) for r in rows)
               for k in ["step_ms", "samples_per_s", "comm_ms_per_step", "exposed_ms_per_step"]}
        print(f"| {name} | {med['step_ms']:.2f} | {med['samples_per_s']:.1f} | "
              f"{med['samples_per_s'] / base:.2f}x | {med['comm_ms_per_step']:.2f} | "
              f"{med['exposed_ms_per_step']:.2f} |")
    print()


def allreduce(rounds):
    configs = {
        "MPI_Allreduce": MPIRUN + ["2", binary("bench_allreduce"), "--raw", "--reps", "100"],
        "Spore AllReduce": MPIRUN + ["2", binary("bench_allreduce"), "--reps", "100"],
    }
    seen = {k: {} for k in configs}
    for _ in range(rounds):
        for name, cmd in configs.items():
            for r in run(cmd):
                seen[name].setdefault(r["size_mb"], []).append(float(r["median_ms"]))
    print(f"## AllReduce, 2 ranks, Float32 sum, medians of {rounds} alternated runs (each a median of 100 calls)")
    print("| size | MPI_Allreduce ms | Spore AllReduce ms | Spore / MPI |")
    print("|---|---|---|---|")
    for size in seen["MPI_Allreduce"]:
        a = statistics.median(seen["MPI_Allreduce"][size])
        b = statistics.median(seen["Spore AllReduce"][size])
        print(f"| {size} MB | {a:.3f} | {b:.3f} | {b / a:.3f} |")
    print()


def main():
    global BIN_DIR
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", choices=["lenet", "resnet18", "allreduce"])
    p.add_argument("--ranks", default="2", help="comma-separated rank counts for weak scaling")
    p.add_argument("--bin-dir", default=BIN_DIR)
    a = p.parse_args()
    try:
        ranks = [int(n) for n in a.ranks.split(",")]
    except ValueError:
        p.error(f"--ranks expects comma-separated integers such as 2,4,8, found {a.ranks!r}")
    if any(n < 2 for n in ranks):
        p.error(f"--ranks expects counts of at least 2, found {a.ranks!r}")
    BIN_DIR = a.bin_dir
    for what in ["allreduce", "lenet", "resnet18"]:
        if a.only in (None, what):
            if what == "allreduce":
                allreduce(a.rounds)
            else:
                scaling(what, a.rounds if what == "lenet" else max(2, a.rounds // 2 + 1), ranks)


if __name__ == "__main__":
    main()
