"""Uploaded recovery packages: receive, verify in the background, import as a run; and export a run.

The transitions of ``PackageUpload`` (recovery/packages/models.py), each a compare-and-set on ``state`` so
that a task delivered twice, or run again after its worker died, finds its work done and changes nothing:

- ``package_upload_receive``: store the bytes under ``LOOPX_PACKAGE_DIR/uploads`` through the atomic-write
  helper (hashing and counting as they stream, refusing past the package size limit), create the row
  ``received`` and publish ``validate_package`` once the row is committed.
- ``package_validate``: ``received``/``checking`` -> ``checking`` -> ``accepted`` or ``rejected``. The whole
  verification (``check_package`` with the settings' limits) runs on the stored file, writing progress into
  the row as it reads. A rejection keeps its findings and creates nothing else; the bytes are removed,
  never unpacked (docs/packages.md, "Findings").
- ``package_import``: ``accepted`` -> ``imported`` or ``import_failed``. ``restore_package`` into a scratch
  directory (which verifies again while it unpacks), then the journal goes through the store's ingest
  service, ``records_ingest``, in batches within its limits, all of them in **one** transaction together
  with the state change: the same redelivery and conflict rules as ingest (a package imported twice stores
  nothing the second time; a conflicting one is a typed failure and nothing of it is stored). Ingest raises
  the run's assessment flag, which publishes ``assess_run`` on commit, as for any batch.

Codes beyond the format's table (they are about this service's own storage or run, not about the package):
``upload_unreadable`` (the stored file is gone or unreadable), ``upload_changed`` (its bytes no longer have
the sha256 they were received with), ``check_timed_out`` (verification did not finish within the task's
time limit) and ``check_failed`` (verification stopped on an unexpected error): what cannot be verified is
refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO

from django.conf import settings
from django.db import transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from journals import access
from journals.actors import Actor
from journals.assessment_flag import assessment_request
from journals.models import ApiToken, JournalRecord, Run
from journals.selectors import journal_bytes
from journals.services import IngestError, complete_record, records_ingest
from kernel.atomic import RESTORE_KIND, atomic_write, clean_stale_temporaries, temporary_sibling
from kernel.errors import ServiceError
from kernel.events import emit, package_rejected
from kernel.failpoints import failpoint
from recovery.findings.services import finding_open_or_touch
from recovery.models import Assessment
from recovery.packages import Limits, PackageUsageError, build_package, check_package, restore_package
from recovery.packages.models import (
    ACCEPTED,
    CHECKING,
    FINAL_STATES,
    IMPORT_FAILED,
    IMPORTED,
    RECEIVED,
    REJECTED,
    JournalCorruption,
    PackageUpload,
)
from recovery.publish import task_publish
from recovery.repair.services import repair_state_files
from trail.services import operator_action_record

logger = logging.getLogger(__name__)

UPLOADS = "uploads"
CHUNK = 1024 * 1024
UPLOAD_UNREADABLE = "upload_unreadable"
UPLOAD_CHANGED = "upload_changed"
CHECK_TIMED_OUT = "check_timed_out"
CHECK_FAILED = "check_failed"
# The same publish retries as the assessment queue (recovery/background.py): a short broker hiccup is
# ridden out; a longer one leaves the upload `received`, and publishing it again is always safe.
# Progress is written at most this often (seconds): a package of 10,000 members must not cost 10,000 UPDATEs.
PROGRESS_INTERVAL = 0.5
STORAGE_CORRUPTION = "storage_corruption"  # the contract's code, and the finding kind that names a kept line


class PackageError(ServiceError):
    """An upload refused before anything was kept (nothing stored, no row)."""


def package_limits() -> Limits:
    return Limits.from_settings(lambda name, default: getattr(settings, name, default))


def upload_dir() -> Path:
    path = Path(settings.LOOPX_PACKAGE_DIR) / UPLOADS
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def upload_path(upload: PackageUpload) -> Path | None:
    return Path(settings.LOOPX_PACKAGE_DIR) / upload.stored_name if upload.stored_name else None


def _chunks(file: Any) -> Iterator[bytes]:
    """The upload's bytes in pieces: a Django UploadedFile, a readable stream, or bytes."""
    if isinstance(file, bytes | bytearray | memoryview):
        data = bytes(file)
        for start in range(0, len(data), CHUNK):
            yield data[start : start + CHUNK]
        return
    if hasattr(file, "chunks"):
        yield from file.chunks(CHUNK)
        return
    while True:
        piece = file.read(CHUNK)
        if not piece:
            return
        yield piece


