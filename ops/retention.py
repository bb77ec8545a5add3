"""Retention: completed runs older than ``LOOPX_RETENTION_DAYS`` leave the database, into verified packages.

The journal store is append-only, down to a PostgreSQL trigger on ``journals_journalrecord``. Retention
is the one sanctioned exception, and it is narrow:

- Only runs that are finished and quiet are candidates: no record for ``days``, assessed through their
  last record, not blocked, every turn ``complete`` or ``discarded`` (at least one ``complete``), no
  unresolved finding (open or acknowledged), no pending assessment, no live claim. Runs that the audit
  trail names (operator actions, evidence, gate decisions, recovery audits) are kept whole: that trail is
  append-only evidence of what people and the gate decided and retention never deletes it. So are runs
  that any other model's rows point at (``_unknown_reference``): a model added later is safe by default.
- The run's records are exported first, in seq order, to a recovery package (recovery.packages
  ``build_package``), which is then verified (``check_package``) and its bytes re-hashed from disk. Only
  a verified package whose sha256 matches lets the removal go ahead.
- The removal is one transaction: the run row is locked and re-checked (a record that arrived during the
  export aborts it), ``set_config('loopx.retention', 'on', true)`` opens the trigger for this
  transaction only (notifications/migrations/0003_retention_trigger.py: DELETE only, UPDATE never), the
  run's rows are deleted, and an OperatorAction ``retention_remove`` by the system actor records the run,
  its prefix digest and the package's sha256.
- :func:`reimport` puts a package back through the ingest service: the records come back byte for byte,
  in the same seq order (the package holds exactly the stored lines).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from audits.models import ChainCursor
from journals.models import (
    Branch,
    Checkpoint,
    Intent,
    JournalRecord,
    PendingAssessment,
    Phase,
    Run,
    Turn,
    TurnEffective,
)
from journals.services import records_ingest
from kernel import context
from kernel.dialect import set_local
from kernel.events import emit, package_rejected
from recovery.models import (
    Assessment,
    FoldSnapshot,
    GateDecision,
    OperatorEvidence,
    OutputEntry,
    SnapshotPart,
    TurnAssessment,
    TurnClaim,
)
from recovery.packages import build_package, check_package, restore_package
from recovery.recovery_audits.models import RecoveryAudit
from trail.models import OperatorAction
from trail.services import operator_action_record

from .integrations import FINDING_UNRESOLVED_STATES

logger = logging.getLogger("loopx.retention")

SYSTEM_ACTOR = "system:retention"
ACTION_KIND = "retention_remove"
KEEP_DECISIONS = ("complete", "discarded")


@dataclass
class SweepReport:
    enabled: bool
    days: int
    cutoff: str | None = None
    removed: list[dict[str, Any]] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "days": self.days,
            "cutoff": self.cutoff,
            "removed": self.removed,
            "kept": self.kept,
            "errors": self.errors,
        }


class RetentionRefused(Exception):
    """The run is not (or no longer) eligible; the message says why in a few words."""


def retention_dir() -> Path:
    return Path(getattr(settings, "LOOPX_RETENTION_DIR", Path(settings.VAR_DIR) / "retention"))


def package_name(run_id: str, last_seq: int, prefix_digest: str) -> str:
    # Run ids are arbitrary text: a readable slug plus a hash of the exact id keeps names safe and unique.
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", run_id)[:60].strip("-.") or "run"
    ident = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{slug}-{ident}-seq{last_seq}-{prefix_digest[:12]}.tar.gz"


def _candidates(cutoff: Any) -> Any:
    return (
        Run.objects.filter(updated_at__lt=cutoff, record_count__gt=0, blocked_reason__isnull=True)
        .filter(assessed_seq=F("last_seq"))
        .order_by("updated_at", "id")
    )


def ineligible_reason(run: Any) -> str | None:
    """Why ``run`` must stay, or None when it may go. Read again under the row lock before removal."""
    if run.blocked_reason:
        return "blocked"
    if run.assessed_seq != run.last_seq:
        return "not_assessed"
    turns = Turn.objects.filter(run=run)
    if turns.filter(Q(decision__isnull=True) | ~Q(decision__in=KEEP_DECISIONS)).exists():
        return "unresolved_turns"
    if not turns.filter(decision="complete").exists():
        return "no_completed_turn"
    if run.findings.filter(state__in=FINDING_UNRESOLVED_STATES).exists():
        return "open_findings"
    if PendingAssessment.objects.filter(run=run, pending=True).exists():
        return "assessment_pending"
    now = timezone.now()
    if TurnClaim.objects.filter(turn__run=run, released_at__isnull=True, expires_at__gt=now).exists():
        return "claimed"
    for model in (OperatorAction, OperatorEvidence, GateDecision, RecoveryAudit):
        if model.objects.filter(run=run).exists():
            return "audit_trail"
    return _unknown_reference(run)


# What _delete_run_rows deletes (app label, model name). Any other model with rows pointing at the run's
# rows keeps the run: retention never deletes, or orphans, what it was not written to know about.
_DELETED_HERE = frozenset(
    {
        ("recovery", "finding"),
        ("audits", "chaincursor"),
        ("journals", "pendingassessment"),
        ("recovery", "turnassessment"),
        ("recovery", "outputentry"),
        ("recovery", "foldsnapshot"),
        ("recovery", "snapshotpart"),
        ("recovery", "assessment"),
        ("recovery", "turnclaim"),
        ("journals", "phase"),
        ("journals", "intent"),
        ("journals", "turneffective"),
        ("journals", "turn"),
        ("journals", "checkpoint"),
        ("journals", "journalrecord"),
        ("journals", "branch"),
    }
)
# How a row of each deleted model leads back to its run.
_PATH_TO_RUN = {
    ("journals", "run"): "",
    ("journals", "turn"): "run",
    ("journals", "journalrecord"): "run",
    ("journals", "branch"): "run",
    ("recovery", "assessment"): "run",
    ("recovery", "turnclaim"): "turn__run",
}


def _unknown_reference(run: Any) -> str | None:
    for model in apps.get_models():
        label = (model._meta.app_label, model._meta.model_name)
        if label in _DELETED_HERE:
            continue
        for rel in model._meta.get_fields():
            if not (rel.concrete and rel.is_relation and (rel.many_to_one or rel.one_to_one)):
                continue
            target = rel.related_model
            # A model's model_name is always set; the stubs type it as optional.
            path = _PATH_TO_RUN.get((target._meta.app_label, target._meta.model_name)) if target else None  # type: ignore[arg-type]
            if path is None:
                continue
            lookup = f"{rel.name}__{path}" if path else rel.name
            if model._default_manager.filter(**{lookup: run}).exists():
                return f"referenced_by:{label[0]}.{label[1]}"
    return None


def _journal_bytes(run: Any) -> bytes:
    lines = JournalRecord.objects.filter(run=run).order_by("seq").values_list("line", flat=True)
    return b"".join(bytes(line) + b"\n" for line in lines.iterator(chunk_size=2000))


def _state_files(run: Any) -> dict[str, bytes]:
    """What the package keeps beside the journal: the run's identity and its resolved findings."""
    findings = [
        {
            "kind": f.kind,
            "subject": f.subject,
            "fact_key": f.fact_key,
            "state": f.state,
            "first_seen": f.first_seen.isoformat(),
            "last_seen": f.last_seen.isoformat(),
            "resolved_at": f.resolved_at.isoformat() if f.resolved_at else None,
            "resolution_reason": f.resolution_reason,
        }
        for f in run.findings.order_by("id")
    ]
    meta = {
        "run": run.run_id,
        "record_count": run.record_count,
        "last_seq": run.last_seq,
        "prefix_digest": run.prefix_digest,
        "exported_at": timezone.now().isoformat(),
        "findings": findings,
    }
    return {"retention.json": json.dumps(meta, sort_keys=True, indent=1).encode()}


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


