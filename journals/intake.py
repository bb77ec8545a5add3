"""The steps of ingest that every journal store takes alike (journals/store.py): a batch split and parsed,
each record's envelope checked, the conditions of a conditional write (contract section 9: fencing and
``LoopX-Expect``), the door check (engine/door.py), and the batch's projection in memory.

Nothing here knows which database it talks to: the reads below go through the ORM, and each store
(journals/orm.py, journals/postgres.py) writes a batch's rows its own way around these steps.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import orjson
from django.conf import settings
from django.db.models import Q

from engine import is_int, offset_mismatches, parse_canonical_batch
from engine.canonical import RECORD_INVALID, canonical_bytes, parse_line
from engine.door import CHAIN_CODES, DoorFault, DoorRecord, Head, door_faults
from engine.types import DEFAULT_PHASES
from journals.models import ID_MAX, Branch, Checkpoint, JournalRecord, Run, Turn
from journals.storable import is_storable, storable
from kernel.errors import ServiceError
from kernel.failpoints import failpoint

MAX_BRANCH = 2**31 - 1
MAX_LSN = 2**63 - 1
_MAX_V = 2**31 - 1
# Writers we know (the JSONL family); a JSON array is accepted too and re-serialised canonically.
JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines", "text/plain")
JSON_TYPES = ("application/json",)


class IngestError(ServiceError):
    """A batch refused as a whole (nothing of it stored)."""


@dataclass(slots=True)
class Prepared:
    line_no: int
    raw: bytes
    branch: int
    lsn: int
    # None until needed (``record_digest``): the sha256 of the line's bytes, computed once (on PostgreSQL while the
    # rows stream to the server, journals/postgres.py); a line that is not canonical gets the engine's
    # digest of its value at once.
    digest: str | None
    kind: str | None
    v: int | None
    turn: str | None
    obj: dict[str, Any]
    # Why the line is not a valid record though it is one complete JSON object (a duplicate key, a lone
    # surrogate, a float): what the door check reports. None when reading found nothing.
    invalid: str | None = None


@dataclass
class IngestResult:
    run: Run
    stored: int
    duplicates: int
    first_seq: int | None
    last_seq: int
    branches: list[Branch] = field(default_factory=list)
    # The run-level faults the stored batch brought in, as far as the door can see them (engine/door.py).
    violations: list[DoorFault] = field(default_factory=list)


def split_batch(body: bytes, content_type: str) -> list[bytes]:
    max_line = settings.LOOPX_INGEST_MAX_LINE_BYTES
    max_records = settings.LOOPX_INGEST_MAX_BATCH_RECORDS
    if len(body) > settings.LOOPX_INGEST_MAX_BATCH_BYTES:
        raise IngestError(
            413,
            "batch_too_large",
            f"the batch exceeds {settings.LOOPX_INGEST_MAX_BATCH_BYTES} bytes",
            limit=settings.LOOPX_INGEST_MAX_BATCH_BYTES,
        )
    if not body.strip():
        raise IngestError(400, "empty_batch", "the batch holds no record")
    media = content_type.split(";", 1)[0].strip().lower()
    if media in JSON_TYPES:
        return _split_array(body, max_line, max_records)
    lines = body.split(b"\n")
    if lines[-1] == b"":  # one final newline ends the last line; it is not an empty line
        lines.pop()
    if len(lines) > max_records:
        raise IngestError(
            413, "too_many_records", f"the batch holds more than {max_records} records", limit=max_records
        )
    for number, raw in enumerate(lines, start=1):
        if len(raw) > max_line:
            raise IngestError(413, "line_too_large", f"the line exceeds {max_line} bytes", number, limit=max_line)
    return lines


def _split_array(body: bytes, max_line: int, max_records: int) -> list[bytes]:
    def _refuse_constant(name: str) -> Any:
        raise ValueError("non-finite number")

    try:
        items = json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise IngestError(400, "not_json", "the body is not a JSON array of records", 1) from None
    if not isinstance(items, list):
        raise IngestError(400, "not_json", "the body is not a JSON array of records", 1)
    if not items:
        raise IngestError(400, "empty_batch", "the batch holds no record")
    if len(items) > max_records:
        raise IngestError(
            413, "too_many_records", f"the batch holds more than {max_records} records", limit=max_records
        )
    lines: list[bytes] = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise IngestError(400, "not_json", "the element is not a JSON object", number)
        try:
            # The array form has no line bytes of its own: a record is stored as its canonical bytes.
            raw = canonical_bytes(item)
        except (ValueError, UnicodeEncodeError, RecursionError):
            raise IngestError(400, "not_json", "the element cannot be serialised as UTF-8 JSON", number) from None
        if len(raw) > max_line:
            raise IngestError(413, "line_too_large", f"the record exceeds {max_line} bytes", number, limit=max_line)
        lines.append(raw)
    return lines


def _check_identifier(value: Any, name: str, number: int) -> str | None:
    """Turn and intent ids become indexed columns: they must fit and be storable text."""
    if not isinstance(value, str):
        return None
    if len(value) > ID_MAX:
        raise IngestError(400, "identifier_too_long", f"the {name} id is longer than {ID_MAX} characters", number)
    if "\x00" in value:
        raise IngestError(400, "identifier_invalid", f"the {name} id contains a NUL character", number)
    # A lone surrogate makes the record `record_invalid` (stored as evidence); the id is not a usable key.
    return value if is_storable(value) else None


def _canonical_object(raw: bytes) -> dict[str, Any] | None:
    """The line's object when the line is already the canonical bytes of one JSON object (the common case,
    recognised with orjson alone: re-serialising gives the same bytes, so no duplicate key, no out-of-range
    integer, nothing re-escaped), else None: the line needs the engine's full classification."""
    if raw[:1] == b"{":
        try:
            obj = orjson.loads(raw)
            written = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
        except (orjson.JSONDecodeError, TypeError):  # TypeError: nested deeper than orjson writes (254 levels)
            return None
        if type(obj) is dict and written == raw:
            return obj
    return None


