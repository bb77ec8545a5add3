"""Writes of the journal store: API tokens and record ingest.

Ingest (`records_ingest`) is the receipt layer of the contract: a batch is validated as a whole, then
committed in one transaction or not at all. Only *malformed input* is refused (not one JSON object, a
bad envelope, limits); a well-formed record that breaks the contract is stored, because it is evidence
and the assessment blocks on it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from urllib.parse import unquote

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from engine import is_int as _is_int
from engine import offset_mismatches, parse_canonical_batch
from engine.canonical import RECORD_INVALID, canonical_bytes, parse_line
from engine.door import CHAIN_CODES, DoorFault, DoorRecord, Head, door_faults
from engine.types import DEFAULT_PHASES
from journals.assessment_flag import assessment_request
from journals.models import (
    ID_MAX,
    ApiToken,
    Branch,
    Checkpoint,
    JournalRecord,
    Run,
    Turn,
)
from journals.storable import is_storable, storable
from kernel.dialect import on_postgresql
from kernel.errors import ServiceError
from kernel.events import instrument_ingest
from kernel.failpoints import failpoint

TOKEN_PREFIX = "lxr_"  # noqa: S105  the public prefix of every token, not a secret
_MAX_BRANCH = 2**31 - 1
_MAX_LSN = 2**63 - 1
_MAX_V = 2**31 - 1
# Writers we know (the JSONL family); a JSON array is accepted too and re-serialised canonically.
JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines", "text/plain")
JSON_TYPES = ("application/json",)


# --- API tokens -------------------------------------------------------------------------------------


def api_token_touch(*, token: ApiToken) -> None:
    """Note the token's use, at most once a minute, so that a busy runtime does not write on every call."""
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > timedelta(seconds=60):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


# --- Ingest -----------------------------------------------------------------------------------------


class IngestError(ServiceError):
    """A batch refused as a whole (nothing of it stored)."""


@dataclass(slots=True)
class _Prepared:
    line_no: int
    raw: bytes
    branch: int
    lsn: int
    # None until needed (``_digest``): the sha256 of the line's bytes, computed once (on PostgreSQL while the
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


def _split(body: bytes, content_type: str) -> list[bytes]:
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
    lines are recognised cheaply (``_canonical_object``; ``_prepare_all`` proves a whole batch at once);
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
    ``_digest``); IngestError (with its line number) at the first line that is not one complete JSON object.

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


def _prepare_all(lines: list[bytes], run_id: str) -> list[_Prepared]:
    """Every line parsed and its envelope checked (a batch is 1,000s of lines: the per-line cost is most of
    ingest's CPU). Each line is parsed once, and hashed at most once (``_digest``)."""
    objs, digests, invalid = _parse_all(lines)
    prepared = _prepare_rows(objs, digests, lines, run_id, 1)
    for rec in prepared:
        rec.invalid = invalid.get(rec.line_no)
    return prepared


def _prepare_rows(
    objs: list[dict[str, Any]], digests: list[str | None], lines: list[bytes], run_id: str, first_number: int
) -> list[_Prepared]:
    """The envelope of each parsed line checked, in order (``first_number``: the first line's number in the
    batch); IngestError at the first line refused. Shared by ``_prepare_all`` and the streamed path."""
    prepared: list[_Prepared] = []
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
        if type(branch) is not int or not 0 <= branch <= _MAX_BRANCH:
            raise IngestError(400, "envelope_invalid", "`branch` must be an integer >= 0", number)
        if type(lsn) is not int or not 0 <= lsn <= _MAX_LSN:
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
        append(_Prepared(number, raw, branch, lsn, digest, kind, v, turn, obj))
    return prepared


def _digest(rec: _Prepared) -> str:
    """The record's digest: the engine's for a line that is not canonical (set by ``_parse_all``), else the
    sha256 of its bytes, computed once."""
    digest = rec.digest
    if digest is None:
        digest = rec.digest = hashlib.sha256(rec.raw).hexdigest()
    return digest


