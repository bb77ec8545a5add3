"""Importers: another runtime's own history in, turn journals out (imports.md; docs/imports.md).

Pure functions of the source's bytes and the effect map, beside the engine and, like it, without Django
(tests/engine/test_purity.py). The same inputs give byte-identical journals. No payload, input, output,
prompt or channel value is ever copied into a journal: only sha256 digests of them.

    history_import(*, source, data, effects, run=None, progress=None) -> ImportResult
    history_import_file(*, source, path, effects, run=None, progress=None) -> ImportResult

Memory is bounded by the source's size, not by its parse: a 50 MB Temporal history is split into its
events and each is parsed alone (recovery/imports/importers/temporal.py).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from . import dbos, langgraph, stepfunctions, temporal
from ._common import (
    EFFECT_CLASSES,
    ClassMap,
    ConvertedRun,
    ImportRefused,
    ImportResult,
    Progress,
    effect_map_parse,
)

SOURCES = ("temporal", "langgraph", "stepfunctions", "dbos")


def _sha256(data: Any) -> str:
    return hashlib.sha256(data).hexdigest()


def history_import(
    *,
    source: str,
    data: bytes,
    effects: ClassMap,
    run: str | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """The journals of one source file. ``run`` names the run (Temporal, Step Functions) or the prefix of
    each thread's or workflow's run (LangGraph, DBOS). Raises ImportRefused (``history_invalid``) for what
    is not a history of that kind, ``source_unknown`` for a source not in SOURCES."""
    if source not in SOURCES:
        raise ImportRefused("source_unknown", f"the source must be one of {', '.join(SOURCES)}")
    if run is not None and not run:
        raise ImportRefused("history_invalid", "the run name is empty")
    file_sha = _sha256(data)
    if source == "temporal":
        journal, skipped, events = temporal.convert(
            data, effects=effects, run=run, file_sha=file_sha, progress=progress
        )
        runs = [journal.result()]
    elif source == "stepfunctions":
        journal, skipped, events = stepfunctions.convert(
            data, effects=effects, run=run, file_sha=file_sha, progress=progress
        )
        runs = [journal.result()]
    elif source == "dbos":
        journals, skipped, events = dbos.convert(data, effects=effects, prefix=run, progress=progress)
        runs = [j.result() for j in journals]
    else:
        journals, skipped, events = langgraph.convert(data, effects=effects, prefix=run, progress=progress)
        runs = [j.result() for j in journals]
    return ImportResult(source=source, runs=runs, skipped=dict(sorted(skipped.items())), events=events, sha256=file_sha)


def history_import_url(
    *,
    source: str,
    url: str,
    effects: ClassMap,
    run: str | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """The journals of a database named by its URL: a DBOS PostgreSQL system database (``source`` must be
    ``dbos``). ``sha256`` is that of what was read. OSError when the database cannot be read."""
    if source != "dbos":
        raise ImportRefused("source_unknown", "only a dbos history is read from a database URL")
    if run is not None and not run:
        raise ImportRefused("history_invalid", "the run name is empty")
    workflows, operations = dbos.read_postgres(url)
    journals, skipped, events = dbos.convert_rows(workflows, operations, effects=effects, prefix=run, progress=progress)
    return ImportResult(
        source=source,
        runs=[j.result() for j in journals],
        skipped=dict(sorted(skipped.items())),
        events=events,
        sha256=dbos.rows_digest(workflows, operations),
    )


def history_import_file(
    *,
    source: str,
    path: str | os.PathLike[str],
    effects: ClassMap,
    run: str | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """``history_import`` of a file. OSError when it cannot be read."""
    with open(path, "rb") as fh:
        data = fh.read()
    return history_import(source=source, data=data, effects=effects, run=run, progress=progress)


__all__ = [
    "EFFECT_CLASSES",
    "SOURCES",
    "ClassMap",
    "ImportRefused",
    "ImportResult",
    "ConvertedRun",
    "effect_map_parse",
    "history_import",
    "history_import_file",
    "history_import_url",
]