def actor_principal(actor: Actor) -> tuple[Any, ApiToken | None, str]:
    """(person or None, runtime token or None, display name) of whoever acts: a user, an ApiToken, or the
    API's RuntimePrincipal (journals.authentication) standing for a token."""
    if isinstance(actor, ApiToken):
        return None, actor, f"token:{actor.name}"
    token = getattr(actor, "token", None)
    if getattr(actor, "is_runtime", False) and isinstance(token, ApiToken):
        return None, token, f"token:{token.name}"
    return actor, None, str(getattr(actor, "username", "") or "unknown")[:150]


# --- Receive ------------------------------------------------------------------------------------------


def package_upload_receive(*, file: Any, actor: Actor) -> PackageUpload:
    """Keep an uploaded package (never unpacked) and queue its verification. Raises PackageError (413 over
    the package size limit, 400 for an empty file) with nothing kept."""

    person, token, name = actor_principal(actor)
    limit = int(settings.LOOPX_PACKAGE_MAX_TOTAL_BYTES)
    declared = getattr(file, "size", None)
    if isinstance(declared, int) and declared > limit:
        raise PackageError(413, "package_too_large", f"the file is larger than a package may be ({limit} bytes)")
    upload_id = uuid.uuid4()
    directory = upload_dir()
    clean_stale_temporaries(directory)  # leftovers of writers killed mid-upload
    stored = f"{upload_id.hex}.pkg"
    digest = hashlib.sha256()
    size = 0
    with atomic_write(directory / stored) as fh:  # a failure here removes the temporary: nothing is kept
        for chunk in _chunks(file):
            size += len(chunk)
            if size > limit:
                raise PackageError(
                    413, "package_too_large", f"the file is larger than a package may be ({limit} bytes)"
                )
            digest.update(chunk)
            fh.write(chunk)
    # Test-only (kernel/failpoints.py): a process killed here leaves a file no row names, which the
    # package sweep removes once it is older than its grace period.
    failpoint("package_receive.written")
    try:
        if size == 0:
            raise PackageError(400, "empty_package", "the upload is empty")
        with transaction.atomic():
            upload = PackageUpload.objects.create(
                id=upload_id,
                stored_name=f"{UPLOADS}/{stored}",
                original_name=str(getattr(file, "name", "") or "")[:200],
                sha256=digest.hexdigest(),
                size=size,
                progress_total=size,
                uploader=person,
                token=token,
                uploader_name=name,
            )
            operator_action_record(
                actor=actor, kind="package_upload", reason=f"recovery package uploaded ({size} bytes)",
                after={"upload": str(upload_id), "sha256": upload.sha256, "size": size},
            )
            transaction.on_commit(lambda: package_validation_enqueue(upload_id=upload_id))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            (directory / stored).unlink()
        raise
    return upload


def package_validation_enqueue(*, upload_id: uuid.UUID | str) -> bool:
    """Publish ``validate_package`` for an upload. Never raises: on a broker failure the upload stays
    ``received`` and publishing again (the console's "queue again") is safe."""
    try:
        task_publish("recovery.tasks.validate_package", str(upload_id))
    except Exception:  # any broker or serialisation failure: the row already holds the truth
        logger.warning("could not publish validate_package for upload %s", upload_id, exc_info=True)
        return False
    # The latest publish: the sweep publishes again only when this is older than its grace period.
    PackageUpload.objects.filter(pk=upload_id).update(enqueued_at=timezone.now())
    return True


def package_requeue(*, upload: PackageUpload, actor: Actor) -> bool:
    """An operator queues an unfinished upload's verification again (its task was lost), audited. Refused
    (409) for a finished upload. Returns whether the publish reached the broker (the row says so too)."""

    if upload.state in FINAL_STATES:
        raise PackageError(409, "upload_finished", "this upload is finished; there is nothing to queue")
    with transaction.atomic():
        published = package_validation_enqueue(upload_id=upload.pk)
        operator_action_record(
            actor=actor, kind="package_requeue", reason="verification of an unfinished upload queued again",
            before={"upload": str(upload.pk), "state": upload.state}, after={"published": published},
        )
    return published


# --- Validate -----------------------------------------------------------------------------------------


