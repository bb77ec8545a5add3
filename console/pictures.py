"""Pictures where people would rather look than read: a run's timeline, the held age on the overview and a
repair's preview, each laid out here for an inline SVG the server draws (templates/console/_run_timeline.html,
_held_age.html, _repair_picture.html). No script and nothing from another host, like the fork tree
(console/forktree.py); every picture has a <title>, an aria-label and the same facts as text beside it.

- The run timeline draws each turn as a bar over the run's records, coloured by its effective state
  (recovery/state.py), with a tick where it dispatched an intent and a dot where one was read back. Its x axis
  is record order (``seq``, the order the records came in), not their stated times: a writer's ``at`` is
  informational (docs/contract.md) and an import's may be missing. A long run shows its held turns and its
  latest ones, at most ``TIMELINE_TURNS``, and says so.
- The held age is how long the oldest held turn has waited, hour by hour over the last day. It is read from
  the turns held now and when each entered its held state (``TurnEffective.since``): a turn released since
  is not in it, so a past point is a lower bound (docs/console.md, "Pictures").
- The repair preview is a bar per branch of the records the repair keeps and those it sets aside (a
  supersede sets aside every stored record and keeps the corrected journal's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Min, Q
from django.utils import timezone

from journals.access import RunScope
from journals.models import JournalRecord, Run, Turn, TurnEffective
from recovery.state import HOLD

from .links import url_former

WIDTH, LEFT, RIGHT, TOP, ROW = 760, 150, 16, 26, 24
AXIS_TICKS = 5
TIMELINE_TURNS = 20  # the turns a run's timeline draws at most
TIMELINE_MARKS = 2000  # the dispatches and readbacks it reads at most
DISPATCH, READBACK = "intent_dispatched", "effect_observed"


@dataclass
class Tick:
    x: float
    label: str


def _ticks(lo: int, hi: int, x_of: Any) -> list[Tick]:
    """Evenly spaced whole numbers from ``lo`` to ``hi`` (each once)."""
    values = sorted({round(lo + (hi - lo) * i / (AXIS_TICKS - 1)) for i in range(AXIS_TICKS)}) if hi > lo else [lo]
    return [Tick(x_of(v), str(v)) for v in values]


# --- The run timeline --------------------------------------------------------------------------------------


@dataclass
class TimelineMark:
    x: float
    kind: str  # "dispatch" | "readback"
    seq: int


@dataclass
class TimelineBar:
    turn: Turn
    label: str  # the source's name of an imported turn, else its id
    state: str  # the effective state's key, "unassessed" before the first assessment
    state_words: str
    held: bool
    y: int
    first_seq: int = 0
    last_seq: int = 0
    records: int = 0
    x0: float = 0.0
    x1: float = 0.0
    url: str = ""
    marks: list[TimelineMark] = field(default_factory=list)

    @property
    def w(self) -> float:
        return round(self.x1 - self.x0, 1)

    @property
    def dispatches(self) -> int:
        return sum(1 for m in self.marks if m.kind == "dispatch")

    @property
    def readbacks(self) -> int:
        return sum(1 for m in self.marks if m.kind == "readback")


@dataclass
class RunTimeline:
    bars: list[TimelineBar]
    total: int  # the run's turns
    ticks: list[Tick]
    marks_capped: bool
    width: int = WIDTH
    height: int = TOP
    left: int = LEFT

    @property
    def bounded(self) -> bool:
        return len(self.bars) < self.total

    def name(self, names: dict[str, str]) -> None:
        """Label the bars of an imported run's turns with their names in the source's words."""
        for bar in self.bars:
            bar.label = names.get(bar.turn.turn_id) or bar.label


def _chosen(run: Run, limit: int) -> list[Turn]:
    """The held turns first (oldest planned first), then the latest planned, at most ``limit``, in journal
    order. Two queries, whatever the run's size."""
    held = list(
        Turn.objects.filter(run=run, effective__gate=HOLD)
        .select_related("effective")
        .order_by("first_seq", "id")[:limit]
    )
    latest = list(Turn.objects.filter(run=run).select_related("effective").order_by("-first_seq", "-id")[:limit])
    seen = {t.pk for t in held}
    chosen = held + [t for t in latest if t.pk not in seen]
    return sorted(chosen[:limit], key=lambda t: (t.first_seq, t.pk))


