"""`python manage.py import_history PATH_OR_URL --from temporal|langgraph|stepfunctions|dbos --out JOURNAL
[--run RUN] [--effects MAP.json] [--json]`

Stable (imports.md): scripts depend on the JSON shape and the exit codes. Exit 0 when written; 2 when the
input cannot be read as a history of that kind, the effect map is not one, or the arguments are wrong,
with one line on stderr and nothing written. A journal is written atomically (a temporary file beside
the target, fsynced, then renamed over it), so the target never holds a partial file; for LangGraph and
DBOS, `--out` is a folder and each thread's or workflow's run gets `<run>.jsonl` in it, every one written
before any is renamed into place. `--from dbos` also takes a PostgreSQL URL instead of a file.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from recovery.imports.importers import (
    SOURCES,
    ClassMap,
    ImportRefused,
    effect_map_parse,
    history_import_file,
    history_import_url,
)

_URL_SCHEMES = ("postgres://", "postgresql://")
_FOLDER_SOURCES = ("langgraph", "dbos")


class _UsageError(Exception):
    pass


def _raise_usage(message: str) -> Any:
    raise _UsageError(message)


def _effects(path: str | None) -> ClassMap:
    if path is None:
        return effect_map_parse({})
    try:
        with open(path, "rb") as fh:
            obj = json.loads(fh.read())
    except OSError:
        raise _UsageError(f"cannot read the effect map {path}") from None
    except ValueError:
        raise _UsageError("the effect map is not JSON") from None
    try:
        return effect_map_parse(obj)
    except ImportRefused as exc:
        raise _UsageError(exc.message) from None


def _safe_file_name(run: str) -> bool:
    return bool(run) and "/" not in run and "\x00" not in run and run not in (".", "..") and len(run) <= 200


def _write_temp(folder: Path, data: bytes) -> str:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".import-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(targets: list[tuple[Path, bytes]]) -> None:
    """Each target's bytes to a temporary file beside it, fsynced; then every one renamed into place and
    the folders fsynced. A failure before the renames leaves no file behind."""
    temps: list[tuple[str, Path]] = []
    try:
        for target, data in targets:
            temps.append((_write_temp(target.parent, data), target))
    except BaseException:
        for tmp, _target in temps:
            os.unlink(tmp)
        raise
    for tmp, target in temps:
        os.replace(tmp, target)
    for folder in sorted({target.parent for _tmp, target in temps}):
        _fsync_dir(folder)


class Command(BaseCommand):
    help = "Import a Temporal, LangGraph, Step Functions or DBOS history as turn journals."
    # A pure file-to-file command, like assess_journal: system checks have nothing to say about it.
    requires_system_checks: list[str] = []

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.error = _raise_usage  # type: ignore[method-assign]  # the contract wants one line, not usage
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path")
        parser.add_argument("--from", dest="source", required=True, choices=SOURCES)
        parser.add_argument("--out", required=True, metavar="JOURNAL")
        parser.add_argument("--run", default=None, help="the run's name (LangGraph: the prefix of each run)")
        parser.add_argument("--effects", default=None, metavar="MAP.json")
        parser.add_argument("--json", action="store_true", help="print the stable JSON object")

    def run_from_argv(self, argv: list[str]) -> None:
        try:
            super().run_from_argv(argv)
        except _UsageError as exc:
            sys.stderr.write(f"import_history: {exc}\n")
            sys.exit(2)

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except _UsageError as exc:
            sys.stderr.write(f"import_history: {exc}\n")
            sys.exit(2)

    def handle(self, *args: Any, **options: Any) -> None:
        source: str = options["source"]
        raw_path: str = options["path"]
        is_url = raw_path.startswith(_URL_SCHEMES)
        path = Path(raw_path)
        out = Path(options["out"])
        effects = _effects(options["effects"])
        if is_url and source != "dbos":
            raise _UsageError("only --from dbos reads a database URL")
        if not is_url and (not path.is_file() or not os.access(path, os.R_OK)):
            raise _UsageError(f"cannot read {path}: not a readable file")
        if source in _FOLDER_SOURCES:
            if not out.is_dir():
                raise _UsageError(f"--out {out} is not a folder (a {source} database holds several runs)")
        elif out.is_dir() or not out.parent.is_dir():
            raise _UsageError(f"--out {out} is a folder or has no parent folder")
        try:
            if is_url:
                result = history_import_url(source=source, url=raw_path, effects=effects, run=options["run"])
            else:
                result = history_import_file(source=source, path=path, effects=effects, run=options["run"])
        except ImportRefused as exc:
            raise _UsageError(f"not a {source} history: {exc.message}") from None
        except OSError:
            # A URL's text may hold a password: the message names the database only as "the database".
            raise _UsageError("cannot read the database" if is_url else f"cannot read {path}") from None
        targets: list[tuple[Path, bytes]] = []
        for run in result.runs:
            if source in _FOLDER_SOURCES:
                if not _safe_file_name(run.run):
                    raise _UsageError("a run name cannot be a file name (it holds '/' or is too long)")
                targets.append((out / f"{run.run}.jsonl", run.journal))
            else:
                targets.append((out, run.journal))
        try:
            write_atomically(targets)
        except OSError as exc:
            raise _UsageError(f"cannot write {out}: {exc.strerror or 'error'}") from None
        summary = {
            "from": source,
            "runs": [
                {"run": r.run, "records": r.records, "out": str(t)}
                for r, (t, _d) in zip(result.runs, targets, strict=True)
            ],
            "skipped": dict(result.skipped),
        }
        if options["json"]:
            sys.stdout.write(json.dumps(summary, ensure_ascii=False) + "\n")
            return
        for r, (target, _data) in zip(result.runs, targets, strict=True):
            sys.stdout.write(f"{r.run}: {r.records} records -> {target}\n")
        if result.skipped:
            skipped = ", ".join(f"{k} {v}" for k, v in result.skipped.items())
            sys.stdout.write(f"skipped: {skipped}\n")
