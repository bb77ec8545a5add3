"""A run's own pages: its summary with the fork tree and the grid of turns by phase, its event history (every
record in order) and one record.

Each page is a fixed number of queries whatever the number of records (tests/console/test_run_pages.py holds
it at 10 and 10,000 records): the records shown are one page of an indexed range, counts are capped, the fork
records are found through the (run, turn, seq) index (a fork names no turn), and the grid is one page of
turns with their phases in one more query. Anything taken from a record goes through the store's
``record_public`` (secrets redacted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import QuerySet
from django.urls import reverse
from django.utils.safestring import SafeString

from journals.models import Branch, JournalRecord, Phase, Run, Turn
from journals.selectors import record_public
from recovery.models import Assessment
from recovery.state import StateValue, state_of

from . import forktree, states
from .links import url_former
from .rows import grid_rows
from .selectors import Page, page_of

RECORD_FIELDS = ("id", "run_id", "seq", "branch", "lsn", "kind", "v", "turn", "digest", "received_at")
FORKS_SHOWN = 200
GRID_TURNS = 25
DEFAULT_PHASES = ("plan", "envelope", "dispatch", "execute", "readback", "writeback", "spend")


def record_url(run_pk: int, branch: int, lsn: int) -> str:
    """A record's page (console.links: a grid or a history page forms a URL per record)."""
    return url_former("console:record")(pk=run_pk, branch=branch, lsn=lsn)


def is_discarded(branches: dict[int, Branch], branch: int, lsn: int) -> bool:
    """A record after its branch's kept prefix (contract, section 4): evidence, not on any timeline."""
    b = branches.get(branch)
    return b is not None and b.discarded_from is not None and lsn > b.discarded_from


@dataclass
class RecordRow:
    seq: int
    branch: int
    lsn: int
    kind: str | None
    turn: str | None
    received_at: datetime
    fields: dict[str, Any] | None
    discarded: bool
    url: str

    @property
    def at(self) -> str | None:
        value = (self.fields or {}).get("at")
        return value if isinstance(value, str) else None

    @property
    def summary(self) -> str:
        return record_gist(self.kind or "", self.fields or {})


def record_gist(kind: str, f: dict[str, Any]) -> str:
    """A record's gist in a few words: what a list row or the timeline shows before the fields."""
    if kind == "phase_committed":
        return f"committed {f.get('phase')}"
    if kind == "intent_dispatched":
        return f"sent {f.get('intent')} ({f.get('effect_class') or _v1_class(f)})"
    if kind == "effect_observed":
        return f"readback of {f.get('intent')}: {f.get('outcome')}"
    if kind == "turn_terminal":
        return f"ended: {f.get('status')}"
    if kind == "fork":
        return f"new branch {f.get('new_branch')} from lsn {f.get('from_lsn')}: {f.get('reason') or ''}"
    if kind == "checkpoint":
        return f"covers lsn {f.get('covers_lsn')}"
    if kind == "turn_planned":
        plan = f.get("phases", f.get("stages"))
        return f"planned, lineage {f.get('lineage')}" + (f", {len(plan)} phases" if isinstance(plan, list) else "")
    return ""


def _v1_class(fields: dict[str, Any]) -> str:
    if fields.get("unsafe") is True:
        return "unsafe"
    return "idempotent" if fields.get("idempotency_key") else "safe"


def record_row(record: JournalRecord, branches: dict[int, Branch], run_pk: int) -> RecordRow:
    public = record_public(record)
    return RecordRow(
        seq=record.seq,
        branch=record.branch,
        lsn=record.lsn,
        kind=record.kind,
        turn=record.turn,
        received_at=record.received_at,
        fields=public["record"],
        discarded=is_discarded(branches, record.branch, record.lsn),
        url=record_url(run_pk, record.branch, record.lsn),
    )


def _records(run: Run) -> QuerySet[JournalRecord]:
    # `line` is read: record_public parses it. Nothing else large is on the row.
    return JournalRecord.objects.filter(run=run).only(*RECORD_FIELDS, "line")


# --- The run page ------------------------------------------------------------------------------------------


@dataclass
class Fork:
    branch: int  # the branch the fork record is on
    lsn: int
    new_branch: int | None
    from_lsn: int | None
    reason: str
    url: str


@dataclass
class GridCell:
    phase: str
    state: str  # committed | resume | blocked | missing | unplanned
    branch: int | None = None
    lsn: int | None = None
    url: str | None = None
    at: str | None = None

    @property
    def words(self) -> str:
        where = f" at branch {self.branch} · lsn {self.lsn}" if self.branch is not None else ""
        return {
            "committed": f"{self.phase}: committed{where}",
            "resume": f"{self.phase}: resume here",
            "blocked": f"{self.phase}: held here (blocked)",
            "missing": f"{self.phase}: not committed",
            "unplanned": f"{self.phase}: not in this turn's plan",
        }[self.state]


