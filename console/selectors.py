"""Reads the console needs beyond the store's selectors: list filters, capped counts, overview figures.

Every read takes the reader's ``scope`` (journals.access.run_scope: the runs of their teams) and keeps
to it, counts included. Every list is a fixed number of queries whatever its length (select_related, one
aggregate per page), and every count is capped so that a page over a million rows costs what a page over
a thousand does (tests/console assert both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db.models import Case, CharField, Count, Exists, OuterRef, QuerySet, Value, When
from django.utils import timezone

from journals.access import RunScope
from journals.models import RUN_STATUS_ORDER, Run, Turn, TurnEffective, TurnState, run_status_q, run_status_rank
from recovery import services
from recovery.state import (
    APPROVAL_NEEDS,
    FILTER_NAMES,
    HOLD,
    STATE_GROUPS,
    UNASSESSED,
    state_counts,
    states_matching,
    turns_matching,
)
from recovery.state import age_q as age_q
from recovery.state import bulk_candidates as state_bulk_candidates
from trail.models import OperatorAction

from . import vocabulary
from .forms import RUN_SORTS, TURN_SORTS

COUNT_CAP = 10_000


def turns_filtered(filters: dict[str, Any], *, scope: RunScope) -> QuerySet[Turn]:
    """Turns of ``scope``'s runs matching a TurnFilterForm's cleaned data (recovery.state.turns_matching:
    the same filter the bulk decisions and the bulk API use), in the requested order."""
    turns = turns_matching(filters=filters, scope=scope)
    return turns.order_by(*TURN_SORTS.get(filters.get("sort") or "-updated", TURN_SORTS["-updated"]))


# Orders Turn's own indexes keep (turn_updated_id, the created_at index): a page of them is read in order.
INDEXED_TURN_SORTS = frozenset({"-updated", "updated", "-created", "created"})
# Filters on the effective state (TurnEffective's columns, joined to each turn).
STATE_FILTERS = ("state", "decision", "reason")
# Matches from which a page is read along the order's index: with this many, a page of 50 is found within
# the first few thousand entries of a 100,000-turn index, while sorting them all reads every one.
DENSE_MATCHES = 1_000


def turns_page(filters: dict[str, Any], number: int, per_page: int, *, scope: RunScope) -> Page:
    """One page of the turns list (turns_filtered). The count comes first, and says how to read the rows:
    a filter on the state that many turns match (DENSE_MATCHES) reads the turns in the order's index and
    keeps each one that matches, so a page costs a few index entries per row; fewer matches are found
    through the state's own index and sorted, which then costs no more than they are."""
    matching = turns_filtered(filters, scope=scope)
    states = states_matching(filters=filters, scope=scope)
    total, capped = capped_count(matching if states is None else states)
    rows = matching
    sort = filters.get("sort") or "-updated"
    if total >= DENSE_MATCHES and sort in INDEXED_TURN_SORTS and any(filters.get(k) for k in STATE_FILTERS):
        rows = (
            Turn.objects.select_related("run", "effective", "assignment__assignee")
            .filter(Exists(matching.order_by().filter(pk=OuterRef("pk"))))
            .order_by(*TURN_SORTS[sort])
        )
    counted_at = None
    if capped:
        known = counted_total(filters, scope=scope)
        if known is not None and known[0] > COUNT_CAP:
            (total, counted_at), capped = known, False
    page = page_of(rows, number, per_page, counted=(total, capped))
    page.counted_at = counted_at
    return page


# Filters the overview's counts (turn_counts) do not break down by: a list so filtered keeps its capped count.
UNCOUNTED_FILTERS = tuple(name for name in (*FILTER_NAMES, "assignee") if name != "state")


def counted_total(filters: dict[str, Any], *, scope: RunScope) -> tuple[int, datetime] | None:
    """(how many turns, when counted) for a list filtered by the state alone, or not at all, from the
    overview's cached counts: what gives a list of more than COUNT_CAP turns its last page. None when the
    filter names anything else."""
    if any(filters.get(name) for name in UNCOUNTED_FILTERS):
        return None
    counts = turn_counts(scope=scope)
    state = filters.get("state")
    members = STATE_GROUPS.get(state, frozenset({state})) if state else counts.by_state.keys()
    return sum(counts.by_state.get(m, 0) for m in members), counts.counted_at


