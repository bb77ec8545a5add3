"""Recovery packages uploaded from the console, and what became of them.

A model module of the `recovery` app (imported by recovery/models.py). An upload's bytes are stored under
``LOOPX_PACKAGE_DIR/uploads`` through the atomic-write helper and never unpacked there; this row is the truth
about the upload: its digest, who sent it, how far verification got, the findings, and the run it became.

States (recovery/packages/services.py holds the transitions, each a compare-and-set on ``state``)::

    received -> checking -> accepted -> imported
                         \\           \\-> import_failed
                          \\-> rejected

A rejected upload keeps its findings and nothing else: no run, no records, and its bytes are removed.
The run is named by its id, not by a foreign key: retention may remove a run (ops/retention.py,
raw deletes in a fixed order) and the upload's history must outlive it without holding it back.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, TypedDict, cast

from django.conf import settings
from django.db import models
from django.db.models import BooleanField, Case, F, OuterRef, Q, Value, When
from django.utils import timezone

from journals.models import ID_MAX, ApiToken, Run
from kernel.appendonly import AppendOnlyModel, AppendOnlyQuerySet
from recovery.findings.models import UNRESOLVED

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

RECEIVED, CHECKING, ACCEPTED, REJECTED, IMPORTED, IMPORT_FAILED = (
    "received",
    "checking",
    "accepted",
    "rejected",
    "imported",
    "import_failed",
)
UPLOAD_STATES: tuple[str, ...] = (RECEIVED, CHECKING, ACCEPTED, REJECTED, IMPORTED, IMPORT_FAILED)
# States after which nothing more happens to an upload (a task that finds one of these does nothing).
FINAL_STATES: tuple[str, ...] = (REJECTED, IMPORTED, IMPORT_FAILED)
UPLOAD_FORMATS: tuple[str, ...] = ("tar", "tar.gz", "zip")


def progress_percent(progress_done: int, progress_total: int, *, done: bool) -> int:
    """A background task's progress as a whole percentage (100 once ``done``; 0 before the total is known)."""
    if done:
        return 100
    if progress_total <= 0:
        return 0
    return min(100, progress_done * 100 // progress_total)


class PackageUpload(models.Model):
    # A random id: the status URL is handed to whoever uploaded, and must not let anyone walk the others.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    state = models.CharField(max_length=16, default=RECEIVED, choices=[(s, s.replace("_", " ")) for s in UPLOAD_STATES])
    # The stored file, relative to LOOPX_PACKAGE_DIR; empty once the bytes are gone (rejected or imported).
    stored_name = models.CharField(max_length=200, blank=True, default="")
    # The uploader's own name for the file: shown escaped, never used as a path, never sent in events.
    original_name = models.CharField(max_length=200, blank=True, default="")
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField()
    uploader = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # A runtime token uploads as itself: its run prefix then limits the import as it limits ingest.
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    uploader_name = models.CharField(max_length=150)
    # Verification progress: bytes of the package file read so far, out of its size.
    progress_done = models.BigIntegerField(default=0)
    progress_total = models.BigIntegerField(default=0)
    format = models.CharField(max_length=8, null=True, blank=True)
    member_count = models.IntegerField(null=True, blank=True)
    # [{"code", "member", "detail"}] exactly as check_package reports them; details never quote contents.
    findings = models.JSONField(default=list, blank=True)
    # The run the package carries (read from its manifest when the import starts): once imported, the run
    # it is now in the store under.
    run_ident = models.CharField(max_length=ID_MAX, null=True, blank=True)
    # Import outcome: {"stored", "duplicates", "records", "batches"}; or, for import_failed, the typed
    # refusal {"error", "detail", "line", ...} of the ingest service (never record bytes).
    result = models.JSONField(default=dict, blank=True)
    checks = models.IntegerField(default=0)  # how many times verification started (a redelivery adds one)
    # How many times the package sweep published validate_package again (a lost publish or message).
    sweeps = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # The latest publish of validate_package, or the sweep's claim to publish (a compare-and-set on this
    # column is how two sweeps agree that only one of them publishes).
    enqueued_at = models.DateTimeField(null=True, blank=True)
    checking_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=UPLOAD_STATES), name="packageupload_state_valid"),
            models.CheckConstraint(
                condition=Q(format__isnull=True) | Q(format__in=UPLOAD_FORMATS), name="packageupload_format_valid"
            ),
            models.CheckConstraint(
                condition=Q(progress_done__gte=0) & Q(progress_done__lte=F("progress_total")),
                name="packageupload_progress_valid",
            ),
            models.CheckConstraint(condition=Q(size__gte=0), name="packageupload_size_valid"),
            # Only an imported upload names the run it became (rejections create nothing).
            models.CheckConstraint(
                condition=~Q(state=IMPORTED) | Q(run_ident__isnull=False), name="packageupload_imported_has_run"
            ),
        ]
        indexes = [models.Index(fields=["state", "created_at"], name="packageupload_state")]

    def __str__(self) -> str:
        return f"package {self.id} ({self.state})"

    @property
    def percent(self) -> int:
        return progress_percent(self.progress_done, self.progress_total, done=self.state in (ACCEPTED, *FINAL_STATES))