def _store_progress(upload_pk: uuid.UUID, done: int, total: int) -> None:
    """One progress write, outside any transaction so that the polling page sees it at once."""
    PackageUpload.objects.filter(pk=upload_pk, state=CHECKING).update(
        progress_done=done, progress_total=total, updated_at=timezone.now()
    )


class ThrottledProgress:
    """A progress hook (check_package's, an importer's): monotonic, throttled to one ``write`` per
    ``interval`` seconds. ``total`` fixes the total (else each call's own total counts)."""

    def __init__(self, write: Callable[[int, int], None], interval: float, total: int | None = None) -> None:
        self.write = write
        self.total = total
        self.interval = interval
        self.done = 0
        self.written_at = 0.0

    def __call__(self, done: int, total: int) -> None:
        total = self.total if self.total is not None else max(total, 0)
        done = max(self.done, min(done, total))  # the readers' position may step back (zip seeks)
        if done == self.done:
            return
        self.done = done
        now = time.monotonic()
        if now - self.written_at >= self.interval:
            self.written_at = now
            self.write(done, total)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _remove_bytes(stored_name: str) -> None:
    """Remove an upload's file once its row no longer names it (rejected, imported or failed). Called after
    the state change is written: a crash in between leaves a file no row names, never a row without its
    file."""
    if stored_name:
        with contextlib.suppress(FileNotFoundError):
            (Path(settings.LOOPX_PACKAGE_DIR) / stored_name).unlink()


def package_validate(*, upload: PackageUpload, progress_interval: float = PROGRESS_INTERVAL) -> PackageUpload:
    """Verify a received upload completely (nothing is unpacked). Returns the upload as it now is; an upload
    already past verification is returned unchanged (a redelivered task does nothing)."""
    now = timezone.now()
    # received -> checking; checking -> checking too: a worker that died mid-check left it there, and the
    # redelivered task starts over (verification writes nothing but this row). Two concurrent checks of
    # the same upload are harmless: only one of them can move it on from `checking` below.
    started = PackageUpload.objects.filter(pk=upload.pk, state__in=(RECEIVED, CHECKING)).update(
        state=CHECKING, checking_at=now, updated_at=now, progress_done=0, checks=F("checks") + 1
    )
    upload.refresh_from_db()
    if not started:
        return upload
    failpoint("package_validate.checking")
    path = upload_path(upload)
    findings: list[dict[str, Any]]
    fmt: str | None = None
    members: int | None = None
    try:
        if path is None or _file_sha256(path) != upload.sha256:
            findings = [_finding(UPLOAD_CHANGED, "the stored upload no longer has the sha256 it was received with")]
        else:
            report = check_package(
                path,
                package_limits(),
                progress=ThrottledProgress(
                    lambda done, total: _store_progress(upload.pk, done, total), progress_interval, upload.size
                ),
            )
            findings = [f.to_dict() for f in report.findings]
            fmt, members = report.format, report.members
    except (PackageUsageError, OSError):
        findings = [_finding(UPLOAD_UNREADABLE, "the stored upload cannot be read")]
    return _checked(upload, findings, fmt, members)


def _finding(code: str, detail: str) -> dict[str, Any]:
    return {"code": code, "member": None, "detail": detail}


def _checked(
    upload: PackageUpload, findings: list[dict[str, Any]], fmt: str | None, members: int | None
) -> PackageUpload:
    now = timezone.now()
    stored_name = upload.stored_name
    with transaction.atomic():
        pending = PackageUpload.objects.filter(pk=upload.pk, state=CHECKING)
        if not findings:
            pending.update(
                state=ACCEPTED,
                findings=[],
                format=fmt,
                member_count=members,
                progress_done=upload.size,
                checked_at=now,
                updated_at=now,
            )
        elif pending.update(
            state=REJECTED,
            findings=findings,
            format=fmt,
            member_count=members,
            stored_name="",
            checked_at=now,
            finished_at=now,
            updated_at=now,
        ):
            # A rejected package is an operational event (webhooks, metrics). Only the transition's
            # winner announces it; the upload id names the package, never the uploader's file name.
            emit(package_rejected, code=findings[0]["code"], package=str(upload.pk), detail=f"{len(findings)} findings")
    upload.refresh_from_db()
    if upload.state == REJECTED:
        _remove_bytes(stored_name)  # a refused package is never kept, let alone unpacked
    return upload