def _conflict(rec: _Prepared, stored_digest: str) -> IngestError:
    return IngestError(
        409,
        "lsn_conflict",
        f"branch {rec.branch} lsn {rec.lsn} is already stored with other bytes",
        rec.line_no,
        branch=rec.branch,
        lsn=rec.lsn,
        stored_digest=stored_digest,
        received_digest=_digest(rec),
    )


def _lock_run(run_id: str) -> tuple[Run, dict[int, Branch]]:
    """The run, locked for the batch (created on its first batch), and its branches' cursors. The lock
    serialises ingest (seq assignment, cursors) per run; SQLite's IMMEDIATE transactions already do."""
    run = Run.objects.select_for_update().filter(run_id=run_id).first()
    if run is None:
        created, _ = Run.objects.get_or_create(run_id=run_id)
        run = Run.objects.select_for_update().get(pk=created.pk)
    return run, {b.number: b for b in Branch.objects.filter(run=run)}


# --- Conditional writes (contract section 9: LoopX-Fencing and LoopX-Expect) --------------------------

_MAX_CONDITIONS = 1000  # entries in one header: more than a batch's records could name


def fencing_parse(header: str | None) -> dict[str, int]:
    """``LoopX-Fencing: <turn>=<token>[, ...]``: turn -> the fencing token the writer holds. A turn id is
    percent-encoded (as in a URL path: ``,``, ``=``, ``%``, spaces and non-ASCII characters must be), so any
    id fits. Absent or blank: no entry. 400 `fencing_invalid` for anything else."""
    out: dict[str, int] = {}
    if header is None or not header.strip():
        return out
    parts = header.split(",")
    if len(parts) > _MAX_CONDITIONS:
        raise IngestError(400, "fencing_invalid", f"LoopX-Fencing names more than {_MAX_CONDITIONS} turns")
    for part in parts:
        turn_text, sep, token_text = part.strip().rpartition("=")
        try:
            turn = unquote(turn_text.strip(), errors="strict") if sep and "=" not in turn_text else ""
        except UnicodeDecodeError:
            turn = ""
        token = token_text.strip()
        if not turn or not token.isascii() or not token.isdigit() or len(token) > 19:
            raise IngestError(400, "fencing_invalid", "LoopX-Fencing takes <turn>=<token>[, <turn>=<token> ...]")
        value = int(token)
        if len(turn) > ID_MAX or "\x00" in turn or not is_storable(turn) or not 1 <= value <= _MAX_LSN:
            raise IngestError(400, "fencing_invalid", "LoopX-Fencing names an invalid turn id or token")
        if out.get(turn, value) != value:
            raise IngestError(400, "fencing_invalid", "LoopX-Fencing names a turn twice with two tokens")
        out[turn] = value
    return out


def high_water_parse(text: str | None, *, code: str = "expect_invalid", what: str = "LoopX-Expect") -> dict[int, int]:
    """``<branch>:<lsn>[, ...]`` (``LoopX-Expect``, the gate's ``?expect``): branch -> the last lsn the writer
    believes stored on it, -1 for none (as ``assess_journal --expect``). Absent or blank: no entry."""
    out: dict[int, int] = {}
    if text is None or not text.strip():
        return out
    parts = text.split(",")
    if len(parts) > _MAX_CONDITIONS:
        raise IngestError(400, code, f"{what} names more than {_MAX_CONDITIONS} branches")
    for part in parts:
        branch_text, sep, lsn_text = part.strip().partition(":")
        branch_text, lsn_text = branch_text.strip(), lsn_text.strip()
        digits = lsn_text[1:] if lsn_text.startswith("-") else lsn_text
        if (
            not sep
            or not (branch_text.isascii() and branch_text.isdigit() and len(branch_text) <= 10)
            or not (digits.isascii() and digits.isdigit() and len(digits) <= 19)
        ):
            raise IngestError(400, code, f"{what} takes <branch>:<lsn>[, ...] with lsn -1 for none")
        branch, lsn = int(branch_text), int(lsn_text)
        if branch > _MAX_BRANCH or not -1 <= lsn <= _MAX_LSN:
            raise IngestError(400, code, f"{what} takes a branch >= 0 and an lsn >= -1")
        if out.get(branch, lsn) != lsn:
            raise IngestError(400, code, f"{what} names a branch twice with two lsns")
        out[branch] = lsn
    return out


