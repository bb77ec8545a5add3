"""Recovery package verification and restore, beside floors measured in the same run.

    python -m benchmarks.bench_packages                    # ~500 MB, 2,000 members, tar.gz (a minute or two)
    python -m benchmarks.bench_packages --size-mb 50       # the same shape, smaller
    python -m benchmarks.bench_packages --format tar       # or zip

Generates a package in a temporary directory (half random, half JSON-like bytes per member, seeded, so every
process can regenerate the same member bytes), then times, each in a fresh child process so that its peak RSS
is its own (resource.getrusage):

- floor ``sha256``: hashlib.sha256 over the same member bytes, in memory;
- floor ``tarfile``: stdlib ``tarfile.extractall(filter='data')`` of the same archive (tar formats), or
  ``zipfile.extractall`` (zip); neither fsyncs anything;
- ``tarfile+fsync``: the same, then fsync of every file and directory (what a durable restore must add);
- ``check_package``: full verification (every member read once, hashed, limits, manifest, journal);
- ``restore_package``: verification, then unpacking (re-read, re-hash, write 0600/0700, fsync, rename).

It prints MB/s (member bytes per second), the ratios (check/sha256, restore/tarfile) and peak RSS, against
the targets: restore within 1.25x of tarfile's time, peak RSS under 100 MB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESTORE_TARGET = 1.25
RSS_TARGET_MB = 100
_LINE = b'{"turn": "t-%06d", "phase": "act", "intent": "send-%06d", "state": "committed", "attempt": %d}\n'


def member_bytes(index: int, size: int, seed: int = 7) -> bytes:
    """Member ``index``: half seeded random bytes, half JSON-like lines (compressible), ``size`` bytes."""
    rnd = random.Random(seed * 1_000_003 + index)
    half = size // 2
    out = bytearray(rnd.randbytes(half))
    n = 0
    while len(out) < size:
        out += _LINE % (n, index, n % 7)
        n += 1
    return bytes(out[:size])


def member_name(index: int) -> str:
    return f"d{index // 100:03d}/m{index:05d}.bin"


def _journal(records: int = 200) -> bytes:
    # The library is loaded only where measured: the floors' memory and time are the interpreter's alone.
    from engine.canonical import canonical_bytes

    return b"".join(
        canonical_bytes({"v": 2, "run": "bench", "branch": 0, "lsn": n, "kind": "note", "at": "2026-01-01T00:00:00Z"})
        + b"\n"
        for n in range(records)
    )


def generate(path: Path, size_mb: int, members: int, fmt: str) -> int:
    """Write the package; returns the member bytes (state files and journal)."""
    # The library is loaded only where measured: the floors' memory and time are the interpreter's alone.
    from recovery.packages import build_package

    size = max(1, size_mb * 1024 * 1024 // members)
    state = {member_name(i): member_bytes(i, size) for i in range(members)}
    journal = _journal()
    # Level 1 keeps generation quick; inflating costs about the same whatever the level.
    build_package(path, "bench", journal, state, fmt=fmt, compresslevel=1)
    return sum(len(v) for v in state.values()) + len(journal)


# -- children: one operation each, timing and peak RSS of their own -------------------------------------------


def _fsync_tree(root: str) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def _extract(package: str, dest: str) -> None:
    if zipfile.is_zipfile(package):
        with zipfile.ZipFile(package) as zf:
            zf.extractall(dest)  # noqa: S202  zipfile drops absolute paths and '..' from the members' names
        return
    with tarfile.open(package) as tf:
        tf.extractall(dest, filter="data")


def child(op: str, package: str, dest: str, size_mb: int, members: int) -> dict[str, Any]:
    started = time.perf_counter()
    detail: dict[str, Any] = {}
    if op == "generate":
        fmt = os.environ.get("BENCH_FORMAT", "tar.gz")
        detail = {"member_bytes": generate(Path(package), size_mb, members, fmt)}
    elif op == "idle":
        # The library is loaded only where measured: the floors' memory and time are the interpreter's alone.
        import recovery.packages  # noqa: F401  # the interpreter and the library, doing nothing
    elif op == "sha256":
        size = max(1, size_mb * 1024 * 1024 // members)
        spent = 0.0
        for index in range(members):  # generation is not timed; hashing is
            data = member_bytes(index, size)
            t = time.perf_counter()
            hashlib.sha256(data).hexdigest()
            spent += time.perf_counter() - t
        started = time.perf_counter() - spent
    elif op == "tarfile":
        _extract(package, dest)
    elif op == "tarfile+fsync":
        _extract(package, dest)
        _fsync_tree(dest)
    elif op == "check":
        # The library is loaded only where measured: the floors' memory and time are the interpreter's alone.
        from recovery.packages import check_package

        report = check_package(package)
        detail = {"accepted": report.accepted, "members": report.members}
    elif op == "restore":
        # The library is loaded only where measured: the floors' memory and time are the interpreter's alone.
        from recovery.packages import restore_package

        report = restore_package(package, dest)
        detail = {"accepted": report.accepted, "members": report.members}
    else:
        raise SystemExit(f"unknown child operation {op}")
    seconds = time.perf_counter() - started
    return {"op": op, "seconds": seconds, "rss_mb": peak_rss_mb(), **detail}


def peak_rss_mb() -> float:
    """This process's peak RSS: getrusage's ru_maxrss, or /proc's VmHWM where it is lower.

    ru_maxrss survives execve on Linux, so a child forked from a large parent would report the parent's peak;
    VmHWM belongs to the new address space. The generator runs in its own child to keep the parent small too.
    """
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    peak = min(peak, int(line.split()[1]) / 1024)
    except OSError:
        pass
    return peak


def _run_child(op: str, package: Path, dest: Path, size_mb: int, members: int) -> dict[str, Any]:
    if dest.exists():
        shutil.rmtree(dest)
    argv = [sys.executable, "-m", "benchmarks.bench_packages", "--child", op, str(package), str(dest)]
    argv += ["--size-mb", str(size_mb), "--members", str(members)]
    out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if dest.exists():
        shutil.rmtree(dest)
    return result


def _warm(package: Path) -> None:
    with open(package, "rb") as fh:  # every measurement reads the archive from the page cache
        while fh.read(8 * 1024 * 1024):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_packages", description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=500, help="member bytes in all (default 500)")
    parser.add_argument("--members", type=int, default=2000, help="state files (default 2,000)")
    parser.add_argument("--format", choices=["tar.gz", "tar", "zip"], default="tar.gz")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of every operation; the best is kept")
    parser.add_argument("--workdir", help="where to generate (default: a new temporary directory)")
    parser.add_argument("--child", nargs=3, metavar=("OP", "PACKAGE", "DEST"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        op, package, dest = args.child
        print(json.dumps(child(op, package, dest, args.size_mb, args.members)))
        return 0

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-packages-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        package = workdir / f"package.{args.format}"
        os.environ["BENCH_FORMAT"] = args.format
        made = _run_child("generate", package, workdir / "out", args.size_mb, args.members)
        total, generated = int(made["member_bytes"]), float(made["seconds"])
        mb = total / 1e6
        print(
            f"package: {args.format}, {args.members} state files + journal + manifest, {mb:.1f} MB of members, "
            f"{package.stat().st_size / 1e6:.1f} MB on disk (generated in {generated:.1f}s)"
        )
        _warm(package)
        # One untimed extraction first: every timed operation then writes into a file system that has just
        # had a 500 MB tree removed, as each one after the first does. The very first extraction after the
        # package is generated follows a spell without deletions and ran up to twice as fast on this VM's
        # ext4 (0.98 s against 2.0 to 2.7 s); kept as the floor's best round, it made one run read 1.83x.
        _run_child("tarfile", package, workdir / "out", args.size_mb, args.members)
        results: dict[str, dict[str, Any]] = {}
        restore_rounds: list[float] = []
        # Rounds of every operation in turn, the best of each kept: a slow spell of this shared machine (its
        # disk above all) then lands on the floors and on check/restore alike, not on whichever ran then.
        for _ in range(args.repeat):
            this_round: dict[str, dict[str, Any]] = {}
            for op in ("idle", "sha256", "tarfile", "tarfile+fsync", "check", "restore"):
                this_round[op] = _run_child(op, package, workdir / "out", args.size_mb, args.members)
                if op not in results or float(this_round[op]["seconds"]) < float(results[op]["seconds"]):
                    results[op] = this_round[op]
            restore_rounds.append(float(this_round["restore"]["seconds"]) / float(this_round["tarfile"]["seconds"]))
        print(f"{'operation':<16} {'seconds':>8} {'MB/s':>8} {'peak RSS MB':>12}")
        for op, r in results.items():
            rate = f"{mb / r['seconds']:8.1f}" if op != "idle" else f"{'-':>8}"
            print(f"{op:<16} {r['seconds']:8.2f} {rate} {r['rss_mb']:12.1f}")
        for op in ("check", "restore"):
            if not results[op].get("accepted"):
                print(f"ERROR: {op} did not accept the package")
                return 1
        check_ratio = results["check"]["seconds"] / results["sha256"]["seconds"]
        restore_ratio = results["restore"]["seconds"] / results["tarfile"]["seconds"]
        durable_ratio = results["restore"]["seconds"] / results["tarfile+fsync"]["seconds"]
        peak = max(results["check"]["rss_mb"], results["restore"]["rss_mb"])
        print(f"check / sha256 floor:          {check_ratio:5.2f}x")
        print(
            f"restore / tarfile floor:       {restore_ratio:5.2f}x  (target <= {RESTORE_TARGET}x: "
            f"{'met' if restore_ratio <= RESTORE_TARGET else 'NOT met'})"
        )
        print(f"restore / tarfile+fsync:       {durable_ratio:5.2f}x")
        print(f"restore / tarfile, each round: {', '.join(f'{r:.2f}x' for r in restore_rounds)}")
        print(
            f"peak RSS (check, restore):     {results['check']['rss_mb']:.1f} MB, {results['restore']['rss_mb']:.1f} MB"
            f"  (target < {RSS_TARGET_MB} MB: {'met' if peak < RSS_TARGET_MB else 'NOT met'}; "
            f"an idle child: {results['idle']['rss_mb']:.1f} MB)"
        )
        return 0
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