def run_timeline(run: Run, *, total: int, limit: int = TIMELINE_TURNS) -> RunTimeline:
    """The run page's timeline: four queries (held turns, latest turns, their record spans, their dispatches
    and readbacks), whatever the run's size."""
    turns = _chosen(run, limit)
    if not turns:
        return RunTimeline(bars=[], total=total, ticks=[], marks_capped=False)
    ids = [t.turn_id for t in turns]
    spans = {
        row["turn"]: row
        for row in JournalRecord.objects.filter(run=run, turn__in=ids)
        .values("turn")
        .annotate(first=Min("seq"), last=Max("seq"), n=Count("id"))
        .order_by()
    }
    found = list(
        JournalRecord.objects.filter(run=run, turn__in=ids, kind__in=(DISPATCH, READBACK))
        .order_by("seq")
        .values_list("turn", "seq", "kind")[: TIMELINE_MARKS + 1]
    )
    lo = min((s["first"] for s in spans.values()), default=1)
    hi = max((s["last"] for s in spans.values()), default=1)
    span = max(1, hi - lo)

    def x_of(seq: int) -> float:
        return round(LEFT + (seq - lo) / span * (WIDTH - LEFT - RIGHT), 1)

    turn_url = url_former("console:turn")
    bars: list[TimelineBar] = []
    by_turn: dict[str, TimelineBar] = {}
    for i, t in enumerate(turns):
        effective = getattr(t, "effective", None)
        state = str(effective.state) if effective is not None else "unassessed"
        words = str(effective.get_state_display()) if effective is not None else "not yet assessed"
        bar = TimelineBar(
            turn=t,
            label=t.turn_id,
            state=state,
            state_words=words,
            held=effective is not None and effective.gate == HOLD,
            y=TOP + i * ROW,
            url=turn_url(pk=t.pk),
        )
        s = spans.get(t.turn_id)
        if s is not None:
            bar.first_seq, bar.last_seq, bar.records = s["first"], s["last"], s["n"]
            bar.x0, bar.x1 = x_of(s["first"]), max(x_of(s["last"]), x_of(s["first"]) + 3)
        bars.append(bar)
        by_turn[t.turn_id] = bar
    for turn_id, seq, kind in found[:TIMELINE_MARKS]:
        by_turn[str(turn_id)].marks.append(TimelineMark(x_of(seq), "dispatch" if kind == DISPATCH else "readback", seq))
    return RunTimeline(
        bars=bars,
        total=total,
        ticks=_ticks(lo, hi, x_of),
        marks_capped=len(found) > TIMELINE_MARKS,
        height=TOP + len(bars) * ROW + 8,
    )


# --- The held age ------------------------------------------------------------------------------------------

HELD_AGE_HOURS = 24
HELD_AGE_CAP = 10_000  # held turns read at most, oldest first: the oldest decides every point
AGE_TOP, AGE_BOTTOM, AGE_HEIGHT, AGE_LEFT = 18, 26, 200, 56


@dataclass
class AgePoint:
    at: datetime
    age: timedelta | None  # None: no turn held now had entered its held state yet
    held: int  # turns held now that were already held then
    x: float = 0.0
    y: float = 0.0

    @property
    def age_words(self) -> str:
        return duration_words(self.age) if self.age is not None else "none held"