def _check_expect(branches: Mapping[int, Branch], expect: Mapping[int, int]) -> None:
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


def _fencing_current(run: Run, turns: set[str], fencing: Mapping[str, int]) -> dict[str, int]:
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


def _check_fenced(current: Mapping[str, int], fencing: Mapping[str, int]) -> None:
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


def _check_fencing_required(current: Mapping[str, int], new_turns: set[str], fencing: Mapping[str, int]) -> None:
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


def _fencing_precheck(run_id: str, fencing: Mapping[str, int]) -> None:
    """Fencing first: a batch that names a stale token is `fenced`, whatever else is wrong with it, so that a
    stale owner learns the one thing that matters (stop writing this turn). Read without the run's lock:
    a turn's token only grows, so a token found stale here stays stale; the check under the lock
    (``_check_fenced``) still decides for a token that is current now."""
    if fencing:
        current = dict(
            Turn.objects.filter(run__run_id=run_id, turn_id__in=sorted(fencing), fencing_counter__gt=0).values_list(
                "turn_id", "fencing_counter"
            )
        )
        _check_fenced(current, fencing)


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


def _door(
    run: Run, branches: Mapping[int, Branch], new: list[_Prepared], expect: Mapping[int, int], through_seq: int
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
        [DoorRecord(rec.line_no, rec.obj, _digest(rec), rec.invalid, rec.raw) for rec in new],
        heads,
        highest=highest,
    )
    for fault in faults:
        if fault.branch in expect:
            raise _door_refusal(fault)
    return faults


def _batch_turns(records: Iterable[_Prepared]) -> set[str]:
    return {rec.turn for rec in records if rec.turn is not None}


# One `ingest_finished` event per batch (accepted, conflict or refused by code) for the metrics.
@instrument_ingest
def records_ingest(
    *,
    run_id: str,
    body: bytes,
    content_type: str,
    token: ApiToken | None,
    fencing: Mapping[str, int] | None = None,
    expect: Mapping[int, int] | None = None,
) -> IngestResult:
    """Validate a batch and store it atomically. Raises IngestError (nothing stored) on refusal.

    ``fencing`` (turn -> token, ``LoopX-Fencing``) and ``expect`` (branch -> lsn, ``LoopX-Expect``) make the
    write conditional; both are checked under the run's lock (``_check_fenced``, ``_check_fencing_required``,
    ``_check_expect``)."""
    fencing = dict(fencing or {})
    expect = dict(expect or {})
    if token is not None and not token.allows_run(run_id):
        raise IngestError(403, "run_forbidden", "this token may not write to this run")
    if not run_id or len(run_id) > ID_MAX:
        raise IngestError(400, "identifier_too_long", f"the run id must have 1 to {ID_MAX} characters")
    if not is_storable(run_id):
        raise IngestError(400, "identifier_invalid", "the run id contains a NUL or a lone surrogate")
    _fencing_precheck(run_id, fencing)
    lines = _split(body, content_type)
    if on_postgresql(connection):
        from journals.postgres import records_copy_ingest  # builds on this module

        streamed = records_copy_ingest(run_id=run_id, lines=lines, fencing=fencing, expect=expect)
        if streamed is not None:
            return streamed
        # Rolled back, nothing of it kept: the general path below decides, as for any batch.
    prepared = _prepare_all(lines, run_id)

    # Within the batch: a repeat of the same bytes is a duplicate, other bytes at the same place a conflict.
    fresh: dict[tuple[int, int], _Prepared] = {}
    batch_duplicates = 0
    for rec in prepared:
        seen = fresh.get((rec.branch, rec.lsn))
        if seen is None:
            fresh[(rec.branch, rec.lsn)] = rec
        elif _digest(seen) == _digest(rec):
            batch_duplicates += 1
        else:
            raise _conflict(rec, _digest(seen))

    with transaction.atomic():
        run, branches = _lock_run(run_id)
        current = _fencing_current(run, _batch_turns(prepared), fencing)
        _check_fenced(current, fencing)
        _check_expect(branches, expect)
        duplicates = batch_duplicates + _drop_stored(run, branches, fresh)
        new = list(fresh.values())  # dicts keep insertion order: file order of the batch
        _check_fencing_required(current, _batch_turns(new), fencing)
        violations = _door(run, branches, new, expect, run.last_seq)
        now = timezone.now()
        first_seq = run.last_seq + 1 if new else None
        if new:
            beyond = _stored_beyond_gaps(run, branches, new)
            _insert(run, new, now)
            _finish(run, new, _project(run, branches, new, beyond, now))
    return IngestResult(
        run=run,
        stored=len(new),
        duplicates=duplicates,
        first_seq=first_seq,
        last_seq=run.last_seq,
        branches=sorted(branches.values(), key=lambda b: b.number),
        violations=violations,
    )