def package_abandon(*, upload: PackageUpload, timed_out: bool, detail: str) -> PackageUpload:
    """The task ran out of time (``timed_out``) or failed unexpectedly: a check that did not finish refuses
    the package (fail-closed: what was not verified is refused), an import that did not finish (its
    transaction rolled back) is a typed failure. Left as they were, such uploads would say "checking" or
    "importing" for ever."""
    _checked(upload, [_finding(CHECK_TIMED_OUT if timed_out else CHECK_FAILED, detail)], None, None)
    error = "import_timed_out" if timed_out else "import_error"
    _failed(upload, None, {"error": error, "detail": detail, "line": None})
    upload.refresh_from_db()
    return upload


# --- Import -------------------------------------------------------------------------------------------


def _failed(
    upload: PackageUpload, run_ident: str | None, result: dict[str, Any], findings: list[Any] | None = None
) -> None:
    """accepted -> import_failed with the typed refusal. The bytes go: nothing can make the same import
    succeed later (a conflict stays a conflict), and a package that was refused is not kept."""
    now = timezone.now()
    changes: dict[str, Any] = {
        "state": IMPORT_FAILED,
        "result": result,
        "stored_name": "",
        "finished_at": now,
        "updated_at": now,
    }
    if run_ident is not None:
        changes["run_ident"] = run_ident
    if findings is not None:
        changes["findings"] = findings
    if PackageUpload.objects.filter(pk=upload.pk, state=ACCEPTED).update(**changes):
        _remove_bytes(upload.stored_name)


def package_import(*, upload: PackageUpload, actor: Actor) -> PackageUpload:
    """Import an accepted upload as a run, on behalf of ``actor`` (the uploader: a person, who must still
    hold the operator role, or a runtime token, whose run prefix applies as it does to ingest).

    Returns the upload as it now is: ``imported`` (``result`` has the counts) or ``import_failed``
    (``result`` has the typed refusal; nothing of the package is stored). An upload that is not
    ``accepted`` is returned unchanged (a redelivered task does nothing).
    """
    upload.refresh_from_db()
    if upload.state != ACCEPTED:
        return upload
    person, token, _ = actor_principal(actor)
    if token is not None and not token.active:
        _failed(
            upload, None, {"error": "token_revoked", "detail": "the uploading token has been revoked", "line": None}
        )
    elif token is None and not access.can_operate(person):
        _failed(upload, None, {"error": "import_forbidden", "detail": "the uploader may not import runs", "line": None})
    else:
        _restore_and_ingest(upload, token, person)
    upload.refresh_from_db()
    return upload


def _restore_and_ingest(upload: PackageUpload, token: ApiToken | None, person: Any = None) -> None:
    path = upload_path(upload)
    directory = upload_dir()
    clean_stale_temporaries(directory)
    # The scratch tree sits beside the uploads (same filesystem, same permissions) and goes away at the end.
    # It is named like a restore's temporary (writer's pid and start time), so that the tree of a worker
    # killed mid-import is recognised and removed by the next clean_stale_temporaries above.
    scratch = temporary_sibling(directory / "import", RESTORE_KIND)
    scratch.mkdir(mode=0o700)
    try:
        target = scratch / "restored"
        try:
            if path is None:
                raise PackageUsageError("no stored file")
            report = restore_package(path, target, package_limits())
        except (PackageUsageError, OSError):
            _failed(
                upload, None, {"error": UPLOAD_UNREADABLE, "detail": "the stored upload cannot be read", "line": None}
            )
            return
        if not report.accepted:
            # Verified once, refused now: the stored file changed between the two passes.
            _failed(
                upload,
                None,
                {"error": "package_changed", "detail": "the package failed verification while unpacking", "line": None},
                [f.to_dict() for f in report.findings],
            )
            return
        run_ident = str(json.loads((target / "manifest.json").read_bytes())["run"])
        if token is None and not access.run_scope(user=person).allows(run_ident):
            # A person imports only into the runs of their teams, as a token only into its prefix's.
            _failed(
                upload, None, {"error": "run_forbidden", "detail": "the uploader may not write this run", "line": None}
            )
            return
        try:
            with transaction.atomic():
                # The row lock orders twin tasks: the second waits here, then finds the work done.
                locked = PackageUpload.objects.select_for_update().filter(pk=upload.pk, state=ACCEPTED).first()
                if locked is None:
                    return
                totals, corrupt = journal_ingest(run_ident, target / "journal.jsonl", token)
                result: dict[str, Any] = dict(totals)
                if corrupt:
                    result["corrupt_lines"] = _keep_corrupt_lines(locked, run_ident, corrupt)
                failpoint("package_import.before_commit")
                now = timezone.now()
                PackageUpload.objects.filter(pk=upload.pk, state=ACCEPTED).update(
                    state=IMPORTED,
                    run_ident=run_ident,
                    result=result,
                    stored_name="",
                    finished_at=now,
                    updated_at=now,
                )
        except IngestError as err:
            # The transaction above rolled back: no run, no record of this package is stored.
            _failed(upload, run_ident, err.as_dict())
            return
        _remove_bytes(upload.stored_name)  # the run is in the store now; the export rebuilds a package
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# More lines than this that are not complete records and the journal is not a torn write but damage: the
# import fails typed (each kept line is a row and a finding an operator must look at).
MAX_CORRUPT_LINES = 100


