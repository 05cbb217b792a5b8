r"""The machine and the run around the numbers, for bench/report.py: CPU and memory, package
versions, and how fast the host was at each phase of the run (host_speed.tsv, written by
bench/run_all.sh's probes).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "host_speed.tsv"), "w").write("Spore\t190.0\t10:00:00\nend\t171.0\t10:12:00\n")
    >>> for line in host_speed_lines(d): print(line[:40])
    - Host speed (two-thread FMA peak in GFL
    - ⚠ The host's speed changed by 10 % dur
    >>> _ = open(os.path.join(d, "host_speed.tsv"), "w").write("Spore\t190.0\t10:00\ncandle\tnone\t10:05\nbad line\n")
    >>> host_speed_lines(d)  # within 5 %: no warning; a failed probe shows as such
    ['- Host speed (two-thread FMA peak in GFLOP/s, probed before each phase, UTC): Spore 190 (10:00), candle not measured (10:05).']
    >>> host_speed_lines(os.path.join(d, "missing"))
    []

Standard library only (Python 3.10+).
"""
import json
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Spread of the host probes above which the report warns that the host's speed changed.
DRIFT = 0.05


def run(cmd, cwd=ROOT):
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60)
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def machine():
    model, flags = "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    mem = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 2 ** 20
    except OSError:
        pass
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
    # Spore's kernels capped below the CPU (crates/kernels/src/isa.rs): said beside the
    # flags, so that such figures are not taken for the CPU's own.
    if os.environ.get("SPORE_MAX_ISA"):
        isa.append(f"Spore capped at SPORE_MAX_ISA={os.environ['SPORE_MAX_ISA']}")
    return model, os.cpu_count(), mem, isa


def lock_versions(path, names):
    out = {}
    try:
        text = open(path).read()
    except OSError:
        return out
    for n, v in re.findall(r'\[\[package\]\]\nname = "([^"]+)"\nversion = "([^"]+)"', text):
        if n in names:
            out.setdefault(n, v)
    return out


def py_versions(venv_python):
    if not venv_python or not os.path.exists(venv_python):
        return {}
    code = ("import importlib.metadata as m, json\nout = {}\n"
            "for n in ('torch', 'jax', 'jaxlib', 'mindspore', 'numpy', 'opencv-python-headless'):\n"
            "    try: out[n] = m.version(n)\n    except Exception: pass\nprint(json.dumps(out))")
    s = run([venv_python, "-c", code])
    try:
        return json.loads(s) if s else {}
    except json.JSONDecodeError:
        return {}


def host_speed_lines(d):
    """Lines for the report on host_speed.tsv in directory d: the two-thread FMA peak probed before
    each phase and at the end, and a warning when the probes spread by more than DRIFT."""
    probes = []
    try:
        for line in open(os.path.join(d, "host_speed.tsv")):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                continue
            try:
                probes.append((parts[0], float(parts[1]), parts[2]))
            except ValueError:
                probes.append((parts[0], None, parts[2]))
    except OSError:
        return []
    if not probes:
        return []
    shown = ", ".join(f"{phase} {f'{g:.0f}' if g is not None else 'not measured'} ({at})"
                      for phase, g, at in probes)
    L = [f"- Host speed (two-thread FMA peak in GFLOP/s, probed before each phase, UTC): {shown}."]
    values = [g for _, g, _ in probes if g is not None]
    if len(values) >= 2:
        spread = (max(values) - min(values)) / max(values)
        if spread > DRIFT:
            L.append(f"- ⚠ The host's speed changed by {spread * 100:.0f} % during this run: a phase "
                     "probed slower ran slower for every framework in it, so ratios across phases "
                     "carry that much noise.")
    return L
