"""Reads the console needs beyond the store's selectors: list filters, capped counts, overview figures.

Every list is a fixed number of queries whatever its length (select_related, one aggregate per page,
correlated subqueries for "latest X of this row"), and every count is capped so that a page over a
million rows costs what a page over a thousand does (tests/console assert both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from audits.models import OperatorAction
from journals.models import Run, Turn
from recovery.models import GateDecision
from recovery.selectors import RUN_LEVEL_CODES

from .forms import RUN_SORTS, TURN_SORTS, UNASSESSED

COUNT_CAP = 10_000
AGES = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}


def _age_q(age: str, field_name: str) -> Q:
    delta = AGES.get(age[2:])
    if delta is None:
        return Q()
    cutoff = timezone.now() - delta
    return Q(**{f"{field_name}__gte": cutoff}) if age.startswith("lt") else Q(**{f"{field_name}__lt": cutoff})


def with_gate(turns: QuerySet[Turn]) -> QuerySet[Turn]:
    """Annotate each turn with the operator decision in force (the latest approve/block/park)."""
    latest = GateDecision.objects.filter(turn=OuterRef("pk")).order_by("-id")
    return turns.annotate(
        gate_kind=Subquery(latest.values("kind")[:1]),
        gate_engine_reason=Subquery(latest.values("engine_reason")[:1]),
    )


def not_approved_now() -> Q:
    """No approval of the engine's current reason is in force. Spelled out for NULLs: a bare
    ``~Q(gate_kind="approve", ...)`` is NULL, so false, for a turn no operator has touched."""
    return (
        Q(gate_kind__isnull=True)
        | ~Q(gate_kind="approve")
        | Q(gate_engine_reason__isnull=True)
        | Q(reason__isnull=True)
        | ~Q(gate_engine_reason=F("reason"))
    )


def turns_filtered(filters: dict[str, Any]) -> QuerySet[Turn]:
    """Turns matching a TurnFilterForm's cleaned data, in the requested order."""
    turns = Turn.objects.select_related("run")
    q = filters.get("q")
    if q:
        turns = turns.filter(Q(turn_id__icontains=q) | Q(run__run_id__icontains=q) | Q(lineage__icontains=q))
    decision = filters.get("decision")
    if decision == UNASSESSED:
        turns = turns.filter(decision__isnull=True)
    elif decision:
        turns = turns.filter(decision=decision)
    if filters.get("reason"):
        turns = turns.filter(reason=filters["reason"])
    if filters.get("status"):
        turns = turns.filter(status=filters["status"])
    if filters.get("run"):
        turns = turns.filter(run__run_id=filters["run"])
    if filters.get("age"):
        turns = turns.filter(_age_q(filters["age"], "updated_at"))
    return turns.order_by(*TURN_SORTS.get(filters.get("sort") or "-updated", TURN_SORTS["-updated"]))


def runs_filtered(filters: dict[str, Any]) -> QuerySet[Run]:
    runs = Run.objects.all()
    if filters.get("q"):
        runs = runs.filter(run_id__icontains=filters["q"])
    state = filters.get("state")
    if state == "blocked":
        runs = runs.filter(blocked_reason__isnull=False)
    elif state == "clear":
        runs = runs.filter(blocked_reason__isnull=True, assessed_seq__isnull=False)
    elif state == UNASSESSED:
        runs = runs.filter(assessed_seq__isnull=True)
    if filters.get("reason"):
        runs = runs.filter(blocked_reason=filters["reason"])
    if filters.get("age"):
        runs = runs.filter(_age_q(filters["age"], "updated_at"))
    return runs.order_by(*RUN_SORTS.get(filters.get("sort") or "-updated", RUN_SORTS["-updated"]))


def capped_count(qs: QuerySet[Any], cap: int = COUNT_CAP) -> tuple[int, bool]:
    """(count, capped): COUNT over at most cap+1 rows, so a huge match costs no more than a large one."""
    n = qs.order_by()[: cap + 1].count()
    return (cap, True) if n > cap else (n, False)