def complete_record(line: bytes) -> dict[str, Any] | None:
    """The line's object when it is one complete JSON object, else None: exactly what ingest stores and what
    it refuses as ``not_json`` (a package import keeps the latter aside, recovery/packages/services.py)."""
    obj = _canonical_object(line)
    return obj if obj is not None else parse_line(line).obj


def _parse(raw: bytes) -> tuple[dict[str, Any], str, str | None]:
    """(object, digest) of a line that is one complete JSON object; IngestError otherwise.

    Ingest needs no more than that: whether a well-formed record also breaks the contract (a float, a
    duplicate key, ...) is the assessment's business, and such a record is stored all the same. Canonical
    lines are recognised cheaply (``_canonical_object``; ``prepare_all`` proves a whole batch at once);
    everything else goes through the engine's ``parse_line``.
    """
    obj = _canonical_object(raw)
    if obj is not None:
        return obj, hashlib.sha256(raw).hexdigest(), None
    parsed = parse_line(raw)
    if parsed.obj is None:
        # parse_line's detail says what kind of damage, never what the bytes were.
        raise IngestError(400, "not_json", f"the line is not one complete JSON object ({parsed.detail})")
    # A record with a lone surrogate has no canonical bytes; its raw bytes identify it instead.
    invalid = parsed.detail if parsed.error == RECORD_INVALID else None
    return parsed.obj, parsed.digest or hashlib.sha256(raw).hexdigest(), invalid


def _parse_all(lines: list[bytes]) -> tuple[list[dict[str, Any]], list[str | None], dict[int, str]]:
    """The object and the digest of every line, in order (None: the sha256 of its bytes, left to
    ``record_digest``); IngestError (with its line number) at the first line that is not one complete JSON object.

    The whole batch is proven canonical by the engine's batch proof (``parse_canonical_batch``, docs/engine.md): each
    line parsed on its own, then ONE serialisation of the parsed list compared with the lines joined as a JSON
    array, which holds exactly when every line is the canonical bytes of its value. A batch that fails the
    proof (one line not canonical is enough) is parsed line by line, each line as ``_parse`` does."""
    objs, verified = parse_canonical_batch(lines)
    # Canonical bytes of a value: a line that is not an object (a bare number, say) is refused below.
    if verified and all(type(obj) is dict for obj in objs):
        return objs, [None] * len(lines), {}
    digests: list[str | None] = []
    objs = []
    invalid: dict[int, str] = {}
    for number, raw in enumerate(lines, start=1):
        try:
            obj, digest, why = _parse(raw)
        except IngestError as exc:
            exc.line = number
            raise
        objs.append(obj)
        digests.append(digest)
        if why is not None:
            invalid[number] = why
    return objs, digests, invalid


