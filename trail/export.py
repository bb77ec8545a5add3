"""The trail's reads: one filter for the console page, the API and the export; and the streamed export
(JSONL or CSV, one row per OperatorAction in chain order, digests included so that a SIEM can re-check the
chain itself). The export is an act of its own: ``trail_export`` records a ``trail_export`` row (with the
filters) before the first byte is sent."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from journals.access import RunScope, run_scope
from journals.actors import Actor
from kernel.errors import ServiceError
from kernel.via import VIA
from trail.models import OPERATOR_ACTION_KINDS, OperatorAction
from trail.services import operator_action_record

EXPORT_FORMATS = ("jsonl", "csv")
FILTERS = ("kind", "actor", "run", "via", "since", "until")
COLUMNS = ("seq", "created_at", "actor_name", "via", "kind", "run", "turn", "reason", "before", "after",
           "prev_digest", "digest")


class TrailQueryError(ServiceError):
    pass


def _when(value: str, name: str) -> datetime:
    parsed = parse_datetime(value)
    if parsed is None or parsed.tzinfo is None:
        raise TrailQueryError(400, "filter_invalid", f"{name} must be an ISO 8601 time with its zone")
    return parsed


def trail_filters(params: Mapping[str, Any]) -> dict[str, str]:
    """The filters given, checked (a typed 400 for a bad one): kind, actor (exact name), run (run id),
    via, since and until (ISO 8601 with a zone)."""
    out: dict[str, str] = {}
    for name in FILTERS:
        value = params.get(name)
        if not value:
            continue
        value = str(value)[:200]
        if name == "kind" and value not in OPERATOR_ACTION_KINDS:
            raise TrailQueryError(400, "filter_invalid", "kind is not a trail kind")
        if name == "via" and value not in VIA:
            raise TrailQueryError(400, "filter_invalid", f"via must be one of {', '.join(VIA)}")
        if name in ("since", "until"):
            _when(value, name)
        out[name] = value
    return out


def trail_rows(filters: Mapping[str, str], *, scope: RunScope) -> QuerySet[OperatorAction]:
    """The trail rows a filter names, of ``scope``'s runs (a row about no run only when it covers every run)."""
    rows = OperatorAction.objects.select_related("run", "turn").filter(scope.q("run__run_id"))
    if "kind" in filters:
        rows = rows.filter(kind=filters["kind"])
    if "actor" in filters:
        rows = rows.filter(actor_name=filters["actor"])
    if "run" in filters:
        rows = rows.filter(run__run_id=filters["run"])
    if "via" in filters:
        rows = rows.filter(via=filters["via"])
    if "since" in filters:
        rows = rows.filter(created_at__gte=_when(filters["since"], "since"))
    if "until" in filters:
        rows = rows.filter(created_at__lt=_when(filters["until"], "until"))
    return rows


def as_record(row: OperatorAction) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "created_at": row.created_at.isoformat(),
        "actor_name": row.actor_name,
        "via": row.via,
        "kind": row.kind,
        "run": row.run.run_id if row.run else None,
        "turn": row.turn.turn_id if row.turn else None,
        "reason": row.reason,
        "before": row.before,
        "after": row.after,
        "prev_digest": row.prev_digest,
        "digest": row.digest,
    }


def _chunks(filters: Mapping[str, str], through: int | None, scope: RunScope) -> Iterator[OperatorAction]:
    after = 0
    base = trail_rows(filters, scope=scope).order_by("seq")
    if through is not None:
        base = base.filter(seq__lte=through)
    while True:
        rows = list(base.filter(seq__gt=after)[:1000])
        if not rows:
            return
        yield from rows
        after = rows[-1].seq


def trail_stream(
    filters: Mapping[str, str], fmt: str, through: int | None = None, *, scope: RunScope
) -> Iterator[bytes]:
    """The rows as JSONL (one object a line) or CSV (a header, before/after as JSON text), in seq order."""
    if fmt == "jsonl":
        for row in _chunks(filters, through, scope):
            yield (json.dumps(as_record(row), sort_keys=True, ensure_ascii=False) + "\n").encode()
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    for row in _chunks(filters, through, scope):
        record = as_record(row)
        writer.writerow(
            [json.dumps(record[c], sort_keys=True, ensure_ascii=False) if c in ("before", "after") else
             ("" if record[c] is None else record[c]) for c in COLUMNS]
        )
        yield buffer.getvalue().encode()
        buffer.seek(0)
        buffer.truncate()
    if buffer.getvalue():
        yield buffer.getvalue().encode()


def trail_export(*, actor: Actor, params: Mapping[str, Any], fmt: str) -> Iterator[bytes]:
    """Record the export (``trail_export``, with its filters), then return the stream of its rows, which
    ends at the export's own row: what was sent is what the row says was asked, whatever is written
    while it streams."""
    if fmt not in EXPORT_FORMATS:
        raise TrailQueryError(400, "format_invalid", f"format must be one of {', '.join(EXPORT_FORMATS)}")
    filters = trail_filters(params)
    with transaction.atomic():
        recorded = operator_action_record(
            actor=actor, kind="trail_export", reason="trail exported", after={"format": fmt, "filters": filters}
        )
    return trail_stream(filters, fmt, through=recorded.seq, scope=run_scope(user=actor))
