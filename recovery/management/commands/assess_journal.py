"""`python manage.py assess_journal PATH --json [--expect BRANCH:LSN] [--evidence INTENT=happened|not_happened]`

Stable (docs/contract.md, section 7): scripts outside the project depend on the JSON shape and the exit
codes: 0 whatever the decisions, 2 when the file cannot be read at all or the arguments are wrong, with
one line on stderr. Without --json it prints a short table (and a progress bar on a terminal).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from engine import Evidence, JournalUnreadable, assess


class _UsageError(Exception):
    pass


def _raise_usage(message: str) -> Any:
    raise _UsageError(message)


def _parse_expect(values: list[str]) -> dict[int, int]:
    out: dict[int, int] = {}
    for raw in values:
        branch, sep, lsn = raw.partition(":")
        try:
            b, n = int(branch), int(lsn)
        except ValueError:
            raise _UsageError(f"--expect takes BRANCH:LSN, got {raw!r}") from None
        if not sep or b < 0 or n < -1:
            raise _UsageError(f"--expect takes BRANCH:LSN with BRANCH >= 0 and LSN >= -1, got {raw!r}")
        out[b] = n
    return out


def _parse_evidence(values: list[str]) -> dict[str, Evidence]:
    out: dict[str, Evidence] = {}
    for raw in values:
        intent, sep, finding = raw.rpartition("=")
        if not sep or not intent:
            raise _UsageError(f"--evidence takes INTENT=happened|not_happened, got {raw!r}")
        try:
            out[intent] = Evidence(finding)
        except ValueError:
            raise _UsageError(f"--evidence finding must be happened or not_happened, got {finding!r}") from None
    return out


def _progress_lines(path: Path) -> Iterator[bytes]:
    """Lines of the file with a progress bar on stderr (a terminal only), by bytes read."""
    total = max(path.stat().st_size, 1)
    done = 0
    last = -1
    with open(path, "rb") as fh:
        for raw in fh:
            done += len(raw)
            pct = done * 100 // total
            if pct != last:
                last = pct
                bar = "#" * (pct // 4)
                sys.stderr.write(f"\rassessing [{bar:<25}] {pct:3d}%")
                sys.stderr.flush()
            yield raw[:-1] if raw.endswith(b"\n") else raw
    sys.stderr.write("\n")


class Command(BaseCommand):
    help = "Assess a turn journal (JSONL) and print one decision per turn."
    # A pure file-to-JSON command: Django's system checks (URLconf, models, databases) have nothing to say
    # about a journal, and a broken check elsewhere in the project must not turn the contract's exit codes
    # (0, or 2 with one line on stderr) into a traceback.
    requires_system_checks: list[str] = []

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.error = _raise_usage  # type: ignore[method-assign]  # argparse prints usage; the contract wants one line
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path")
        parser.add_argument("--json", action="store_true", help="print the stable JSON object")
        parser.add_argument("--expect", action="append", default=[], metavar="BRANCH:LSN")
        parser.add_argument("--evidence", action="append", default=[], metavar="INTENT=happened|not_happened")

    def run_from_argv(self, argv: list[str]) -> None:
        try:
            super().run_from_argv(argv)
        except _UsageError as exc:
            sys.stderr.write(f"assess_journal: {exc}\n")
            sys.exit(2)

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except _UsageError as exc:
            sys.stderr.write(f"assess_journal: {exc}\n")
            sys.exit(2)

    def handle(self, *args: Any, **options: Any) -> None:
        expect = _parse_expect(options["expect"])
        evidence = _parse_evidence(options["evidence"])
        path = Path(options["path"])
        if not path.is_file() or not os.access(path, os.R_OK):
            raise _UsageError(f"cannot read {path}: not a readable file")
        use_bar = not options["json"] and sys.stderr.isatty()
        try:
            source: Any = (lambda: _progress_lines(path)) if use_bar else path
            result = assess(source, expect=expect, evidence=evidence)
        except (JournalUnreadable, OSError) as exc:
            raise _UsageError(str(exc)) from None
        if options["json"]:
            sys.stdout.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
            return
        out = sys.stdout
        out.write(f"run {result.run}  live branch {result.live_branch}  records {result.records}\n")
        for v in result.violations:
            out.write(f"  violation {v.code:<24} branch={v.branch} lsn={v.lsn} turn={v.turn}: {v.detail}\n")
        out.write(f"{'turn':<24} {'decision':<10} {'resume_from':<12} {'reason':<24} completed\n")
        for t in result.turns:
            out.write(
                f"{t.turn:<24} {t.decision.value:<10} {t.resume_from or '-':<12} {t.reason or '-':<24} "
                f"{len(t.completed_phases)}/{len(t.phases)}\n"
            )