@dataclass
class _CorruptLine:
    """A journal line that is not one complete JSON object, as it was in the package."""

    line_no: int
    offset: int
    data: bytes
    terminated: bool
    after: tuple[int, int] | None  # (branch, lsn) of the complete record before it, None: none before it
    ordinal: int  # how many corrupt lines come between that record and this one


def _position(obj: dict[str, Any]) -> tuple[int, int] | None:
    branch, lsn = obj.get("branch"), obj.get("lsn")
    if isinstance(branch, int) and isinstance(lsn, int) and not isinstance(branch, bool) and not isinstance(lsn, bool):
        return branch, lsn
    return None  # ingest refuses such a record (envelope_invalid): the import fails before this matters


def journal_ingest(
    run_ident: str, journal: Path | BinaryIO, token: ApiToken | None
) -> tuple[dict[str, int], list[_CorruptLine]]:
    """Feed the journal's complete records (a file, or a binary stream read to its end) through
    ``records_ingest`` in batches within its limits (the caller holds the transaction), and return the lines
    that are not complete records (a torn tail), kept aside for ``_keep_corrupt_lines``. Line numbers of a
    refusal are the journal's, not the batch's. Imported histories go through here too
    (recovery/imports/services.py)."""
    max_records = int(settings.LOOPX_INGEST_MAX_BATCH_RECORDS)
    max_bytes = int(settings.LOOPX_INGEST_MAX_BATCH_BYTES)
    totals = {"records": 0, "stored": 0, "duplicates": 0, "batches": 0}
    batch: list[bytes] = []
    numbers: list[int] = []  # the journal line number of each line of the batch
    size = 0
    corrupt: list[_CorruptLine] = []
    after: tuple[int, int] | None = None
    ordinal = 0

    def flush() -> None:
        nonlocal batch, numbers, size
        body = b"\n".join(batch) + b"\n"
        try:
            result = records_ingest(run_id=run_ident, body=body, content_type="application/x-ndjson", token=token)
        except IngestError as err:
            if err.line is not None and 1 <= err.line <= len(numbers):
                err.line = numbers[err.line - 1]
            raise
        totals["records"] += len(batch)
        totals["stored"] += result.stored
        totals["duplicates"] += result.duplicates
        totals["batches"] += 1
        batch, numbers, size = [], [], 0

    offset = 0
    with open(journal, "rb") if isinstance(journal, Path) else contextlib.nullcontext(journal) as fh:
        for line_no, raw in enumerate(fh, start=1):
            # Lines as ingest splits them: on "\n" only; a last line without one is complete all the same.
            terminated = raw.endswith(b"\n")
            line = raw[:-1] if terminated else raw
            obj = complete_record(line)  # ingest's own test: what it would refuse as not_json is kept aside
            if obj is None:
                # Contract section 1: storage_corruption, never repaired by guessing, never dropped. The
                # store takes only complete records, so the line is kept aside, verbatim, with its place.
                corrupt.append(_CorruptLine(line_no, offset, line, terminated, after, ordinal))
                if len(corrupt) > MAX_CORRUPT_LINES:
                    raise IngestError(
                        400,
                        "too_many_corrupt_lines",
                        f"more than {MAX_CORRUPT_LINES} lines of the journal are not complete records",
                        line_no,
                    )
                ordinal += 1
            else:
                after, ordinal = _position(obj), 0
                if batch and (len(batch) >= max_records or size + len(line) + 1 > max_bytes):
                    flush()
                batch.append(line)
                numbers.append(line_no)
                size += len(line) + 1
            offset += len(raw)
    if batch:
        flush()
    return totals, corrupt