def export_run(run: Any, directory: Path | None = None) -> tuple[Path, str]:
    """Write and verify the run's package. Returns (path, sha256). Raises RetentionRefused if unverified."""
    directory = directory or retention_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / package_name(run.run_id, run.last_seq, run.prefix_digest)
    sha = build_package(path, run.run_id, _journal_bytes(run), _state_files(run))
    report = check_package(path)
    if not report.accepted:
        codes = report.codes()
        path.unlink(missing_ok=True)  # an unverified package is no copy of anything
        emit(package_rejected, code=codes[0], package=path.name, run_id=run.run_id, detail="retention export")
        raise RetentionRefused(f"package failed verification: {', '.join(codes)}")
    if _file_sha256(path) != sha:
        path.unlink(missing_ok=True)
        raise RetentionRefused("package bytes on disk differ from what was written")
    return path, sha


def _allow_journal_delete() -> None:
    """Open the append-only trigger for DELETE, for the current transaction only (PostgreSQL)."""
    set_local("loopx.retention", "on")


def _forbid_journal_delete() -> None:
    """Close the trigger again at once: the flag must not outlive this run's delete, even when the caller
    wrapped the sweep in a longer transaction."""
    set_local("loopx.retention", "off")


def _delete_run_rows(run: Any) -> dict[str, int]:
    """Delete every row of the run, children first. The caller holds the transaction and the run's lock."""
    counts: dict[str, int] = {}

    def remove(label: str, queryset: Any) -> None:
        counts[label] = queryset._raw_delete(queryset.db)  # no cascade collection: the order below is it

    remove("findings", run.findings.all())
    remove("pending_assessments", PendingAssessment.objects.filter(run=run))
    remove("chain_cursors", ChainCursor.objects.filter(run=run))
    remove("turn_assessments", TurnAssessment.objects.filter(assessment__run=run))
    remove("output_entries", OutputEntry.objects.filter(run=run))
    remove("fold_snapshots", FoldSnapshot.objects.filter(run=run))
    remove("snapshot_parts", SnapshotPart.objects.filter(run=run))
    remove("assessments", Assessment.objects.filter(run=run))
    remove("claims", TurnClaim.objects.filter(turn__run=run))
    remove("phases", Phase.objects.filter(turn__run=run))
    remove("intents", Intent.objects.filter(turn__run=run))
    remove("turn_states", TurnEffective.objects.filter(run=run))
    remove("turns", Turn.objects.filter(run=run))
    remove("checkpoints", Checkpoint.objects.filter(run=run))
    _allow_journal_delete()
    # JournalRecord's manager refuses delete(); a raw DELETE (no signals, no cascade collection) under the
    # trigger's retention flag is the sanctioned path (module docstring). UPDATE stays refused.
    remove("records", JournalRecord.objects.filter(run=run))
    _forbid_journal_delete()
    remove("branches", Branch.objects.filter(run=run))
    remove("runs", type(run).objects.filter(pk=run.pk))
    return counts


