"""Uploaded recovery packages: receive, verify in the background, import as a run; and export a run.

The transitions of ``PackageUpload`` (recovery/package_models.py), each a compare-and-set on ``state`` so
that a task delivered twice, or run again after its worker died, finds its work done and changes nothing:

- ``package_upload_receive``: store the bytes under ``LOOPX_PACKAGE_DIR/uploads`` through the atomic-write
  helper (hashing and counting as they stream, refusing past the package size limit), create the row
  ``received`` and publish ``validate_package`` once the row is committed.
- ``package_validate``: ``received``/``checking`` -> ``checking`` -> ``accepted`` or ``rejected``. The whole
  verification (``check_package`` with the settings' limits) runs on the stored file, writing progress into
  the row as it reads. A rejection keeps its findings and creates nothing else; the bytes are removed,
  never unpacked (recovery-package.md, "Restore").
- ``package_import``: ``accepted`` -> ``imported`` or ``import_failed``. ``restore_package`` into a scratch
  directory (which verifies again while it unpacks), then the journal goes through the store's ingest
  service, ``records_ingest``, in batches within its limits, all of them in **one** transaction together
  with the state change: the same redelivery and conflict rules as ingest (a package imported twice stores
  nothing the second time; a conflicting one is a typed failure and nothing of it is stored). Ingest raises
  the run's assessment flag, which publishes ``assess_run`` on commit, as for any batch.

Codes beyond the spec's table (they are about this service's own storage or run, not about the package):
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
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from journals.models import ApiToken, Run
from journals.selectors import journal_bytes
from journals.services import IngestError, records_ingest
from loopx_site import access
from loopx_site.errors import ServiceError
from loopx_site.failpoints import failpoint
from loopx_site.ops.events import emit, package_rejected
from recovery.atomic import RESTORE_KIND, atomic_write, clean_stale_temporaries, temporary_sibling
from recovery.package_models import (
    ACCEPTED,
    CHECKING,
    IMPORT_FAILED,
    IMPORTED,
    RECEIVED,
    REJECTED,
    PackageUpload,
)
from recovery.packages import Limits, PackageUsageError, build_package, check_package, restore_package

logger = logging.getLogger(__name__)

UPLOADS = "uploads"
CHUNK = 1024 * 1024
UPLOAD_UNREADABLE = "upload_unreadable"
UPLOAD_CHANGED = "upload_changed"
CHECK_TIMED_OUT = "check_timed_out"
CHECK_FAILED = "check_failed"
# The same publish retries as the assessment queue (recovery/background.py): a short broker hiccup is
# ridden out; a longer one leaves the upload `received`, and publishing it again is always safe.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
# Progress is written at most this often (seconds): a package of 10,000 members must not cost 10,000 UPDATEs.
PROGRESS_INTERVAL = 0.5


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


def _principal(actor: Any) -> tuple[Any, ApiToken | None, str]:
    """(person or None, runtime token or None, display name) of whoever acts: a user, an ApiToken, or the
    API's RuntimePrincipal (journals.authentication) standing for a token."""
    if isinstance(actor, ApiToken):
        return None, actor, f"token:{actor.name}"
    token = getattr(actor, "token", None)
    if getattr(actor, "is_runtime", False) and isinstance(token, ApiToken):
        return None, token, f"token:{token.name}"
    return actor, None, str(getattr(actor, "username", "") or "unknown")[:150]


# --- Receive ------------------------------------------------------------------------------------------


def package_upload_receive(*, file: Any, actor: Any) -> PackageUpload:
    """Keep an uploaded package (never unpacked) and queue its verification. Raises PackageError (413 over
    the package size limit, 400 for an empty file) with nothing kept."""
    person, token, name = _principal(actor)
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
            transaction.on_commit(lambda: package_validation_enqueue(upload_id=upload_id))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            (directory / stored).unlink()
        raise
    return upload


def package_validation_enqueue(*, upload_id: uuid.UUID | str) -> bool:
    """Publish ``validate_package`` for an upload. Never raises: on a broker failure the upload stays
    ``received`` and publishing again (the console's "queue again") is safe."""
    from recovery.tasks import validate_package  # tasks import this module

    try:
        validate_package.apply_async(args=[str(upload_id)], retry=True, retry_policy=PUBLISH_RETRY_POLICY)
    except Exception:  # any broker or serialisation failure: the row already holds the truth
        logger.warning("could not publish validate_package for upload %s", upload_id, exc_info=True)
        return False
    PackageUpload.objects.filter(pk=upload_id, enqueued_at__isnull=True).update(enqueued_at=timezone.now())
    return True


# --- Validate -----------------------------------------------------------------------------------------