def prepare_all(lines: list[bytes], run_id: str) -> list[Prepared]:
    """Every line parsed and its envelope checked (a batch is 1,000s of lines: the per-line cost is most of
    ingest's CPU). Each line is parsed once, and hashed at most once (``record_digest``)."""
    objs, digests, invalid = _parse_all(lines)
    prepared = prepare_rows(objs, digests, lines, run_id, 1)
    for rec in prepared:
        rec.invalid = invalid.get(rec.line_no)
    return prepared


def prepare_rows(
    objs: list[dict[str, Any]], digests: list[str | None], lines: list[bytes], run_id: str, first_number: int
) -> list[Prepared]:
    """The envelope of each parsed line checked, in order (``first_number``: the first line's number in the
    batch); IngestError at the first line refused. Shared by ``prepare_all`` and the streamed path."""
    prepared: list[Prepared] = []
    append = prepared.append
    nul = "\x00"
    for number, (obj, digest, raw) in enumerate(zip(objs, digests, lines, strict=True), start=first_number):
        run = obj.get("run")
        if run != run_id:
            if not isinstance(run, str):
                raise IngestError(400, "envelope_invalid", "the record has no string `run`", number)
            raise IngestError(400, "run_mismatch", "the record belongs to another run than the URL names", number)
        branch, lsn = obj.get("branch"), obj.get("lsn")
        # type() is int: a bool is not an integer here.
        if type(branch) is not int or not 0 <= branch <= MAX_BRANCH:
            raise IngestError(400, "envelope_invalid", "`branch` must be an integer >= 0", number)
        if type(lsn) is not int or not 0 <= lsn <= MAX_LSN:
            raise IngestError(400, "envelope_invalid", "`lsn` must be an integer >= 0 (64-bit)", number)
        # Short ASCII ids without NUL (the common case) are checked inline; anything else as _check_identifier.
        turn = obj.get("turn")
        if turn is not None and not (type(turn) is str and len(turn) <= ID_MAX and turn.isascii() and nul not in turn):
            turn = _check_identifier(turn, "turn", number)
        intent = obj.get("intent")
        if intent is not None:
            _check_identifier(intent, "intent", number)
        kind = obj.get("kind")
        if not (type(kind) is str and len(kind) <= 64 and (kind.isascii() and nul not in kind or is_storable(kind))):
            kind = None
        v = obj.get("v")
        if not (type(v) is int and -_MAX_V <= v <= _MAX_V):
            v = None
        append(Prepared(number, raw, branch, lsn, digest, kind, v, turn, obj))
    return prepared


def record_digest(rec: Prepared) -> str:
    """The record's digest: the engine's for a line that is not canonical (set by ``_parse_all``), else the
    sha256 of its bytes, computed once."""
    digest = rec.digest
    if digest is None:
        digest = rec.digest = hashlib.sha256(rec.raw).hexdigest()
    return digest


def conflict(rec: Prepared, stored_digest: str) -> IngestError:
    return IngestError(
        409,
        "lsn_conflict",
        f"branch {rec.branch} lsn {rec.lsn} is already stored with other bytes",
        rec.line_no,
        branch=rec.branch,
        lsn=rec.lsn,
        stored_digest=stored_digest,
        received_digest=record_digest(rec),
    )


