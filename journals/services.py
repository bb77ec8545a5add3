"""Writes of the journal store: API tokens and record ingest.

Ingest (`records_ingest`) is the receipt layer of the contract: a batch is validated as a whole, then
committed in one transaction or not at all. Only *malformed input* is refused (not one JSON object, a
bad envelope, limits); a well-formed record that breaks the contract is stored, because it is evidence
and the assessment blocks on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from urllib.parse import unquote

from django.utils import timezone

from journals.intake import (
    MAX_BRANCH,
    MAX_LSN,
    IngestError,
    IngestResult,
    complete_record,
    fencing_precheck,
    split_batch,
)
from journals.models import ID_MAX, ApiToken
from journals.storable import is_storable
from journals.store import journal_store
from kernel.events import instrument_ingest

# What callers above the store take from here: the refusal, the receipt, and ingest's own test of a line.
__all__ = [
    "TOKEN_PREFIX",
    "IngestError",
    "IngestResult",
    "api_token_touch",
    "complete_record",
    "fencing_parse",
    "high_water_parse",
    "records_ingest",
]

TOKEN_PREFIX = "lxr_"  # noqa: S105  the public prefix of every token, not a secret


# --- API tokens -------------------------------------------------------------------------------------


def api_token_touch(*, token: ApiToken) -> None:
    """Note the token's use, at most once a minute, so that a busy runtime does not write on every call."""
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > timedelta(seconds=60):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


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
        if len(turn) > ID_MAX or "\x00" in turn or not is_storable(turn) or not 1 <= value <= MAX_LSN:
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
        if branch > MAX_BRANCH or not -1 <= lsn <= MAX_LSN:
            raise IngestError(400, code, f"{what} takes a branch >= 0 and an lsn >= -1")
        if out.get(branch, lsn) != lsn:
            raise IngestError(400, code, f"{what} names a branch twice with two lsns")
        out[branch] = lsn
    return out


# --- Ingest -----------------------------------------------------------------------------------------


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
    write conditional; both are checked under the run's lock by the journal store (journals/store.py)."""
    fencing = dict(fencing or {})
    expect = dict(expect or {})
    if token is not None and not token.allows_run(run_id):
        raise IngestError(403, "run_forbidden", "this token may not write to this run")
    if not run_id or len(run_id) > ID_MAX:
        raise IngestError(400, "identifier_too_long", f"the run id must have 1 to {ID_MAX} characters")
    if not is_storable(run_id):
        raise IngestError(400, "identifier_invalid", "the run id contains a NUL or a lone surrogate")
    fencing_precheck(run_id, fencing)
    lines = split_batch(body, content_type)
    return journal_store().records_ingest(run_id=run_id, lines=lines, fencing=fencing, expect=expect)