def remove_run(run_id: str, path: Path, sha: str, exported_seq: int, exported_digest: str, days: int) -> dict[str, Any]:
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(run_id=run_id).first()
        if run is None:
            raise RetentionRefused("run vanished")
        if run.last_seq != exported_seq or run.prefix_digest != exported_digest:
            raise RetentionRefused("records arrived during the export")
        reason = ineligible_reason(run)
        if reason:
            raise RetentionRefused(reason)
        before = {
            "run": run.run_id,
            "record_count": run.record_count,
            "last_seq": run.last_seq,
            "prefix_digest": run.prefix_digest,
            "created_at": run.created_at.isoformat(),
            "updated_at": run.updated_at.isoformat(),
        }
        counts = _delete_run_rows(run)
        after = {"package": path.name, "sha256": sha, "format": "tar.gz", "deleted": counts}
        action = operator_action_record(
            actor=None,
            actor_name=SYSTEM_ACTOR,
            kind=ACTION_KIND,
            run=None,  # the run row is gone; `before` names it
            turn=None,
            reason=f"retention: completed run idle for more than {days} days, exported to a verified package",
            before=before,
            after=after,
        )
    return {"run": run_id, "package": str(path), "sha256": sha, "records": counts["records"], "action": action.pk}


def sweep(days: int | None = None, *, limit: int | None = None, dry_run: bool = False) -> SweepReport:
    """Export and remove every eligible run. ``days`` defaults to LOOPX_RETENTION_DAYS (0: off)."""
    days = int(getattr(settings, "LOOPX_RETENTION_DAYS", 0) or 0) if days is None else int(days)
    report = SweepReport(enabled=days > 0, days=days)
    if days <= 0:
        return report
    cutoff = timezone.now() - timedelta(days=days)
    report.cutoff = cutoff.isoformat()
    for run in _iter_candidates(cutoff, limit):
        with context.bind(run=run.run_id):
            reason = ineligible_reason(run)
            if reason:
                report.kept[run.run_id] = reason
                continue
            if dry_run:
                report.removed.append({"run": run.run_id, "dry_run": True})
                continue
            path: Path | None = None
            try:
                path, sha = export_run(run)
                removed = remove_run(run.run_id, path, sha, run.last_seq, run.prefix_digest, days)
            except RetentionRefused as exc:
                if path is not None:
                    # The run stays: a package of a prefix that is no longer the run's would only mislead.
                    path.unlink(missing_ok=True)
                report.kept[run.run_id] = str(exc)
                logger.info("retention kept a run", extra={"event": "retention.kept", "reason": str(exc)})
                continue
            except Exception as exc:  # one bad run must not stop the sweep; it is retried next time
                report.errors[run.run_id] = type(exc).__name__
                logger.exception("retention failed for a run", extra={"event": "retention.error"})
                continue
            report.removed.append(removed)
            logger.info(
                "retention removed a run",
                extra={
                    "event": "retention.removed",
                    "sha256": removed["sha256"],
                    "records": removed["records"],
                    "package": Path(removed["package"]).name,
                },
            )
    return report