def _keep_corrupt_lines(upload: PackageUpload, run_ident: str, lines: list[_CorruptLine]) -> list[dict[str, Any]]:
    """Keep each corrupt line (a JournalCorruption row: verbatim bytes, package, offset, place in the run) with
    an open ``storage_corruption`` finding naming it, in the import's transaction. The same line imported
    again while its finding is unresolved finds its row and only touches the finding. Then the run is
    assessed again (ingest raised the flag only if it stored something). Returns the public summary (no
    bytes)."""
    run = Run.objects.get(run_id=run_ident)
    seqs: dict[tuple[int, int], int] = {}
    for branch, lsn in {line.after for line in lines if line.after is not None}:
        seq = JournalRecord.objects.filter(run=run, branch=branch, lsn=lsn).values_list("seq", flat=True).first()
        seqs[(branch, lsn)] = seq or 0
    summary: list[dict[str, Any]] = []
    for line in lines:
        after_seq = seqs.get(line.after, 0) if line.after is not None else 0
        sha = hashlib.sha256(line.data).hexdigest()
        evidence = {
            "source": "package_import",
            "package": str(upload.pk),
            "line": line.line_no,
            "offset": line.offset,
            "size": len(line.data),
            "sha256": sha,
            "after_seq": after_seq,
            "detail": "a journal line that is not one complete JSON object (a torn write), kept verbatim",
        }
        kept = (
            JournalCorruption.objects.in_force(run)
            .filter(after_seq=after_seq, ordinal=line.ordinal, sha256=sha)
            .select_related("finding")
            .first()
        )
        if kept is not None and kept.finding is not None:
            finding_open_or_touch(kind=STORAGE_CORRUPTION, run=run, fact_key=kept.finding.fact_key, evidence=evidence)
        elif kept is None:
            finding, _ = finding_open_or_touch(
                kind=STORAGE_CORRUPTION, run=run, fact_key=f"journal_line:{upload.pk}:{line.line_no}", evidence=evidence
            )
            kept = JournalCorruption.objects.create(
                run=run,
                upload=upload,
                line_no=line.line_no,
                offset=line.offset,
                data=line.data,
                terminated=line.terminated,
                size=len(line.data),
                sha256=sha,
                after_seq=after_seq,
                ordinal=line.ordinal,
                finding=finding,
            )
        summary.append(
            {"line": line.line_no, "offset": line.offset, "size": len(line.data), "finding": kept.finding_id}
        )
    assessment_request(run=run)
    return summary


def package_process(*, upload_id: str) -> str:
    """The body of ``validate_package``: verify, and import when accepted. Returns the upload's final state
    (or ``missing``)."""
    try:
        pk = uuid.UUID(str(upload_id))
    except ValueError:
        return "missing"
    upload = PackageUpload.objects.filter(pk=pk).select_related("uploader", "token").first()
    if upload is None:
        return "missing"
    upload = package_validate(upload=upload)
    if upload.state == ACCEPTED:
        upload = package_import(upload=upload, actor=upload.token or upload.uploader)
    return upload.state


# --- Export -------------------------------------------------------------------------------------------

EXPORT_FORMATS = ("tar.gz", "tar", "zip")


def run_export(
    *,
    run: Run,
    out_path: str | os.PathLike[str],
    fmt: str = "tar.gz",
    actor: Actor = None,
    actor_name: str | None = None,
    reason: str = "",
) -> str:
    """Write the run's package (journal byte for byte, secrets included: contract section 8, the one raw
    export) to ``out_path`` atomically; returns the package's sha256. A repaired run's package also carries
    each repair and the records it set aside, under ``state/loopx/repairs/`` (recovery/repair/services.py).

    With ``actor`` (or ``actor_name``, a command line) the export is an audited act: the package is built,
    then its ``run_export`` trail row is written; when that fails the file is removed and never handed out
    (the build is not under the trail head's lock, which every writer shares)."""
    sha = build_package(out_path, run.run_id, run_journal_bytes(run=run), repair_state_files(run=run), fmt=fmt)
    if actor is None and actor_name is None:
        return sha
    try:
        with transaction.atomic():
            operator_action_record(
                actor=actor,
                actor_name=actor_name,
                kind="run_export",
                run=run,
                reason=reason or "raw export of the run (journal bytes, secrets included)",
                after={"format": fmt, "sha256": sha, "records": run.record_count, "prefix_key": run.prefix_key},
            )
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out_path)
        raise
    return sha