# A kept corrupt line is in force while its finding is unresolved (a row without its finding counts too:
# fail-closed).
_IN_FORCE = Q(finding__isnull=True) | Q(finding__state__in=UNRESOLVED)


class InForce(TypedDict):
    in_force: bool


class JournalCorruptionQuerySet(AppendOnlyQuerySet["JournalCorruption"]):
    def kept(self, run: Run | int | OuterRef) -> JournalCorruptionQuerySet:
        """Every corrupt line kept for the run, in force or not (``run`` may be an outer reference: the
        assessment probes for any beside the run's row, recovery/services.py)."""
        return self.filter(run=run)

    def in_force(self, run: Run | int) -> JournalCorruptionQuerySet:
        """The run's kept corrupt lines the assessment reads: those whose finding an operator has not
        resolved."""
        return self.kept(run).filter(_IN_FORCE)

    def with_force(self, run: Run | int) -> models.QuerySet[WithAnnotations[JournalCorruption, InForce]]:
        """Every kept corrupt line of the run, each annotated ``in_force`` (a repaired one stays, False)."""
        annotated = self.kept(run).annotate(
            in_force=Case(When(_IN_FORCE, then=Value(True)), default=Value(False), output_field=BooleanField())
        )
        # The plugin names its own TypedDict for the annotation, which no spelled-out type matches.
        return cast("models.QuerySet[WithAnnotations[JournalCorruption, InForce]]", annotated)


class JournalCorruption(AppendOnlyModel):
    """A line of an imported package's journal that is not one complete JSON object (contract section 1,
    ``storage_corruption``): a torn tail, most often. The store holds only complete records, so the line is
    kept here, verbatim and for good (append-only), beside the records of its run; the assessment reads it
    as a line of the journal, so the run is blocked with ``storage_corruption`` until an operator repairs
    the journal and resolves the finding that names this row (docs/package-import.md, "Torn tails").

    The bytes are never shown anywhere (a line that cannot be parsed is never quoted, contract section 8);
    only an explicit export of the run carries them, as it carries the records' raw bytes.
    """

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="+")
    upload = models.ForeignKey(PackageUpload, on_delete=models.PROTECT, related_name="corruptions")
    # Where it was in the package's journal.jsonl: its 1-based line number and the byte offset it started at.
    line_no = models.BigIntegerField()
    offset = models.BigIntegerField()
    # The line's bytes exactly as they were, without the "\n" that ended it (``terminated``: one did).
    data = models.BinaryField()
    terminated = models.BooleanField(default=False)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    # Its place in the run: after the stored record with this seq (0: before every record), the
    # ``ordinal``-th corrupt line there. With sha256 this identifies the same line imported again.
    after_seq = models.BigIntegerField()
    ordinal = models.IntegerField(default=0)
    # The storage_corruption finding that names it: resolving the finding (audited, with the reason) is the
    # operator's repair; from then on the assessment no longer reads the line, which stays kept here.
    finding = models.ForeignKey("recovery.Finding", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    # Django lets a model replace the manager it inherits; the plugin types AppendOnlyModel.objects as a ClassVar.
    objects = JournalCorruptionQuerySet.as_manager()  # type: ignore[misc]

    class Meta:
        ordering = ["run", "after_seq", "ordinal", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(line_no__gte=1, offset__gte=0, size__gte=0, after_seq__gte=0, ordinal__gte=0),
                name="journalcorruption_position_valid",
            ),
        ]
        indexes = [models.Index(fields=["run", "after_seq"], name="journalcorruption_run")]

    def __str__(self) -> str:  # never the bytes
        return f"corrupt line {self.line_no} of package {self.upload_id} ({self.size} bytes)"