class _Projected(NamedTuple):
    touched: list[Branch]
    turns: list[_PlannedTurn]


def _project(
    run: Run, branches: dict[int, Branch], new: list[_Prepared], beyond: dict[int, set[int]], now: datetime
) -> _Projected:
    """The batch's projection in memory (no query): the run's chain and counters, the branches' cursors,
    the newly planned turns."""
    first_seq = run.last_seq + 1
    _chain(run, new)
    touched = _advance_branches(run, branches, new, beyond)
    turns = _planned_turns(new, first_seq)
    run.updated_at = now
    return _Projected(touched, turns)


def _finish(run: Run, new: list[_Prepared], projected: _Projected) -> None:
    """After the rows: the projection written, the pending-assessment flag, the checkpoints."""
    # The run's pending-assessment flag is raised in this transaction; the batch that raises it
    # announces `prefix_moved` on commit (journals/assessment_flag.py).
    _write_projection(run, projected.touched, projected.turns)
    assessment_request(run=run)
    _finish_checkpoints(run, new)


def _finish_checkpoints(run: Run, new: list[_Prepared]) -> None:
    """The batch's checkpoints, the last write of every batch, whichever path stored its rows."""
    _store_checkpoints(run, new, run.last_seq - len(new) + 1)
    # Test-only (kernel/failpoints.py): the composition gate kills the web process here, with the
    # whole batch written but not committed, and checks that none of it survives.
    failpoint("records_ingest.before_commit", key=run.run_id)


def _drop_stored(run: Run, branches: dict[int, Branch], fresh: dict[tuple[int, int], _Prepared]) -> int:
    """Remove records already stored (same digest: duplicate) from ``fresh``; raise on a conflict."""
    candidates: dict[int, list[int]] = {}
    for branch, lsn in fresh:
        known = branches.get(branch)
        # Only lsns at or below the branch's highest stored lsn can already be there.
        if known is not None and lsn <= known.last_lsn:
            candidates.setdefault(branch, []).append(lsn)
    duplicates = 0
    for branch, lsns in candidates.items():
        for start in range(0, len(lsns), 5000):
            chunk = lsns[start : start + 5000]
            stored = JournalRecord.objects.filter(run=run, branch=branch, lsn__in=chunk).values_list("lsn", "digest")
            for lsn, digest in stored:
                rec = fresh[(branch, lsn)]
                if digest != _digest(rec):
                    raise _conflict(rec, digest)
                del fresh[(branch, lsn)]
                duplicates += 1
    return duplicates