@dataclass
class GridRow:
    turn: Turn
    state: str  # the gate's decision, which places the resume and held marks in the cells
    shown: StateValue | None  # the effective state in the words every other page uses
    cells: list[GridCell]


@dataclass
class Grid:
    phases: list[str]
    rows: list[GridRow]
    page: Page
    # An imported run's turns in its source's words (recovery.imports.selectors.source_words), by turn id.
    names: dict[str, str] = field(default_factory=dict)

    @property
    def rows_html(self) -> SafeString:
        """The grid's rows: the turn, its state and a cell a phase (console.rows)."""
        return grid_rows(self.rows, names=self.names)


@dataclass
class RunPage:
    run: Run
    branches: list[Branch]
    forks: list[Fork]
    tree: forktree.Tree
    first: RecordRow | None
    last: RecordRow | None
    counts: dict[str, int]
    assessment: Assessment | None
    grid: Grid
    source: str = ""
    turn_total: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _forks(run: Run) -> list[Fork]:
    rows = (
        JournalRecord.objects.filter(run=run, turn__isnull=True, kind="fork")
        .only(*RECORD_FIELDS, "line")
        .order_by("seq")[:FORKS_SHOWN]
    )
    out: list[Fork] = []
    for r in rows:
        f = record_public(r)["record"] or {}
        new_branch, from_lsn = f.get("new_branch"), f.get("from_lsn")
        out.append(
            Fork(
                branch=r.branch,
                lsn=r.lsn,
                new_branch=new_branch if isinstance(new_branch, int) else None,
                from_lsn=from_lsn if isinstance(from_lsn, int) else None,
                reason=str(f.get("reason") or ""),
                url=record_url(run.pk, r.branch, r.lsn),
            )
        )
    return out


def _source(run: Run, first: RecordRow | None) -> str:
    """Where the run's records came from: the first record's writer when it names one, else how they came."""
    fields = (first.fields or {}) if first else {}
    for key in ("source", "writer", "runtime", "host"):
        value = fields.get(key)
        if isinstance(value, str) and value:
            return value
    return "journal ingest (API or package import)" if first else "no record yet"


class _PhaseRow(NamedTuple):
    committed: bool
    committed_at: str | None
    branch: int | None  # where the committing record is
    lsn: int | None


def grid(run: Run, number: int, per_page: int = GRID_TURNS) -> Grid:
    """One page of the run's turns in journal order, each with a cell per phase (Airflow's grid)."""
    turns = states.with_state(Turn.objects.filter(run=run)).order_by("first_seq", "id")
    page = page_of(turns, number, per_page, count_qs=Turn.objects.filter(run=run))
    # The page's phases in one query, as plain rows: a grid page has a few hundred, and building a model
    # instance for each (and for its committing record) would cost more than the query.
    phase_rows: dict[int, dict[str, _PhaseRow]] = {t.pk: {} for t in page.rows}
    found = Phase.objects.filter(turn_id__in=list(phase_rows)).values_list(
        "turn_id", "name", "committed", "committed_at", "record__branch", "record__lsn"
    )
    for turn_id, name, committed, committed_at, branch, lsn in found if phase_rows else ():
        phase_rows[turn_id][name] = _PhaseRow(committed, committed_at, branch, lsn)
    phases: list[str] = []
    for t in page.rows:
        for name in t.plan if isinstance(t.plan, list) else []:
            if str(name) not in phases:
                phases.append(str(name))
    if not phases:
        phases = list(DEFAULT_PHASES)
    rows = [
        GridRow(
            turn=t,
            state=states.turn_state(t),
            shown=state_of(getattr(t, "effective", None)),
            cells=_cells(run, t, phases, phase_rows[t.pk]),
        )
        for t in page.rows
    ]
    return Grid(phases=phases, rows=rows, page=page)


def _cells(run: Run, turn: Turn, phases: list[str], by_name: dict[str, _PhaseRow]) -> list[GridCell]:
    plan = [str(p) for p in turn.plan] if isinstance(turn.plan, list) else []
    state = states.turn_state(turn)
    first_open = next((p for p in plan if not (by_name.get(p) and by_name[p].committed)), None)
    cells: list[GridCell] = []
    for name in phases:
        if name not in plan:
            cells.append(GridCell(name, "unplanned"))
            continue
        row = by_name.get(name)
        if row is not None and row.committed:
            cell = GridCell(name, "committed", at=row.committed_at)
            if row.branch is not None and row.lsn is not None:
                cell.branch, cell.lsn = row.branch, row.lsn
                cell.url = record_url(run.pk, row.branch, row.lsn)
            cells.append(cell)
        elif name == first_open and state == "blocked":
            cells.append(GridCell(name, "blocked"))
        elif name == first_open and state in ("resume", "finalize"):
            cells.append(GridCell(name, "resume"))
        else:
            cells.append(GridCell(name, "missing"))
    return cells


