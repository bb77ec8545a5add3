"""A turn's planned-versus-actual timeline: the plan's phases in order, each with every record that committed
it (also on discarded branches, and a commit that broke the phase order where it happened), and the turn's
records on one axis in journal order, dispatches and readbacks with their intents' resolutions, with the
time between records where their stated ``at`` allows.

It reads the turn's records once (the (run, turn, seq) index, at most RECORDS_SHOWN of them) and takes the
rest from the turn page (console.turn_detail.TurnPage): the projection's committed phases, the intents, the
blocking record, the branches' discarded suffixes. Fields come through the store's ``record_public``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from journals.models import JournalRecord
from journals.selectors import record_public

from . import vocabulary
from .runs import RECORD_FIELDS, record_gist, record_url

RECORDS_SHOWN = 500


@dataclass
class Event:
    seq: int
    branch: int
    lsn: int
    kind: str
    url: str
    words: str
    at: str | None
    discarded: bool
    violating: bool = False
    phase: str | None = None
    intent: str | None = None
    resolution: str | None = None
    since_previous: str | None = None  # "+2.0 s" between this record's `at` and the previous one's


@dataclass
class PhaseRow:
    position: int | None  # None: committed but not in the plan
    name: str
    state: str  # committed | resume | blocked | missing | violation | discarded
    commits: list[Event] = field(default_factory=list)
    took: str | None = None  # from the previous phase's commit to this one, by `at`

    @property
    def state_words(self) -> str:
        return {
            "committed": "committed",
            "resume": "resume here",
            "blocked": "held here",
            "next": "next",
            "missing": "not committed",
            "violation": "committed out of order: does not count",
            "discarded": "committed on a discarded branch only",
        }[self.state]


@dataclass
class Timeline:
    phases: list[PhaseRow]
    events: list[Event]
    truncated: bool


def _parse_at(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _between(earlier: str | None, later: str | None) -> str | None:
    a, b = _parse_at(earlier), _parse_at(later)
    if a is None or b is None:
        return None
    seconds = (b - a).total_seconds()
    if seconds < 0:
        return f"{seconds:.1f} s (stated times go back)"
    if seconds < 120:
        return f"+{seconds:.1f} s"
    if seconds < 7200:
        return f"+{seconds / 60:.1f} min"
    return f"+{seconds / 3600:.1f} h"


def turn_timeline(page: Any) -> Timeline:
    """The timeline of the turn of ``page`` (a TurnPage)."""
    turn = page.turn
    discarded_from = {lane.number: lane.discarded_from for lane in page.tree.lanes}
    blocking = page.blocking
    violating_at = (blocking.branch, blocking.lsn) if blocking is not None and blocking.lsn is not None else None
    resolutions = {i.intent_id: i.resolution for i in page.intents}
    rows = list(
        JournalRecord.objects.filter(run_id=turn.run_id, turn=turn.turn_id)
        .only(*RECORD_FIELDS, "line")
        .order_by("seq")[: RECORDS_SHOWN + 1]
    )
    truncated = len(rows) > RECORDS_SHOWN
    events: list[Event] = []
    previous_at: str | None = None
    for r in rows[:RECORDS_SHOWN]:
        f = record_public(r)["record"] or {}
        kind = r.kind or "unknown"
        cut = discarded_from.get(r.branch)
        at = f.get("at") if isinstance(f.get("at"), str) else None
        event = Event(
            seq=r.seq,
            branch=r.branch,
            lsn=r.lsn,
            kind=kind,
            url=record_url(turn.run_id, r.branch, r.lsn),
            words=record_gist(kind, f) or vocabulary.words_for(kind),
            at=at,
            discarded=cut is not None and r.lsn > cut,
            violating=violating_at == (r.branch, r.lsn),
            phase=str(f["phase"]) if kind == "phase_committed" and "phase" in f else None,
            intent=str(f["intent"]) if "intent" in f else None,
            since_previous=_between(previous_at, at),
        )
        if kind == "intent_dispatched" and event.intent is not None:
            event.resolution = resolutions.get(event.intent)
        events.append(event)
        previous_at = at or previous_at
    return Timeline(phases=_phases(page, events), events=events, truncated=truncated)


def _phases(page: Any, events: list[Event]) -> list[PhaseRow]:
    commits: dict[str, list[Event]] = {}
    for e in events:
        if e.phase is not None:
            commits.setdefault(e.phase, []).append(e)
    rows: list[PhaseRow] = []
    blocked = page.held  # the effective state holds it (engine, operator or integrity finding)
    previous_at: str | None = None
    for step in page.steps:
        found = commits.pop(step.name, [])
        if step.state == "committed":
            state = "committed"
        elif any(e.violating for e in found):
            state = "violation"
        elif step.is_resume_point:
            proceeds = page.state is not None and page.state.gate == "proceed"
            state = "blocked" if blocked else ("resume" if proceeds else "next")
        elif found and all(e.discarded for e in found):
            state = "discarded"
        else:
            state = "missing"
        counted = next((e for e in found if not e.discarded and not e.violating), None)
        row = PhaseRow(position=step.position, name=step.name, state=state, commits=found)
        if state == "committed" and counted is not None:
            row.took = _between(previous_at, counted.at)
            previous_at = counted.at or previous_at
        rows.append(row)
    for name, found in commits.items():  # committed, but the plan has no such phase
        rows.append(PhaseRow(position=None, name=name, state="violation", commits=found))
    return rows