def _store_progress(upload_pk: uuid.UUID, done: int, total: int) -> None:
    """One progress write, outside any transaction so that the polling page sees it at once."""
    PackageUpload.objects.filter(pk=upload_pk, state=CHECKING).update(
        progress_done=done, progress_total=total, updated_at=timezone.now()
    )


class _Progress:
    """check_package's progress hook: monotonic, throttled, written into the row."""

    def __init__(self, upload_pk: uuid.UUID, total: int, interval: float) -> None:
        self.upload_pk = upload_pk
        self.total = total
        self.interval = interval
        self.done = 0
        self.written_at = 0.0

    def __call__(self, done: int, total: int) -> None:
        done = max(self.done, min(done, self.total))  # the readers' position may step back (zip seeks)
        if done == self.done:
            return
        self.done = done
        now = time.monotonic()
        if now - self.written_at >= self.interval:
            self.written_at = now
            _store_progress(self.upload_pk, done, self.total)


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
                path, package_limits(), progress=_Progress(upload.pk, upload.size, progress_interval)
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
            # Issue 8: a rejected package is an operational event (webhooks, metrics). Only the transition's
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


def package_import(*, upload: PackageUpload, actor: Any) -> PackageUpload:
    """Import an accepted upload as a run, on behalf of ``actor`` (the uploader: a person, who must still
    hold the operator role, or a runtime token, whose run prefix applies as it does to ingest).

    Returns the upload as it now is: ``imported`` (``result`` has the counts) or ``import_failed``
    (``result`` has the typed refusal; nothing of the package is stored). An upload that is not
    ``accepted`` is returned unchanged (a redelivered task does nothing).
    """
    upload.refresh_from_db()
    if upload.state != ACCEPTED:
        return upload
    person, token, _ = _principal(actor)
    if token is not None and not token.active:
        _failed(
            upload, None, {"error": "token_revoked", "detail": "the uploading token has been revoked", "line": None}
        )
    elif token is None and not access.can_operate(person):
        _failed(upload, None, {"error": "import_forbidden", "detail": "the uploader may not import runs", "line": None})
    else:
        _restore_and_ingest(upload, token)
    upload.refresh_from_db()
    return upload


def _restore_and_ingest(upload: PackageUpload, token: ApiToken | None) -> None:
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
        try:
            with transaction.atomic():
                # The row lock orders twin tasks: the second waits here, then finds the work done.
                locked = PackageUpload.objects.select_for_update().filter(pk=upload.pk, state=ACCEPTED).first()
                if locked is None:
                    return
                totals = _ingest_journal(run_ident, target / "journal.jsonl", token)
                failpoint("package_import.before_commit")
                now = timezone.now()
                PackageUpload.objects.filter(pk=upload.pk, state=ACCEPTED).update(
                    state=IMPORTED,
                    run_ident=run_ident,
                    result=totals,
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


def _ingest_journal(run_ident: str, journal: Path, token: ApiToken | None) -> dict[str, int]:
    """Feed the journal through ``records_ingest`` in batches within its limits (the caller holds the
    transaction). Line numbers of a refusal are the journal's, not the batch's."""
    max_records = int(settings.LOOPX_INGEST_MAX_BATCH_RECORDS)
    max_bytes = int(settings.LOOPX_INGEST_MAX_BATCH_BYTES)
    totals = {"records": 0, "stored": 0, "duplicates": 0, "batches": 0}
    batch: list[bytes] = []
    size = 0
    offset = 0  # journal lines before the current batch

    def flush() -> None:
        nonlocal batch, size, offset
        body = b"\n".join(batch) + b"\n"
        try:
            result = records_ingest(run_id=run_ident, body=body, content_type="application/x-ndjson", token=token)
        except IngestError as err:
            if err.line is not None:
                err.line += offset
            raise
        totals["records"] += len(batch)
        totals["stored"] += result.stored
        totals["duplicates"] += result.duplicates
        totals["batches"] += 1
        offset += len(batch)
        batch, size = [], 0

    with open(journal, "rb") as fh:
        for raw in fh:
            # Lines as ingest splits them: on "\n" only; a last line without one is complete all the same.
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if batch and (len(batch) >= max_records or size + len(line) + 1 > max_bytes):
                flush()
            batch.append(line)
            size += len(line) + 1
    if batch:
        flush()
    return totals


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


def run_export(*, run: Run, out_path: str | os.PathLike[str], fmt: str = "tar.gz") -> str:
    """Write the run's package (journal byte for byte, secrets included: contract section 8, the one raw
    export) to ``out_path`` atomically; returns the package's sha256."""
    return build_package(out_path, run.run_id, journal_bytes(run=run), fmt=fmt)