def run_page(run: Run, grid_page: int = 1) -> RunPage:
    branches = list(Branch.objects.filter(run=run).order_by("number"))
    by_number = {b.number: b for b in branches}
    forks = _forks(run)
    reasons = {f.new_branch: f.reason for f in forks if f.new_branch is not None}
    first_rec = _records(run).order_by("seq").first()
    last_rec = _records(run).order_by("-seq").first() if run.record_count > 1 else None
    first = record_row(first_rec, by_number, run.pk) if first_rec else None
    last = record_row(last_rec, by_number, run.pk) if last_rec else first
    counts = states.state_counts(Turn.objects.filter(run=run))
    tree = forktree.lay_out(branches, reasons, records_url=reverse("console:records", args=[run.pk]))
    fork_urls = {f.new_branch: f.url for f in forks}
    for lane in tree.lanes:
        lane.fork_url = fork_urls.get(lane.number)
    return RunPage(
        run=run,
        branches=branches,
        forks=forks,
        tree=tree,
        first=first,
        last=last,
        counts=counts,
        assessment=Assessment.objects.filter(run=run).defer("output").order_by("-id").first(),
        grid=grid(run, grid_page),
        source=_source(run, first),
        turn_total=sum(counts.values()),
    )


# --- The event history -------------------------------------------------------------------------------------


@dataclass
class History:
    run: Run
    branches: list[Branch]
    page: Page
    rows: list[RecordRow]
    filters: dict[str, Any]
    turn_pks: dict[str, int]


def history(run: Run, filters: dict[str, Any], number: int, per_page: int = 50) -> History:
    records = _records(run)
    if filters.get("kind"):
        records = records.filter(kind=filters["kind"])
    if filters.get("turn"):
        records = records.filter(turn=filters["turn"])
    if filters.get("branch") is not None:
        records = records.filter(branch=filters["branch"])
    records = records.order_by("seq")
    if filters.get("kind") or filters.get("turn") or filters.get("branch") is not None:
        page = page_of(records, number, per_page)
    else:
        page = _seq_page(run, records, number, per_page)
    branches = list(Branch.objects.filter(run=run).order_by("number"))
    by_number = {b.number: b for b in branches}
    rows = [record_row(r, by_number, run.pk) for r in page.rows]
    names = {r.turn for r in rows if r.turn}
    turn_pks = dict(Turn.objects.filter(run=run, turn_id__in=names).values_list("turn_id", "pk")) if names else {}
    return History(run=run, branches=branches, page=page, rows=rows, filters=filters, turn_pks=turn_pks)


def _seq_page(run: Run, records: QuerySet[JournalRecord], number: int, per_page: int) -> Page:
    """A page of every record of the run. A run's records are numbered 1, 2, 3... in the order they came
    (``seq``), and the run counts them, so the page is a range of seq read from the (run, seq) index: no
    count, an exact total however many records, and a deep page costs what the first does."""
    last_page = max(1, -(-run.record_count // per_page))
    number = min(max(1, number), last_page)
    rows = list(records.filter(seq__gt=(number - 1) * per_page)[: per_page + 1])
    return Page(rows[:per_page], number, per_page, run.record_count, False, len(rows) > per_page)


# --- One record --------------------------------------------------------------------------------------------


@dataclass
class RecordPage:
    run: Run
    row: RecordRow
    branch: Branch | None
    turn_pk: int | None
    history_url: str
    prev_url: str | None
    next_url: str | None


def record_page(run: Run, branch: int, lsn: int) -> RecordPage:
    """The record at ``branch``·``lsn`` (JournalRecord.DoesNotExist when there is none)."""
    record = _records(run).get(branch=branch, lsn=lsn)
    b = Branch.objects.filter(run=run, number=branch).first()
    row = record_row(record, {branch: b} if b else {}, run.pk)
    turn_pk = (
        Turn.objects.filter(run=run, turn_id=record.turn).values_list("pk", flat=True).first() if record.turn else None
    )
    per_page = 50
    # The history page that holds it, in seq order: the records before it, over the page size.
    page_no = (record.seq - 1) // per_page + 1
    history_url = reverse("console:records", args=[run.pk]) + f"?page={page_no}#r{record.seq}"
    last = b.last_lsn if b else lsn
    return RecordPage(
        run=run,
        row=row,
        branch=b,
        turn_pk=turn_pk,
        history_url=history_url,
        prev_url=record_url(run.pk, branch, lsn - 1) if lsn > 0 else None,
        next_url=record_url(run.pk, branch, lsn + 1) if lsn < last else None,
    )
