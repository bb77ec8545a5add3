"""Run the benchmarks: every ``benchmarks/bench_*.py`` that defines ``main(argv)``, or only those named.

    python -m benchmarks                      # all of them, one after another
    python -m benchmarks engine packages      # bench_engine and bench_packages only
    python -m benchmarks engine -- --records 100000   # arguments after "--" go to each selected main()

Each benchmark prints its own figures (and its own "skipped: ..." line when a service it needs, such as
PostgreSQL or Redis, is not configured). The exit code is the highest any of them returned; a benchmark
that cannot even be imported, or that crashes, is reported and counts as 1, and the others still run.

Each runs in a process of its own (``python -m benchmarks.bench_<name>``), as it does when run alone. A
benchmark sets Django up on a database of its own and points the environment at its own broker and
var/: in one shared process the first one's settings stayed (Django is set up once per process), so a
later benchmark wrote to an earlier one's database and started workers on a broker already stopped.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def available() -> list[str]:
    """The short names (``engine`` for bench_engine.py) of the benchmark modules, sorted: those that define
    ``main`` (bench_settings.py and bench_urls.py only serve another benchmark's server)."""
    return sorted(
        p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py") if "\ndef main(" in p.read_text(encoding="utf-8")
    )


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    passed: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, passed = args[:cut], args[cut + 1 :]
    if any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        print("\navailable: " + ", ".join(available()))
        return 0
    names = [a.removeprefix("bench_").removesuffix(".py") for a in args] or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available())}", file=sys.stderr)
        return 2
    worst = 0
    for name in names:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, "-m", f"benchmarks.bench_{name}", *passed], cwd=HERE.parent)
        print(f"== {name}: exit {code} in {time.perf_counter() - started:.1f} s", flush=True)
        # A benchmark killed by a signal exits below 0: it counts as a failure, like a crash.
        worst = max(worst, code if code >= 0 else 1)
    return worst


if __name__ == "__main__":
    sys.exit(main())
