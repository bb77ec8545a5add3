"""Audited journal repair (docs/repair.md): preview a typed repair, then apply exactly what was previewed.

``journal_repair_preview`` runs the engine on what the run's journal would be under the repair and stores
nothing; it answers the assessment the repair would produce and a ``preview`` digest of the inputs it was
computed on. ``journal_repair_apply`` takes that digest back: it is refused (409 ``preview_stale``) when the
run's records, evidence, kept lines or repairs moved since, so what applies is what the operator read. The
apply writes the JournalRepair row, resolves the run's chain_broken findings the repair covers, and records
one OperatorAction (``journal_repair``), all in one transaction; the run is then assessed again and the
assessment names the repair. The records are never changed: they stay, byte for byte, in the store and in
every export of the run (``repair_state_files``).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from engine.canonical import canonical_bytes
from engine.types import Assessment as EngineAssessment
from journals.actors import Actor, person_of
from journals.changes import run_change_mark
from journals.models import JournalRecord, Run
from kernel.errors import ServiceError
from recovery.findings.services import findings_resolve_by_repair
from recovery.models import Assessment
from recovery.packages.models import JournalCorruption
from recovery.repair.input import quarantined_turns, repaired_lines, repaired_result, replacement_lines
from recovery.repair.models import ACCEPT_PREFIX, REPAIR_KINDS, SUPERSEDE, JournalRepair, repair_in_force
from recovery.selectors import RUN_LEVEL_CODES, evidence_in_force
from recovery.services import assess, assessment_evidence_digest, assessment_refresh, corrupt_kept
from trail.services import operator_action_record, reason_clean

# The largest corrected journal a supersede takes (the package's member limit by default).
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class RepairError(ServiceError):
    """A repair refused: 400 for a malformed request, 409 when the run's state does not allow it."""


@dataclass
class RepairPreview:
    run: Run
    repair: JournalRepair  # unsaved: what would be written
    result: EngineAssessment
    quarantined: list[str]
    digest: str

    def as_dict(self) -> dict[str, Any]:
        blocked = self.result.run_blocked
        decisions = Counter(td.decision.value for td in self.result.turns)
        return {
            "run": self.run.run_id,
            "preview": self.digest,
            "repair": {k: v for k, v in self.repair.summary().items() if k not in ("id", "created_at")},
            "assessment": {
                "blocked_reason": blocked.code if blocked else None,
                "records": self.result.records,
                "violations": [v.to_dict() for v in self.result.violations][:50],
                "decisions": dict(sorted(decisions.items())),
                "turns": [
                    {"turn": td.turn, "decision": td.decision.value, "reason": td.reason, "resume_from": td.resume_from}
                    for td in self.result.turns[:200]
                ],
            },
            "quarantined_turns": self.quarantined[:200],
        }


def _max_bytes() -> int:
    return int(getattr(settings, "LOOPX_REPAIR_MAX_BYTES", DEFAULT_MAX_BYTES))


def set_aside_bytes(run: Run, *, after: int, through: int) -> bytes:
    """The stored records with after < seq <= through, each ended by a newline, as an export writes them."""
    rows = JournalRecord.objects.filter(run=run, seq__gt=after, seq__lte=through).order_by("seq")
    return b"".join(bytes(line) + b"\n" for line in rows.values_list("line", flat=True).iterator(chunk_size=2000))


def _kept_tail(run: Run) -> list[bytes]:
    return [bytes(d) for d in JournalCorruption.objects.in_force(run).order_by("after_seq", "ordinal", "id")
            .values_list("data", flat=True)]


def _inputs_digest(run: Run, repair: JournalRepair) -> str:
    """The preview's identity: everything the engine read for it, so a stale preview is recognised."""
    current = repair_in_force(run)
    body = {
        "run": run.pk,
        "prefix_key": run.prefix_key,
        "inputs": assessment_evidence_digest(evidence_in_force(run=run), corrupt_kept(run)),
        "repair_in_force": current.pk if current is not None else None,
        "kind": repair.kind,
        "through_seq": repair.through_seq,
        "replacement_sha256": repair.replacement_sha256,
    }
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def _proposed(run: Run, *, kind: Any, through_seq: Any, journal: Any, actor: Actor, reason: str) -> JournalRepair:
    if kind not in REPAIR_KINDS:
        raise RepairError(400, "repair_kind_invalid", f"kind must be one of {', '.join(REPAIR_KINDS)}")
    latest = Assessment.objects.filter(run=run).order_by("-id").first()
    if repair_in_force(run) is None and (latest is None or latest.blocked_reason not in RUN_LEVEL_CODES):
        raise RepairError(
            409, "run_not_broken", "only a run blocked by a run-level fault of its journal is repaired",
            blocked_reason=latest.blocked_reason if latest else None,
        )
    repair = JournalRepair(run=run, kind=kind, at_seq=run.last_seq, at_prefix_key=run.prefix_key,
                           actor_name=_name(actor), reason=reason)
    if kind == ACCEPT_PREFIX:
        if journal not in (None, b"", ""):
            raise RepairError(400, "repair_invalid", "an accepted prefix takes no journal")
        if not isinstance(through_seq, int) or isinstance(through_seq, bool) or not 1 <= through_seq <= run.last_seq:
            raise RepairError(400, "through_seq_invalid",
                              f"through_seq must name a stored record of the run (1 to {run.last_seq})")
        repair.through_seq = through_seq
        aside = set_aside_bytes(run, after=through_seq, through=run.last_seq)
        repair.set_aside_records = run.last_seq - through_seq
    else:
        if through_seq is not None:
            raise RepairError(400, "repair_invalid", "a supersede takes the corrected journal, not through_seq")
        data = journal.encode() if isinstance(journal, str) else journal
        if not isinstance(data, bytes | bytearray) or not data:
            raise RepairError(400, "journal_required", "send the corrected journal the runtime re-sent")
        if len(data) > _max_bytes():
            raise RepairError(413, "journal_too_large", f"the corrected journal is over {_max_bytes()} bytes")
        try:
            bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RepairError(400, "journal_invalid", "the corrected journal is not UTF-8") from exc
        repair.replacement = bytes(data)
        repair.replacement_sha256 = hashlib.sha256(data).hexdigest()
        repair.replacement_records = len(replacement_lines(bytes(data)))
        aside = set_aside_bytes(run, after=0, through=run.last_seq)
        repair.set_aside_records = run.last_seq
        if hashlib.sha256(aside).digest() == hashlib.sha256(data).digest():
            raise RepairError(409, "journal_unchanged", "the corrected journal is the stored journal, byte for byte")
    repair.set_aside_sha256 = hashlib.sha256(aside).hexdigest()
    return repair


