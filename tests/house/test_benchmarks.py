"""`make bench`'s runner gives each benchmark a process of its own, as when it runs alone."""

from __future__ import annotations

import sys
from typing import Any

import pytest

import benchmarks.__main__ as runner


def test_the_runner_gives_each_benchmark_a_process_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def call(argv: list[str], **_: Any) -> int:
        calls.append(argv)
        return 0

    monkeypatch.setattr(runner.subprocess, "call", call)
    assert runner.main(["engine", "bench_imports.py", "--", "--repeat", "1"]) == 0
    assert calls == [
        [sys.executable, "-m", "benchmarks.bench_engine", "--repeat", "1"],
        [sys.executable, "-m", "benchmarks.bench_imports", "--repeat", "1"],
    ]


@pytest.mark.parametrize(("codes", "worst"), [([0, 0], 0), ([0, 2, 1], 2), ([-9, 0], 1)])
def test_the_runner_exits_with_the_worst_and_a_killed_benchmark_counts_as_failed(
    monkeypatch: pytest.MonkeyPatch, codes: list[int], worst: int
) -> None:
    given = iter(codes)
    monkeypatch.setattr(runner.subprocess, "call", lambda argv, **_: next(given))
    names = runner.available()[: len(codes)]
    assert runner.main(names) == worst


def test_the_runner_refuses_an_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["nonesuch"]) == 2
    assert "unknown benchmark(s): nonesuch" in capsys.readouterr().err