def runs_filtered(filters: dict[str, Any], *, scope: RunScope) -> QuerySet[Run]:
    runs = Run.objects.filter(scope.q("run_id"))
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
        runs = runs.filter(age_q(filters["age"], "changed_at"))
    if filters.get("status"):
        runs = runs.filter(run_status_q(filters["status"]))
    sort = RUN_SORTS.get(filters.get("sort") or "-updated", RUN_SORTS["-updated"])
    if "status_rank" in sort:
        runs = runs.annotate(status_rank=run_status_rank())
    return runs.order_by(*sort)


def capped_count(qs: QuerySet[Any], cap: int | None = None) -> tuple[int, bool]:
    """(count, capped): COUNT over at most cap+1 rows (COUNT_CAP by default), so a huge match costs no more
    than a large one."""
    cap = COUNT_CAP if cap is None else cap
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
    # When the total came from the overview's cached counts rather than a count of this page's rows.
    counted_at: datetime | None = None

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
            if out and out[-1] is not None and n - out[-1] > 1:
                out.append(None)
            out.append(n)
        return out


def page_of(
    qs: QuerySet[Any],
    number: int,
    per_page: int,
    count_qs: QuerySet[Any] | None = None,
    counted: tuple[int, bool] | None = None,
) -> Page:
    """One page: the rows (one query, per_page+1 to learn whether there is a next) and a capped count
    (over ``count_qs`` when given: the same rows without the per-row annotations a count never needs;
    ``counted``: the capped count of the same rows, already taken)."""
    total, capped = counted if counted is not None else capped_count(qs if count_qs is None else count_qs)
    last_page = max(1, -(-total // per_page))
    # A capped count does not know the last page: a page past the cap is asked for, not clamped.
    number = max(1, number) if capped else min(max(1, number), last_page)
    offset = (number - 1) * per_page
    rows = list(qs[offset : offset + per_page + 1])
    return Page(rows[:per_page], number, per_page, total, capped, len(rows) > per_page)


def decorate_runs(runs: list[Run]) -> None:
    """Per-run counts by effective state for one page of runs: two grouped queries, whatever the page size."""
    counts: dict[int, dict[str, int]] = {r.pk: {} for r in runs}
    totals = dict(
        Turn.objects.filter(run_id__in=counts).order_by().values_list("run_id").annotate(n=Count("id")).values_list(
            "run_id", "n"
        )
    )
    rows = (
        TurnEffective.objects.filter(run_id__in=counts)
        .order_by()
        .values_list("run_id", "state")
        .annotate(n=Count("turn_id"))
        .values_list("run_id", "state", "n")
    )
    for run_id, state, n in rows:
        counts[run_id][state] = n
    for r in runs:
        total = totals.get(r.pk, 0)
        by_state: dict[str, int] = {s: counts[r.pk][s] for s in STATE_ORDER if counts[r.pk].get(s)}
        unassessed = total - sum(by_state.values())
        if unassessed > 0:
            by_state[UNASSESSED] = unassessed
        r.state_counts = by_state  # type: ignore[attr-defined]
        r.held_total = sum(n for s, n in by_state.items() if s in STATE_GROUPS["held"])  # type: ignore[attr-defined]
        r.turn_total = total  # type: ignore[attr-defined]


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
class Tile:
    key: str  # a state or a group of states: the turns list's `state` filter
    label: str
    count: int
    css: str


# The overview's tiles: what waits for a person first, then what the gate lets go on, then the rest.
TILES = (
    ("waiting", "waiting for a person", "blocked"),
    (str(TurnState.BLOCKED_OPERATOR), "blocked by an operator", "blocked"),
    (str(TurnState.APPROVED), "approved by an operator", "resume"),
    ("proceeding", "resuming or finalizing", "resume"),
    (str(TurnState.COMPLETE), "complete", "complete"),
    (str(TurnState.DISCARDED), "discarded", "discarded"),
    (UNASSESSED, "not yet assessed", "unassessed"),
)


def _tiles(by_state: dict[str, int]) -> list[Tile]:
    tiles: list[Tile] = []
    for key, label, css in TILES:
        members = STATE_GROUPS.get(key, frozenset({key}))
        if key == "proceeding":
            members = members - {str(TurnState.APPROVED)}  # approved has a tile of its own
        tiles.append(Tile(key=key, label=label, count=sum(by_state.get(m, 0) for m in members), css=css))
    return tiles


def run_status_counts(*, scope: RunScope) -> dict[str, int]:
    """``scope``'s runs by the status each shows (journals.models.run_status_q), in one grouped query."""
    shown = Case(
        *(When(run_status_q(s), then=Value(str(s))) for s in RUN_STATUS_ORDER),
        default=Value(""),
        output_field=CharField(),
    )
    rows = (
        Run.objects.filter(scope.q("run_id"))
        .order_by()
        .annotate(shown=shown)
        .values_list("shown")
        .annotate(n=Count("id"))
        .values_list("shown", "n")
    )
    found = dict(rows)
    return {str(s): found.get(str(s), 0) for s in RUN_STATUS_ORDER}


# The overview's run tiles: a tile per status, in RUN_STATUS_ORDER, each linking to the runs list so filtered.
RUN_TILE_LABELS = {
    "blocked": "runs blocked: journal at fault",
    "needs_attention": "runs needing attention",
    "running": "runs running",
    "done": "runs done",
}


def _run_tiles(by_status: dict[str, int]) -> list[Tile]:
    return [
        Tile(key=str(s), label=RUN_TILE_LABELS[str(s)], count=by_status.get(str(s), 0), css=f"run-{s}")
        for s in RUN_STATUS_ORDER
    ]


@dataclass
class Overview:
    states: list[Bar] = field(default_factory=list)
    reasons: list[Bar] = field(default_factory=list)
    turn_total: int = 0
    blocked_queue: list[Turn] = field(default_factory=list)
    held_total: int = 0
    waiting_total: int = 0
    actions: list[OperatorAction] = field(default_factory=list)
    counted_at: datetime | None = None
    tiles: list[Tile] = field(default_factory=list)
    run_tiles: list[Tile] = field(default_factory=list)
    run_total: int = 0

    @property
    def states_height(self) -> int:
        return chart_height(self.states)

    @property
    def reasons_height(self) -> int:
        return chart_height(self.reasons)


def _bars(pairs: list[tuple[str, int]], labels: dict[str, str] | None = None) -> list[Bar]:
    top = max((n for _, n in pairs), default=0) or 1
    return [
        Bar(
            label=(labels or {}).get(k) or k.replace("_", " "),
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


# Held states first: they are what a person is here for.
STATE_ORDER = (
    TurnState.HELD_EFFECT,
    TurnState.HELD_REVIEW,
    TurnState.HELD_JOURNAL,
    TurnState.HELD_INTEGRITY,
    TurnState.PARKED,
    TurnState.BLOCKED_OPERATOR,
    TurnState.APPROVED,
    TurnState.RESUMING,
    TurnState.FINALIZING,
    TurnState.COMPLETE,
    TurnState.DISCARDED,
)
STATE_LABELS = {str(s): str(s.label) for s in TurnState} | {UNASSESSED: "not yet assessed"}


def blocked_queue(limit: int = 20, *, scope: RunScope) -> QuerySet[Turn]:
    """Held turns of ``scope``'s runs, longest held first: those waiting for a person and those an
    operator blocked."""
    return (
        Turn.objects.filter(scope.q("run__run_id"), effective__gate=HOLD)
        .select_related("run", "effective", "assignment__assignee")
        # Tied times in the turn's order; named on the state row (its key is the turn's) so that one index
        # (effective_gate_since) serves the filter and the whole order.
        .order_by("effective__since", "effective__turn_id")[:limit]
    )


@dataclass
class TurnCounts:
    """Turns by effective state and held turns by reason, and when they were counted."""

    by_state: dict[str, int]
    by_reason: list[tuple[str | None, int]]  # a held turn without a reason counts under None
    counted_at: datetime


# Counting the turns scans an index entry per turn, which on a large installation costs more than the rest
# of the page (docs/perf keeps the measurements). The counts are kept this long, and recounted sooner
# whenever the most recently changed turn or state is another one (an ingest bumps Turn.updated_at, an
# assessment or an operator's decision TurnEffective.updated_at), so they lag only when a write commits out
# of order; the page says when they were counted.
COUNTS_TTL_SECONDS = 60


def _count_turns(scope: RunScope) -> TurnCounts:
    by_reason = list(
        TurnEffective.objects.filter(scope.q("run__run_id"), gate=HOLD)
        .order_by()
        .values_list("reason")
        .annotate(n=Count("turn_id"))
        .values_list("reason", "n")
    )
    by_reason.sort(key=lambda pair: (-pair[1], pair[0] or ""))
    return TurnCounts(by_state=state_counts(scope=scope), by_reason=by_reason, counted_at=timezone.now())


def turn_counts(*, scope: RunScope) -> TurnCounts:
    """The overview's counts of ``scope``'s turns, from the cache while no turn or state has changed (at most
    COUNTS_TTL_SECONDS old). Each scope is counted and kept apart: a team's tiles never count another's."""
    latest = Turn.objects.order_by("-updated_at", "-id").values_list("id", "updated_at").first()
    state = TurnEffective.objects.order_by("-updated_at").values_list("updated_at", flat=True).first()
    key = f"console:turn-counts:{scope.cache_key}:" + (f"{latest[0]}:{latest[1].timestamp()}" if latest else "none")
    key += f":{state.timestamp()}" if state else ":none"
    found = cache.get(key)
    if not isinstance(found, TurnCounts):
        found = _count_turns(scope)
        cache.set(key, found, COUNTS_TTL_SECONDS)
    return found


def overview(queue_limit: int = 15, action_limit: int = 10, *, scope: RunScope) -> Overview:
    """The overview's figures: turns by state and held ones by reason (cached, turn_counts), runs by status,
    the held queue and the latest operator actions."""
    counts = turn_counts(scope=scope)
    by_status = run_status_counts(scope=scope)
    order = [str(s) for s in STATE_ORDER] + [UNASSESSED]
    states = [(s, counts.by_state.get(s, 0)) for s in order]
    queue = list(blocked_queue(queue_limit, scope=scope))
    return Overview(
        states=_bars(states, STATE_LABELS),
        reasons=_bars([(r or "unknown", n) for r, n in counts.by_reason], vocabulary.SHORT_REASONS),
        turn_total=sum(counts.by_state.values()),
        blocked_queue=queue,
        held_total=sum(n for s, n in counts.by_state.items() if s in STATE_GROUPS["held"]),
        waiting_total=sum(n for s, n in counts.by_state.items() if s in STATE_GROUPS["waiting"]),
        counted_at=counts.counted_at,
        tiles=_tiles(counts.by_state),
        run_tiles=_run_tiles(by_status),
        run_total=sum(by_status.values()),
        actions=list(
            OperatorAction.objects.filter(scope.q("run__run_id"))
            .select_related("turn", "run")
            .order_by("-created_at", "-id")[:action_limit]
        ),
    )


# --- Bulk decisions ---------------------------------------------------------------------------------

BULK_MAX = services.BULK_MAX


def bulk_candidates(filters: dict[str, Any], action: str, *, scope: RunScope) -> QuerySet[Turn]:
    """The turns of a filter a bulk decision hands to the service (recovery.state.bulk_candidates)."""
    return state_bulk_candidates(filters=filters, action=action, scope=scope).order_by("effective__since", "id")


def bulk_left_alone(candidates: QuerySet[Turn]) -> list[tuple[str, int]]:
    """(what they need, how many) of the candidates an approval will leave alone, by their stored state
    (recovery.state.APPROVAL_NEEDS: the service decides, turn by turn)."""
    rows = dict(
        candidates.filter(effective__state__in=list(APPROVAL_NEEDS))
        .order_by()
        .values_list("effective__state")
        .annotate(n=Count("id"))
        .values_list("effective__state", "n")
    )
    return [(str(words), rows[state]) for state, words in APPROVAL_NEEDS.items() if rows.get(state)]