@dataclass
class Page:
    rows: list[Any]
    number: int
    per_page: int
    total: int
    capped: bool
    has_next: bool

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def first_index(self) -> int:
        return (self.number - 1) * self.per_page + 1 if self.rows else 0

    @property
    def last_index(self) -> int:
        return (self.number - 1) * self.per_page + len(self.rows)

    @property
    def num_pages(self) -> int:
        return max(1, -(-self.total // self.per_page))

    @property
    def numbers(self) -> list[int | None]:
        """Page numbers to link: the first, a window around this one, the last (None: a gap). A capped count
        knows no last page, so the window then ends at the next page."""
        last = self.number + 1 if self.capped and self.has_next else self.num_pages
        if self.capped and not self.has_next:
            last = self.number
        wanted = {1, last, *range(self.number - 2, self.number + 3)}
        shown = sorted(n for n in wanted if 1 <= n <= last)
        out: list[int | None] = []
        for n in shown:
            if out and out[-1] is not None and n - out[-1] > 1:  # type: ignore[operator]
                out.append(None)
            out.append(n)
        return out


def page_of(qs: QuerySet[Any], number: int, per_page: int, count_qs: QuerySet[Any] | None = None) -> Page:
    """One page: the rows (one query, per_page+1 to learn whether there is a next) and a capped count
    (over ``count_qs`` when given: the same rows without the per-row annotations a count never needs)."""
    total, capped = capped_count(qs if count_qs is None else count_qs)
    last_page = max(1, -(-total // per_page))
    # A capped count does not know the last page: a page past the cap is asked for, not clamped.
    number = max(1, number) if capped else min(max(1, number), last_page)
    offset = (number - 1) * per_page
    rows = list(qs[offset : offset + per_page + 1])
    return Page(rows[:per_page], number, per_page, total, capped, len(rows) > per_page)


def decorate_runs(runs: list[Run]) -> None:
    """Per-run decision counts for one page of runs: one aggregate query, whatever the page size."""
    counts: dict[int, dict[str, int]] = {r.pk: {} for r in runs}
    rows = Turn.objects.filter(run_id__in=counts).values("run_id", "decision").annotate(n=Count("id")).order_by()
    for row in rows:
        counts[row["run_id"]][row["decision"] or UNASSESSED] = row["n"]
    for r in runs:
        r.decision_counts = counts[r.pk]  # type: ignore[attr-defined]
        r.turn_total = sum(counts[r.pk].values())  # type: ignore[attr-defined]


# --- Overview ---------------------------------------------------------------------------------------


@dataclass
class Bar:
    label: str
    count: int
    key: str
    share: float = 0.0  # of the largest bar, 0..1
    y: int = 0  # SVG geometry, computed here so that the template only places it
    width: float = 0.0


BAR_ROW, BAR_MAX = 26, 280


@dataclass
class Overview:
    decisions: list[Bar] = field(default_factory=list)
    reasons: list[Bar] = field(default_factory=list)
    turn_total: int = 0
    blocked_queue: list[Turn] = field(default_factory=list)
    blocked_total: int = 0
    actions: list[OperatorAction] = field(default_factory=list)
    counted_at: datetime | None = None

    @property
    def decisions_height(self) -> int:
        return chart_height(self.decisions)

    @property
    def reasons_height(self) -> int:
        return chart_height(self.reasons)


def _bars(pairs: list[tuple[str, int]]) -> list[Bar]:
    top = max((n for _, n in pairs), default=0) or 1
    return [
        Bar(
            label="not assessed" if k == UNASSESSED else k.replace("_", " "),
            count=n,
            key=k,
            share=n / top,
            y=i * BAR_ROW,
            width=round(BAR_MAX * n / top, 1),
        )
        for i, (k, n) in enumerate(pairs)
    ]


def chart_height(bars: list[Bar]) -> int:
    return len(bars) * BAR_ROW + 4


DECISION_ORDER = ("blocked", "resume", "finalize", "complete", "discarded", UNASSESSED)


def blocked_queue(limit: int = 20) -> QuerySet[Turn]:
    """Blocked turns that wait for a person, oldest first (an approval of the current reason clears one)."""
    return (
        with_gate(Turn.objects.filter(decision="blocked").select_related("run"))
        .filter(not_approved_now())
        .order_by("updated_at", "id")[:limit]
    )


@dataclass
class TurnCounts:
    """Turns by decision and blocked turns by reason, and when they were counted."""

    by_decision: dict[str, int]
    by_reason: list[tuple[str, int]]
    counted_at: datetime


# Counting 100,000 turns scans an index of 100,000 entries (~20 ms): more than a whole list page costs
# (bench_pages). The counts are kept this long, and recounted sooner whenever the most recently changed turn
# is another one (an assessment or an ingest bumps Turn.updated_at), so they lag only when a write commits
# out of order; the page says when they were counted.
COUNTS_TTL_SECONDS = 60


def _count_turns() -> TurnCounts:
    # One grouped query each, both answered from an index alone: (decision, -updated_at) for the decisions,
    # (reason, -updated_at) for the reasons. The engine gives a reason to blocked turns only (contract,
    # section 6), so "reason IS NOT NULL" is "blocked" without reading the table row of every blocked turn.
    by_decision = {
        (UNASSESSED if d is None else d): n
        for d, n in Turn.objects.order_by().values_list("decision").annotate(n=Count("id")).values_list("decision", "n")
    }
    by_reason = list(
        Turn.objects.filter(reason__isnull=False)
        .order_by()
        .values_list("reason")
        .annotate(n=Count("id"))
        .values_list("reason", "n")
    )
    by_reason.sort(key=lambda pair: (-pair[1], pair[0]))
    return TurnCounts(by_decision=by_decision, by_reason=by_reason, counted_at=timezone.now())


def turn_counts() -> TurnCounts:
    """The overview's counts, from the cache while no turn has changed (at most COUNTS_TTL_SECONDS old)."""
    latest = Turn.objects.order_by("-updated_at", "-id").values_list("id", "updated_at").first()
    key = "console:turn-counts:" + (f"{latest[0]}:{latest[1].timestamp()}" if latest else "none")
    found = cache.get(key)
    if not isinstance(found, TurnCounts):
        found = _count_turns()
        cache.set(key, found, COUNTS_TTL_SECONDS)
    return found


def overview(queue_limit: int = 15, action_limit: int = 10) -> Overview:
    counts = turn_counts()
    decisions = [(d, counts.by_decision.get(d, 0)) for d in DECISION_ORDER]
    queue = list(blocked_queue(queue_limit))
    return Overview(
        decisions=_bars(decisions),
        reasons=_bars([(r or "unknown", n) for r, n in counts.by_reason]),
        turn_total=sum(counts.by_decision.values()),
        blocked_queue=queue,
        blocked_total=counts.by_decision.get("blocked", 0),
        counted_at=counts.counted_at,
        actions=list(
            OperatorAction.objects.select_related("turn", "run").order_by("-created_at", "-id")[:action_limit]
        ),
    )


# --- Bulk decisions ---------------------------------------------------------------------------------

BULK_MAX = 1000
# Blocking reasons no approval can clear: faults of the journal are repaired, indeterminate effects need
# evidence per intent (the turn page asks for it); the bulk confirmation says these are left alone.
UNAPPROVABLE = frozenset(RUN_LEVEL_CODES) | {"effect_indeterminate"}


def bulk_candidates(filters: dict[str, Any], action: str) -> QuerySet[Turn]:
    """The turns of a filter that a bulk action would actually touch (the rest it leaves alone)."""
    turns = with_gate(turns_filtered(filters))
    if action == "approve":
        held_by_engine = Q(decision="blocked") & ~Q(reason__in=UNAPPROVABLE) & not_approved_now()
        held_by_operator = Q(gate_kind__in=("block", "park")) & Q(decision__in=("resume", "finalize"))
        return turns.filter(held_by_engine | held_by_operator)
    # Blocking a finished or discarded turn would change nothing; one already blocked by an operator neither.
    return turns.filter(
        Q(decision__isnull=True) | ~Q(decision__in=("complete", "discarded")),
        Q(gate_kind__isnull=True) | ~Q(gate_kind="block"),
    )