def run_lock(run_id: str) -> tuple[Run, dict[int, Branch]]:
    """The run, locked for the batch (created on its first batch), and its branches' cursors. The lock
    serialises ingest (seq assignment, cursors) per run; SQLite's IMMEDIATE transactions already do."""
    run = Run.objects.select_for_update().filter(run_id=run_id).first()
    if run is None:
        created, _ = Run.objects.get_or_create(run_id=run_id)
        run = Run.objects.select_for_update().get(pk=created.pk)
    return run, {b.number: b for b in Branch.objects.filter(run=run)}


def check_expect(branches: Mapping[int, Branch], expect: Mapping[int, int]) -> None:
    """409 `offset_mismatch` when a branch's ack cursor (every lsn 0..n stored; -1: none) is not the one the
    writer expects. Read under the run's lock, before anything of the batch is written."""
    if not expect:
        return
    held = {number: branch.committed_lsn for number, branch in branches.items()}
    mismatches = offset_mismatches(held, expect)
    if mismatches:
        first = mismatches[0]
        raise IngestError(
            409, "offset_mismatch", first.detail, branch=first.branch, expected=first.expected, stored=first.stored
        )


def fencing_current(run: Run, turns: set[str], fencing: Mapping[str, int]) -> dict[str, int]:
    """Under the run's lock: the current fencing token of each turn the batch or its header names that the
    gate has handed out (its fencing counter > 0). Turn claims lock the turn's row, not the run's; a claim
    committed after this read and before the batch's commit is ordered after the batch (its claimer reads
    the journal after claiming)."""
    names = turns | set(fencing)
    if not names:
        return {}
    return dict(
        Turn.objects.filter(run=run, turn_id__in=sorted(names), fencing_counter__gt=0).values_list(
            "turn_id", "fencing_counter"
        )
    )


def check_fenced(current: Mapping[str, int], fencing: Mapping[str, int]) -> None:
    """409 `fenced` when a token the header names is not the turn's current one: a stale owner's (another
    worker claimed the turn since), or one never handed out. Checked before redelivered records are told
    apart from new ones, so a stale owner is told so whatever its batch holds."""
    for turn in sorted(fencing):
        held = current.get(turn, 0)
        if fencing[turn] != held:
            raise IngestError(
                409,
                "fenced",
                f"turn {turn!r}: fencing token {fencing[turn]} is not the turn's current token {held}",
                turn=turn,
                token=fencing[turn],
                current=held,
            )


def check_fencing_required(current: Mapping[str, int], new_turns: set[str], fencing: Mapping[str, int]) -> None:
    """409 `fencing_required` when a record the batch would store names a turn that has been claimed and the
    header names no token for it. A turn never claimed takes records without one, as before claims existed;
    a redelivered record (already stored, same bytes) changes nothing and needs none."""
    for turn in sorted(new_turns - set(fencing)):
        if turn in current:
            raise IngestError(
                409,
                "fencing_required",
                f"turn {turn!r} has been claimed: a batch naming it must carry its fencing token (LoopX-Fencing)",
                turn=turn,
            )


def fencing_precheck(run_id: str, fencing: Mapping[str, int]) -> None:
    """Fencing first: a batch that names a stale token is `fenced`, whatever else is wrong with it, so that a
    stale owner learns the one thing that matters (stop writing this turn). Read without the run's lock:
    a turn's token only grows, so a token found stale here stays stale; the check under the lock
    (``check_fenced``) still decides for a token that is current now."""
    if fencing:
        current = dict(
            Turn.objects.filter(run__run_id=run_id, turn_id__in=sorted(fencing), fencing_counter__gt=0).values_list(
                "turn_id", "fencing_counter"
            )
        )
        check_fenced(current, fencing)


# --- The door check (engine/door.py): what a batch would break, refused under LoopX-Expect ------------


def _stored_forks(run: Run, through_seq: int) -> dict[int, str]:
    """new branch -> the digest of the `fork` record stored through ``through_seq`` that created it (the
    first one, as the engine reads them). Read only when a batch forks or writes on a branch that has no
    record yet."""
    created: dict[int, str] = {}
    rows = (
        JournalRecord.objects.filter(run=run, kind="fork", seq__lte=through_seq)
        .order_by("seq")
        .values_list("line", "digest")
    )
    for line, digest in rows:
        try:
            obj = orjson.loads(bytes(line))
        except orjson.JSONDecodeError:
            continue
        new = obj.get("new_branch") if type(obj) is dict else None
        if type(new) is int:
            created.setdefault(new, digest)
    return created