def run_journal_bytes(*, run: Run) -> bytes:
    """The run's journal as an export carries it: the stored records in seq order, each ended by a newline,
    and, at their places, the corrupt lines kept from imported packages that are still in force (a torn tail
    comes back as it came in, without a newline when it had none, so that import and export round-trip to
    the same bytes). A repaired line (its finding resolved) is left out: the repaired journal is exported."""
    kept = list(JournalCorruption.objects.in_force(run).order_by("after_seq", "ordinal", "id"))
    if not kept:
        return journal_bytes(run=run)
    by_place: dict[int, list[JournalCorruption]] = {}
    for row in kept:
        by_place.setdefault(row.after_seq, []).append(row)
    last = kept[-1] if kept[-1].after_seq >= run.last_seq else None
    parts: list[bytes] = []

    def place(seq: int) -> None:
        for row in by_place.pop(seq, []):
            # Between records a line always ended with a newline; only the journal's last line may lack one.
            parts.append(bytes(row.data) + (b"\n" if row.terminated or row is not last else b""))

    place(0)
    rows = JournalRecord.objects.filter(run=run).order_by("seq").values_list("seq", "line")
    for seq, line in rows.iterator(chunk_size=2000):
        parts.append(bytes(line) + b"\n")
        place(seq)
    for seq in sorted(by_place):  # a place beyond the last record cannot occur; kept rather than lost
        place(seq)
    return b"".join(parts)


# --- Sweep --------------------------------------------------------------------------------------------

_STORED_NAME = re.compile(r"^[0-9a-f]{32}\.pkg$")


@dataclass
class SweepReport:
    republished: list[str] = field(default_factory=list)  # upload ids published again
    publish_failed: list[str] = field(default_factory=list)  # claimed, but the broker refused: next sweep
    orphans_removed: list[str] = field(default_factory=list)  # file names under uploads/
    temporaries_removed: int = 0
    reassessed: list[str] = field(default_factory=list)  # runs whose corrupt lines in force changed

    def as_dict(self) -> dict[str, Any]:
        return {
            "republished": self.republished,
            "publish_failed": self.publish_failed,
            "orphans_removed": self.orphans_removed,
            "temporaries_removed": self.temporaries_removed,
            "reassessed": self.reassessed,
        }


def package_sweep(
    *, grace: timedelta | None = None, orphan_grace: timedelta | None = None, limit: int = 500
) -> SweepReport:
    """The scheduled sweep of uploads (``recovery.tasks.sweep_packages``, on beat and at worker start).
    Every part is idempotent; two sweeps at once publish each stuck upload once."""
    grace = grace if grace is not None else timedelta(seconds=settings.LOOPX_PACKAGE_SWEEP_GRACE_SECONDS)
    orphan_grace = (
        orphan_grace if orphan_grace is not None else timedelta(seconds=settings.LOOPX_PACKAGE_ORPHAN_GRACE_SECONDS)
    )
    report = SweepReport()
    _republish_stuck(report, grace, limit)
    _remove_orphans(report, orphan_grace)
    _reassess_repaired(report, limit)
    return report


