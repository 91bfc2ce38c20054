"""`python -m benchmarks cli`: how long a `d1saver` command takes to start, whole process, as a
user's shell runs it: `d1saver --version`, `d1saver --help`, `d1saver threads --help`, beside
`python -c pass` (the interpreter alone). Each runs `--runs` times in a fresh process; printed:
the median and fastest wall time, the median CPU time (user + system: what the process itself
spent, which a busy machine inflates less than wall time), the modules imported, and which
heavy packages among them (LangGraph, LangChain, httpx, pydantic).

`--source DIR` runs another checkout's code with this interpreter (DIR put first on the
import path), e.g. the previous release unpacked with `git archive`, for before and after
figures from one sitting.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

COMMANDS = {"python -c pass": None, "d1saver --version": ["--version"],
            "d1saver --help": ["--help"], "d1saver threads --help": ["threads", "--help"]}
HEAVY = ("langgraph", "langchain_core", "httpx", "pydantic")
# Run from here, not from a checkout: `python -c` puts the working directory first on the path.
_NEUTRAL = tempfile.gettempdir()


def _script() -> str:
    """The installed console script (what the shell runs), or the entry point it calls."""
    found = shutil.which("d1saver", path=str(Path(sys.executable).parent))
    return found or ""


def _argv(args: list[str] | None) -> list[str]:
    if args is None:
        return [sys.executable, "-c", "pass"]
    script = _script()
    if script:
        return [sys.executable, script, *args]
    return [sys.executable, "-c", "import sys; from d1saver.cli import main; sys.argv[0] = "
            "'d1saver'; main()", *args]


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=_NEUTRAL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _imported(argv: list[str], env: dict[str, str]) -> list[str]:
    """The modules a run imports (python -X importtime, on stderr)."""
    out = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=_NEUTRAL, text=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True).stderr
    return [line.rsplit("|", 1)[1].strip() for line in out.splitlines()
            if line.startswith("import time:") and "|" in line][1:]  # the first is the header


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks cli", description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--source", type=Path, default=None,
                        help="a checkout whose d1saver (and compaction) to run instead")
    parser.add_argument("--label", default=None, help="what to call the code measured")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.source is not None:
        env["PYTHONPATH"] = str(args.source.resolve())
    label = args.label or (str(args.source) if args.source else "this checkout")
    rows: list[dict[str, Any]] = []
    for name, command in COMMANDS.items():
        run = _argv(command)
        _run(run, env)  # once unmeasured: byte code compiled, files in the page cache
        times = [_run(run, env) for _ in range(args.runs)]
        modules = _imported(run, env)
        heavy = sorted({m.split(".")[0] for m in modules} & set(HEAVY))
        rows.append({"code": label, "command": name,
                     "wall_median_s": round(statistics.median(t[0] for t in times), 3),
                     "wall_min_s": round(min(t[0] for t in times), 3),
                     "cpu_median_s": round(statistics.median(t[1] for t in times), 3),
                     "modules": len(modules), "heavy": ", ".join(heavy) or "-"})
    load = os.getloadavg()[0]
    print(f"{label}: {args.runs} runs each, {os.cpu_count()} cores, load average {load:.1f}")
    print(f"{'command':<24} {'wall median':>11} {'wall min':>9} {'cpu median':>10} "
          f"{'modules':>8}  heavy packages imported")
    for r in rows:
        print(f"{r['command']:<24} {r['wall_median_s']:>10.3f}s {r['wall_min_s']:>8.3f}s "
              f"{r['cpu_median_s']:>9.3f}s {r['modules']:>8}  {r['heavy']}")
    return rows


if __name__ == "__main__":
    main()