def _door_heads(
    run: Run, branches: Mapping[int, Branch], numbers: Iterable[int], has_fork: bool, through_seq: int
) -> tuple[dict[int, Head], int | None]:
    """Where each branch in ``numbers`` stands (its contiguous head's lsn and digest, one query for all) and,
    when the batch holds a fork (``has_fork``), the highest branch a stored fork created."""
    heads: dict[int, Head] = {}
    wanted: dict[int, int] = {}
    unforked: list[int] = []
    for number in numbers:
        known = branches.get(number)
        committed = known.committed_lsn if known is not None else -1
        if committed >= 0:
            wanted[number] = committed
        elif number == 0:
            heads[0] = Head(-1, None)
        else:
            unforked.append(number)
    if wanted:
        where = Q()
        for number, lsn in wanted.items():
            where |= Q(branch=number, lsn=lsn)
        for number, digest in JournalRecord.objects.filter(run=run).filter(where).values_list("branch", "digest"):
            heads[number] = Head(wanted[number], digest)
    if not unforked and not has_fork:
        return heads, None
    forks = _stored_forks(run, through_seq)
    for number in unforked:
        heads[number] = Head(-1, forks.get(number))
    return heads, max([0, *branches, *forks])


def _door_refusal(fault: DoorFault) -> IngestError:
    """A chain fault (the writer's lsn or prev) is 409 `chain_mismatch`, naming the lsn and prev it needs;
    a record broken by itself is 422 `record_invalid`. Both name the engine's code (``violation``)."""
    chain = fault.code in CHAIN_CODES
    needed = {"expected_lsn": fault.expected_lsn, "expected_prev": fault.expected_prev} if chain else {}
    return IngestError(
        409 if chain else 422,
        "chain_mismatch" if chain else "record_invalid",
        f"{fault.detail}; nothing stored",
        fault.line,
        violation=str(fault.code),
        branch=fault.branch,
        lsn=fault.lsn,
        **needed,
    )


def door_check(
    run: Run, branches: Mapping[int, Branch], new: list[Prepared], expect: Mapping[int, int], through_seq: int
) -> list[DoorFault]:
    """The run-level faults the new records would bring (engine/door.py). Under ``LoopX-Expect`` the first
    fault on a branch the header names refuses the batch: a writer that says where it stands has made a
    mistake the run would carry for good. Without it the batch is evidence: stored, the faults listed.
    ``branches`` and ``through_seq``: the store as it was before the batch."""
    if not new:
        return []
    has_fork = any(rec.kind == "fork" for rec in new)
    heads, highest = _door_heads(run, branches, {rec.branch for rec in new}, has_fork, through_seq)
    faults = door_faults(
        [DoorRecord(rec.line_no, rec.obj, record_digest(rec), rec.invalid, rec.raw) for rec in new],
        heads,
        highest=highest,
    )
    for fault in faults:
        if fault.branch in expect:
            raise _door_refusal(fault)
    return faults


def batch_turns(records: Iterable[Prepared]) -> set[str]:
    return {rec.turn for rec in records if rec.turn is not None}


# One `ingest_finished` event per batch (accepted, conflict or refused by code) for the metrics.
class Projected(NamedTuple):
    touched: list[Branch]
    turns: list[PlannedTurn]


def project(
    run: Run, branches: dict[int, Branch], new: list[Prepared], beyond: dict[int, set[int]], now: datetime
) -> Projected:
    """The batch's projection in memory (no query): the run's chain and counters, the branches' cursors,
    the newly planned turns."""
    first_seq = run.last_seq + 1
    _chain(run, new)
    touched = _advance_branches(run, branches, new, beyond)
    turns = _planned_turns(new, first_seq)
    run.updated_at = run.changed_at = now
    return Projected(touched, turns)