def _republish_stuck(report: SweepReport, grace: timedelta, limit: int) -> None:
    """Publish ``validate_package`` again for uploads whose message was lost: still ``received`` longer than
    ``grace`` after their latest publish (or their creation, when the publish never happened: the broker
    was down when the row committed). Also ``checking``/``accepted`` uploads that have not moved for longer
    than the task's hard time limit plus ``grace``: their task is dead (killed, or its message lost with a
    broker that deletes on fetch), since a running one writes progress and is killed at that limit.

    Each republish is claimed first with a compare-and-set on ``enqueued_at`` (the value read must still be
    there): of two sweeps only one claims an upload, and only the claimant publishes. A publish that fails
    leaves the claim, so the next sweep after ``grace`` tries again. Publishing again is safe in any case:
    every step of the task is itself a compare-and-set on the state; the cost of a message that was only
    waiting in a backlog is a second verification, so each further republish of an upload waits twice as
    long as the one before (``sweeps`` counts them)."""
    now = timezone.now()
    cutoff = now - grace
    dead = now - grace - timedelta(seconds=int(settings.LOOPX_PACKAGE_TIME_LIMIT))
    waiting = Q(state=RECEIVED, created_at__lt=cutoff) & (Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=cutoff))
    dropped = Q(state__in=(CHECKING, ACCEPTED), updated_at__lt=dead) & (
        Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=dead)
    )
    stuck = (
        PackageUpload.objects.filter(waiting | dropped)
        .order_by("created_at")
        .values_list("pk", "state", "enqueued_at", "sweeps")[:limit]
    )
    for pk, state, seen, sweeps in list(stuck):
        if seen is not None and seen >= now - grace * 2 ** min(sweeps, 6):
            # Each republish of the same upload waits twice as long as the one before: a backlog in the
            # queue (the message is there, the workers are busy) gets a few extra messages, not one a sweep.
            continue
        if not _claim_republish(pk, state, seen, now):
            continue  # another sweep claimed it, or it moved on
        if package_validation_enqueue(upload_id=pk):
            report.republished.append(str(pk))
        else:
            report.publish_failed.append(str(pk))
    if report.republished or report.publish_failed:
        logger.warning(
            "package sweep: published validate_package again for %d stuck uploads (%d publishes failed)",
            len(report.republished),
            len(report.publish_failed),
        )


def _claim_republish(pk: uuid.UUID, state: str, seen: Any, now: Any) -> bool:
    """Compare-and-set: the upload still has the state and ``enqueued_at`` this sweep read; only then it is
    this sweep's to publish (``enqueued_at`` moves to now, so any other sweep's read is stale)."""
    unchanged = Q(enqueued_at__isnull=True) if seen is None else Q(enqueued_at=seen)
    return bool(
        PackageUpload.objects.filter(unchanged, pk=pk, state=state).update(enqueued_at=now, sweeps=F("sweeps") + 1)
    )


def _remove_orphans(report: SweepReport, orphan_grace: timedelta) -> None:
    """Remove files under ``uploads/`` that no upload names and that are older than ``orphan_grace``: the
    bytes of a receive that died between writing its file and committing its row, or of a final upload
    whose file removal was cut short. Only names this service writes (``<32 hex>.pkg``, regular files, not
    followed through links) are considered; a file that a row names, in any state, or that is younger than
    the grace period (a receive still committing its row) is never touched. Leftovers of writers and
    imports that died (hidden temporaries) go through ``clean_stale_temporaries``."""
    directory = upload_dir()
    report.temporaries_removed = len(clean_stale_temporaries(directory))
    oldest = time.time() - orphan_grace.total_seconds()
    candidates: dict[str, Path] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            if not _STORED_NAME.match(entry.name) or not entry.is_file(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_mtime < oldest:
                candidates[f"{UPLOADS}/{entry.name}"] = directory / entry.name
    names = list(candidates)
    for start in range(0, len(names), 500):
        chunk = names[start : start + 500]
        for named in PackageUpload.objects.filter(stored_name__in=chunk).values_list("stored_name", flat=True):
            candidates.pop(named, None)
    for _stored, path in sorted(candidates.items()):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            report.orphans_removed.append(path.name)
    if report.orphans_removed:
        logger.warning("package sweep: removed %d upload files no upload names", len(report.orphans_removed))


def _reassess_repaired(report: SweepReport, limit: int) -> None:
    """A kept corrupt line stops counting when an operator resolves its finding (the repair); resolving does
    not ask for an assessment, so the run's pages would keep showing it blocked until something else
    assessed it. Runs with such a line resolved after their newest assessment are requested again (the gate
    itself always refreshes the assessment, so it never waited for this)."""
    newest = Assessment.objects.filter(run=OuterRef("run")).order_by("-id").values("created_at")[:1]
    runs = (
        JournalCorruption.objects.filter(finding__state="resolved")
        .annotate(assessed=Subquery(newest))
        .filter(Q(assessed__isnull=True) | Q(finding__resolved_at__gt=F("assessed")))
        .order_by()  # the model's ordering would join the DISTINCT
        .values_list("run_id", flat=True)
        .distinct()[:limit]
    )
    for run in Run.objects.filter(pk__in=list(runs)):
        with transaction.atomic():
            assessment_request(run=run)
        report.reassessed.append(run.run_id)