def duration_words(age: timedelta) -> str:
    minutes = int(age.total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {mins} min" if hours else f"{mins} min"


@dataclass
class HeldAge:
    points: list[AgePoint]
    held_now: int
    capped: bool  # more held turns than were read: counts are "at least"
    max_hours: float
    ticks: list[Tick]  # the y axis, in hours
    width: int = WIDTH
    height: int = AGE_HEIGHT
    left: int = AGE_LEFT
    baseline: int = AGE_HEIGHT - AGE_BOTTOM

    @property
    def now(self) -> AgePoint:
        return self.points[-1]

    @property
    def line(self) -> str:
        """The SVG polyline's points where some turn was held."""
        return " ".join(f"{p.x},{p.y}" for p in self.points if p.age is not None)

    @property
    def table_points(self) -> list[AgePoint]:
        """The text alternative's rows: every fourth hour, and now."""
        return [p for i, p in enumerate(self.points) if i % 4 == 0 or i == len(self.points) - 1]


def held_age(*, scope: RunScope, now: datetime | None = None, hours: int = HELD_AGE_HOURS) -> HeldAge:
    """How long the oldest held turn of ``scope``'s runs had waited at each of the last ``hours`` hours and
    now. One query along the held queue's index (gate, since): over the oldest HELD_AGE_CAP + 1 held turns,
    the oldest start and, for each hour, how many had started by then, counted in the database. Reading
    their times instead costs the overview a parse of up to 10,001 timestamps on every view, more than all
    its other reads together (``python -m benchmarks.bench_pages``: the overview)."""
    now = now or timezone.now()
    marks = [now - timedelta(hours=hours - k) for k in range(hours + 1)]
    oldest_first = TurnEffective.objects.filter(scope.q("run__run_id"), gate=HOLD).order_by("since", "turn_id")[
        : HELD_AGE_CAP + 1
    ]
    found = oldest_first.aggregate(
        oldest=Min("since"),
        n=Count("since"),
        **{f"by{k}": Count("since", filter=Q(since__lte=at)) for k, at in enumerate(marks)},
    )
    capped = found["n"] > HELD_AGE_CAP
    points = []
    for k, at in enumerate(marks):
        held = min(found[f"by{k}"], HELD_AGE_CAP)  # the oldest HELD_AGE_CAP: those started by ``at`` come first
        points.append(AgePoint(at=at, age=at - found["oldest"] if held else None, held=held))
    ages = [p.age.total_seconds() / 3600 for p in points if p.age is not None]
    top = max([1.0, *ages])
    step = (WIDTH - AGE_LEFT - RIGHT) / hours
    plot = AGE_HEIGHT - AGE_TOP - AGE_BOTTOM
    for k, p in enumerate(points):
        p.x = round(AGE_LEFT + k * step, 1)
        hours_waited = p.age.total_seconds() / 3600 if p.age is not None else 0.0
        p.y = round(AGE_TOP + plot * (1 - hours_waited / top), 1)
    ticks = [Tick(round(AGE_TOP + plot * (1 - f), 1), f"{top * f:.1f} h") for f in (0.0, 0.5, 1.0)]
    return HeldAge(points=points, held_now=min(found["n"], HELD_AGE_CAP), capped=capped, max_hours=top, ticks=ticks)


# --- The repair preview ------------------------------------------------------------------------------------

REPAIR_LEFT = 150


@dataclass
class RepairRow:
    label: str
    kept: int
    aside: int
    y: int
    kept_w: float = 0.0
    aside_w: float = 0.0

    @property
    def aside_x(self) -> float:
        return REPAIR_LEFT + self.kept_w


@dataclass
class RepairPicture:
    rows: list[RepairRow]
    kind: str
    width: int = WIDTH
    height: int = TOP
    left: int = REPAIR_LEFT

    @property
    def kept(self) -> int:
        return sum(r.kept for r in self.rows)

    @property
    def aside(self) -> int:
        return sum(r.aside for r in self.rows)


def repair_picture(*, run: Run, repair: dict[str, Any]) -> RepairPicture:
    """The preview of ``repair`` (its summary: ``kind``, ``through_seq``, ``at_seq``, ``replacement_records``)
    as a bar per branch: the stored records it keeps, then those it sets aside. One query."""
    through = repair.get("through_seq")
    keep_through = int(through) if isinstance(through, int) else 0  # a supersede keeps no stored record
    at_seq = repair.get("at_seq")
    upto = Q(seq__lte=int(at_seq)) if isinstance(at_seq, int) else Q()
    rows = [
        RepairRow(label=f"branch {b}", kept=kept, aside=aside, y=0)
        for b, kept, aside in JournalRecord.objects.filter(upto, run=run)
        .values("branch")
        .annotate(kept=Count("id", filter=Q(seq__lte=keep_through)), aside=Count("id", filter=Q(seq__gt=keep_through)))
        .order_by("branch")
        .values_list("branch", "kept", "aside")
    ]
    replacement = repair.get("replacement_records")
    if repair.get("kind") == "supersede" and isinstance(replacement, int):
        rows.append(RepairRow(label="corrected journal", kept=replacement, aside=0, y=0))
    widest = max([1, *(r.kept + r.aside for r in rows)])
    scale = (WIDTH - REPAIR_LEFT - RIGHT) / widest
    for i, r in enumerate(rows):
        r.y = TOP + i * ROW
        r.kept_w = round(r.kept * scale, 1)
        r.aside_w = round(r.aside * scale, 1)
    return RepairPicture(rows=rows, kind=str(repair.get("kind") or ""), height=TOP + len(rows) * ROW + 8)