def _insert(run: Run, new: list[_Prepared], now: datetime) -> None:
    """Append the batch's records after the run's last seq."""
    first = run.last_seq + 1
    JournalRecord.objects.bulk_create(
        [
            JournalRecord(
                run_id=run.pk,
                seq=seq,
                branch=rec.branch,
                lsn=rec.lsn,
                kind=rec.kind,
                v=rec.v,
                turn=rec.turn,
                digest=_digest(rec),
                line=rec.raw,
                received_at=now,
            )
            for seq, rec in enumerate(new, start=first)
        ],
        batch_size=500,
    )


def _chain(run: Run, new: list[_Prepared]) -> None:
    """The run's prefix identity after the batch: counts, last seq, the digest chained over the records."""
    prefix = run.prefix_digest
    sha256 = hashlib.sha256
    for rec in new:
        prefix = sha256((prefix + (rec.digest or _digest(rec))).encode()).hexdigest()
    run.record_count += len(new)
    run.last_seq += len(new)
    run.prefix_digest = prefix


def _stored_beyond_gaps(run: Run, branches: dict[int, Branch], new: list[_Prepared]) -> dict[int, set[int]]:
    """The lsns stored above the committed cursor of each branch the batch touches that has a gap (records
    stored beyond it earlier): they count once the gap is filled. Read before the batch is written."""
    beyond: dict[int, set[int]] = {}
    for number in {rec.branch for rec in new}:
        branch = branches.get(number)
        if branch is not None and branch.last_lsn > branch.committed_lsn:
            beyond[number] = set(
                JournalRecord.objects.filter(run=run, branch=number, lsn__gt=branch.committed_lsn).values_list(
                    "lsn", flat=True
                )
            )
    return beyond


def _advance_branches(
    run: Run, branches: dict[int, Branch], new: list[_Prepared], beyond: dict[int, set[int]]
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


def _write_projection(run: Run, branches: list[Branch], turns: list[_PlannedTurn]) -> None:
    """Branch cursors, newly planned turns, the run's counters."""
    created = [b for b in branches if b._state.adding]
    changed = [b for b in branches if not b._state.adding]
    if created:
        Branch.objects.bulk_create(created)
    if changed:
        Branch.objects.bulk_update(changed, ["committed_lsn", "last_lsn", "record_count"])
    if turns:
        # The first planning wins; a later one (another lineage) is the assessment's business.
        Turn.objects.bulk_create(
            [
                Turn(run=run, turn_id=t.turn_id, lineage=t.lineage, branch=t.branch, plan=t.plan, first_seq=t.first_seq)
                for t in turns
            ],
            ignore_conflicts=True,
        )
    run.save(update_fields=["record_count", "last_seq", "prefix_digest", "updated_at"])


def _plan_of(obj: dict[str, Any]) -> list[str]:
    plan = obj.get("phases", obj.get("stages"))
    if isinstance(plan, list) and plan and all(isinstance(p, str) for p in plan):
        return plan
    return list(DEFAULT_PHASES)


class _PlannedTurn(NamedTuple):
    turn_id: str
    lineage: str | None
    branch: int
    plan: list[str]
    first_seq: int


def _planned_turns(new: list[_Prepared], first_seq: int) -> list[_PlannedTurn]:
    """Turns become listable as soon as they are planned; the assessment fills in their decision."""
    turns: dict[str, _PlannedTurn] = {}
    for offset, rec in enumerate(new):
        if rec.kind == "turn_planned" and rec.turn is not None and rec.turn not in turns:
            lineage = rec.obj.get("lineage")
            turns[rec.turn] = _PlannedTurn(
                rec.turn,
                storable(lineage) if isinstance(lineage, str) else None,
                rec.branch,
                storable(_plan_of(rec.obj)),
                first_seq + offset,
            )
    return list(turns.values())


def _store_checkpoints(run: Run, new: list[_Prepared], first_seq: int) -> None:
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
                    covers_lsn=covers if _is_int(covers) and abs(covers) <= _MAX_LSN else None,
                    state_digest=(
                        storable(state_digest) if isinstance(state_digest, str) and len(state_digest) <= 64 else None
                    ),
                )
            )
        Checkpoint.objects.bulk_create(rows)