def finish_checkpoints(run: Run, new: list[Prepared]) -> None:
    """The batch's checkpoints, the last write of every batch, whichever path stored its rows."""
    _store_checkpoints(run, new, run.last_seq - len(new) + 1)
    # Test-only (kernel/failpoints.py): the composition gate kills the web process here, with the
    # whole batch written but not committed, and checks that none of it survives.
    failpoint("records_ingest.before_commit", key=run.run_id)


def _chain(run: Run, new: list[Prepared]) -> None:
    """The run's prefix identity after the batch: counts, last seq, the digest chained over the records."""
    prefix = run.prefix_digest
    sha256 = hashlib.sha256
    for rec in new:
        prefix = sha256((prefix + (rec.digest or record_digest(rec))).encode()).hexdigest()
    run.record_count += len(new)
    run.last_seq += len(new)
    run.prefix_digest = prefix


def _advance_branches(
    run: Run, branches: dict[int, Branch], new: list[Prepared], beyond: dict[int, set[int]]
) -> list[Branch]:
    """Move the cursors of the branches the batch touches (in memory, no query); returns them."""
    by_branch: dict[int, set[int]] = {}
    for rec in new:
        by_branch.setdefault(rec.branch, set()).add(rec.lsn)
    created: list[Branch] = []
    changed: list[Branch] = []
    for number, lsns in by_branch.items():
        branch = branches.get(number)
        if branch is None:
            branch = Branch(run=run, number=number)
            branches[number] = branch
            created.append(branch)
        else:
            changed.append(branch)
        # The batch's records count; those stored beyond a gap earlier only move the cursor.
        branch.record_count += len(lsns)
        known = lsns | beyond[number] if number in beyond else lsns
        committed = branch.committed_lsn
        while committed + 1 in known:
            committed += 1
        branch.committed_lsn = committed
        branch.last_lsn = max(branch.last_lsn, max(lsns))
    return created + changed


def _plan_of(obj: dict[str, Any]) -> list[str]:
    plan = obj.get("phases", obj.get("stages"))
    if isinstance(plan, list) and plan and all(isinstance(p, str) for p in plan):
        return plan
    return list(DEFAULT_PHASES)


class PlannedTurn(NamedTuple):
    turn_id: str
    lineage: str | None
    branch: int
    plan: list[str]
    first_seq: int


def _planned_turns(new: list[Prepared], first_seq: int) -> list[PlannedTurn]:
    """Turns become listable as soon as they are planned; the assessment fills in their decision."""
    turns: dict[str, PlannedTurn] = {}
    for offset, rec in enumerate(new):
        if rec.kind == "turn_planned" and rec.turn is not None and rec.turn not in turns:
            lineage = rec.obj.get("lineage")
            turns[rec.turn] = PlannedTurn(
                rec.turn,
                storable(lineage) if isinstance(lineage, str) else None,
                rec.branch,
                storable(_plan_of(rec.obj)),
                first_seq + offset,
            )
    return list(turns.values())


def _store_checkpoints(run: Run, new: list[Prepared], first_seq: int) -> None:
    checkpoints = [(first_seq + offset, rec) for offset, rec in enumerate(new) if rec.kind == "checkpoint"]
    if checkpoints:
        ids = dict(JournalRecord.objects.filter(run=run, seq__in=[s for s, _ in checkpoints]).values_list("seq", "pk"))
        rows = []
        for seq, rec in checkpoints:
            covers, state_digest = rec.obj.get("covers_lsn"), rec.obj.get("state_digest")
            rows.append(
                Checkpoint(
                    run=run,
                    record_id=ids[seq],
                    branch=rec.branch,
                    lsn=rec.lsn,
                    covers_lsn=covers if is_int(covers) and abs(covers) <= MAX_LSN else None,
                    state_digest=(
                        storable(state_digest) if isinstance(state_digest, str) and len(state_digest) <= 64 else None
                    ),
                )
            )
        Checkpoint.objects.bulk_create(rows)


class IngestWalk(Protocol):
    """A store's whole ingest of a split batch under the run's lock (journals/store.py, ``records_ingest``)."""

    def __call__(
        self, *, run_id: str, lines: list[bytes], fencing: Mapping[str, int], expect: Mapping[int, int]
    ) -> IngestResult: ...