def _iter_candidates(cutoff: Any, limit: int | None) -> Iterator[Any]:
    queryset = _candidates(cutoff)
    if limit:
        queryset = queryset[:limit]
    yield from list(queryset)


def reimport(path: str | Path) -> dict[str, Any]:
    """Verify a package and ingest its journal through the store's ingest service, in seq order.

    Batches respect the ingest limits; records already stored are duplicates (so a re-import is idempotent).
    """
    path = Path(path)
    report = check_package(path)
    if not report.accepted:
        raise RetentionRefused(f"package failed verification: {', '.join(report.codes())}")
    with tempfile.TemporaryDirectory(prefix="loopx-reimport-") as tmp:
        target = Path(tmp) / "package"
        restore_package(path, target)
        journal = (target / "journal.jsonl").read_bytes()
        manifest = json.loads((target / "manifest.json").read_bytes()) if (target / "manifest.json").exists() else {}
    run_id = manifest.get("run") or _run_of_first_line(journal)
    stored = duplicates = 0
    for body in _batches(journal):
        result = records_ingest(run_id=run_id, body=body, content_type="application/x-ndjson", token=None)
        stored += result.stored
        duplicates += result.duplicates
    return {"run": run_id, "stored": stored, "duplicates": duplicates}


def _run_of_first_line(journal: bytes) -> str:
    first = journal.split(b"\n", 1)[0]
    value = json.loads(first).get("run")
    if not isinstance(value, str):
        raise RetentionRefused("the package's journal names no run")
    return value


def _batches(journal: bytes) -> Iterator[bytes]:
    max_records = int(settings.LOOPX_INGEST_MAX_BATCH_RECORDS)
    max_bytes = int(settings.LOOPX_INGEST_MAX_BATCH_BYTES)
    lines = journal.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    batch: list[bytes] = []
    size = 0
    for line in lines:
        if batch and (len(batch) >= max_records or size + len(line) + 1 > max_bytes):
            yield b"\n".join(batch) + b"\n"
            batch, size = [], 0
        batch.append(line)
        size += len(line) + 1
    if batch:
        yield b"\n".join(batch) + b"\n"