def _name(actor: Actor) -> str:
    return str(getattr(actor, "get_username", lambda: "")() or "unknown")[:150]


def journal_repair_preview(
    *, run: Run, kind: Any, actor: Actor, reason: Any = "", through_seq: Any = None, journal: Any = None
) -> RepairPreview:
    """What the run's assessment would be under this repair. Stores nothing. Refused (409
    ``repair_not_verified``) when the repaired journal still has a run-level fault: a repair accepts only a
    prefix, or a corrected journal, that verifies."""
    run = Run.objects.get(pk=run.pk)
    repair = _proposed(run, kind=kind, through_seq=through_seq, journal=journal, actor=actor,
                       reason=reason if isinstance(reason, str) else "")
    current = repair_in_force(run)
    repair.number = (current.number if current else 0) + 1
    tail = _kept_tail(run)
    last_seq = run.last_seq
    raw = assess(lambda: repaired_lines(run.pk, last_seq, tail, repair), evidence=evidence_in_force(run=run))
    blocked = raw.run_blocked
    if blocked is not None:
        raise RepairError(
            409, "repair_not_verified", "the repaired journal still has a run-level fault: name an earlier record, "
            "or send a corrected journal that verifies", violation=str(blocked.code), line=blocked.line,
        )
    result = repaired_result(raw, repair)
    return RepairPreview(run, repair, result, quarantined_turns(repair), _inputs_digest(run, repair))


def journal_repair_apply(
    *, run: Run, kind: Any, actor: Actor, reason: Any, preview: Any, through_seq: Any = None, journal: Any = None
) -> tuple[JournalRepair, Assessment]:
    """Apply the repair previewed as ``preview``; returns it and the run's new assessment, which names it."""
    reason = reason_clean(reason=reason)
    if not isinstance(preview, str) or len(preview) != 64:
        raise RepairError(400, "preview_required", "preview the repair first and send back its `preview` digest")
    seen = journal_repair_preview(run=run, kind=kind, actor=actor, reason=reason, through_seq=through_seq,
                                  journal=journal)
    before = Assessment.objects.filter(run=run).order_by("-id").first()
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)  # ingest and other repairs wait
        if preview != seen.digest or _inputs_digest(locked, seen.repair) != seen.digest:
            raise RepairError(409, "preview_stale", "the run changed since this preview: preview it again")
        repair = seen.repair
        repair.run = locked
        repair.actor = person_of(actor)
        repair.preview_digest = seen.digest
        repair.save()
        run_change_mark(run_pk=locked.pk, at=repair.created_at)  # the run's row is locked already
        resolved = findings_resolve_by_repair(run=locked, repair=repair, actor=actor)
        operator_action_record(
            actor=actor,
            kind="journal_repair",
            run=locked,
            reason=reason,
            before={
                "assessment": before.pk if before else None,
                "blocked_reason": before.blocked_reason if before else None,
                "prefix_key": locked.prefix_key,
            },
            after={**repair.summary(), "resolved_findings": resolved, "preview": seen.as_dict()["assessment"]},
        )
    return repair, assessment_refresh(run=locked)


def repairs_list(*, run: Run) -> list[JournalRepair]:
    return list(JournalRepair.objects.filter(run=run).order_by("number"))


def repair_state_files(*, run: Run) -> dict[str, bytes]:
    """The run's repairs as state files of its package (docs/packages.md allows only ``journal.jsonl``
    and ``state/...``): per repair, its description, the records it set aside (quarantined or superseded)
    byte for byte, and the corrected journal of a supersede. ``journal.jsonl`` stays the stored records as
    they arrived, so an import elsewhere starts from the evidence and applies no repair by itself."""
    files: dict[str, bytes] = {}
    for repair in repairs_list(run=run):
        base = f"loopx/repairs/{repair.number:04d}"
        after = int(repair.through_seq or 0) if repair.kind == ACCEPT_PREFIX else 0
        aside = set_aside_bytes(run, after=after, through=repair.at_seq)
        name = "quarantined.jsonl" if repair.kind == ACCEPT_PREFIX else "superseded.jsonl"
        files[f"{base}/{name}"] = aside
        if repair.kind == SUPERSEDE:
            files[f"{base}/replacement.jsonl"] = bytes(repair.replacement)
        description = {**repair.summary(), "set_aside_member": f"state/{base}/{name}"}
        files[f"{base}/repair.json"] = (json.dumps(description, indent=1, sort_keys=True, ensure_ascii=False)
                                        + "\n").encode()
    return files
