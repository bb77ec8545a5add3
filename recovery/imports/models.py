"""Imported histories of other runtimes, and the effect maps that classify their side effects.

A model module of the `recovery` app (imported by recovery/models.py); recovery/imports/services.py is the
one writer of every table here.

- ``EffectMap``: a named map from a name (an activity type, a Step Functions resource, a LangGraph node) to
  an effect class. Its content lives in ``EffectMapVersion`` rows: each save is a new immutable version
  (append-only), so an import always names the exact entries that classified it.
- ``EffectMapAttachment``: which map a source uses (its system and a key such as a Temporal namespace or
  task queue, or a LangGraph graph; ``*`` stands for every key of that system).
- ``HistorySource``: the uploaded history file itself, byte for byte with its sha256 (append-only): an
  import is a pure function of these bytes and a map version, so they are kept to import again.
- ``HistoryImport``: one conversion of a source with one map version (its *generation*), its progress, and
  the runs it stored. A newer map version never rewrites the records of a run: it is a new generation,
  stored as new runs (recovery/imports/services.py, "Re-assessment").
- ``ImportedRun``: a run an import stored, under the run id it has in the store.
- ``ImportedIntent``: which map entry decided each intent's class (append-only), and the source's ids of it.
- ``ImportedTurn``: each turn's name in the source's words and the source's ids of it (append-only).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from journals.models import EFFECT_CLASSES, ID_MAX, EffectClass
from kernel.appendonly import AppendOnlyModel
from recovery.packages.models import progress_percent

# The sources an upload may name (recovery/imports/importers SOURCES; spelled out so that the schema does not move
# when a converter is added without its service side).
IMPORT_SYSTEMS: tuple[str, ...] = ("temporal", "langgraph", "stepfunctions", "dbos")
ANY_KEY = "*"  # an attachment's key that stands for every key of its system

RECEIVED, CONVERTING, IMPORTED, FAILED = "received", "converting", "imported", "failed"
IMPORT_STATES: tuple[str, ...] = (RECEIVED, CONVERTING, IMPORTED, FAILED)
IMPORT_FINAL_STATES: tuple[str, ...] = (IMPORTED, FAILED)


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v.replace("_", " ")) for v in values]


class EffectMap(models.Model):
    name = models.CharField(max_length=100, unique=True)
    # The number of the newest version (0 before the first save): effect_map_update moves it under the
    # row's lock, so two concurrent saves get two numbers, never the same one.
    latest = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [models.CheckConstraint(condition=Q(latest__gte=0), name="effectmap_latest_gte_0")]

    def __str__(self) -> str:
        return f"effect map {self.name} v{self.latest}"


class EffectMapVersion(AppendOnlyModel):
    map = models.ForeignKey(EffectMap, on_delete=models.PROTECT, related_name="versions")
    number = models.IntegerField()
    # {name: "safe" | "idempotent" | "unsafe"}; the default ("*") is its own column.
    entries = models.JSONField(default=dict)
    default = models.CharField(max_length=16, choices=EffectClass.choices, default="unsafe")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    actor_name = models.CharField(max_length=150)
    reason = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["map", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["map", "number"], name="effectmapversion_unique_number"),
            models.CheckConstraint(condition=Q(number__gte=1), name="effectmapversion_number_gte_1"),
            models.CheckConstraint(condition=Q(default__in=EFFECT_CLASSES), name="effectmapversion_default_valid"),
        ]

    def __str__(self) -> str:
        return f"effect map {self.map_id} v{self.number}"

    def as_json(self) -> dict[str, str]:
        """The map as the import command reads it (``--effects``): the entries and ``"*"``."""
        return {**{str(k): str(v) for k, v in self.entries.items()}, ANY_KEY: self.default}


class EffectMapAttachment(models.Model):
    system = models.CharField(max_length=16, choices=_choices(IMPORT_SYSTEMS))
    key = models.CharField(max_length=ID_MAX)
    map = models.ForeignKey(EffectMap, on_delete=models.PROTECT, related_name="attachments")
    actor_name = models.CharField(max_length=150)
    attached_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["system", "key"]
        constraints = [
            models.UniqueConstraint(fields=["system", "key"], name="effectmapattachment_unique_source"),
            models.CheckConstraint(condition=Q(system__in=IMPORT_SYSTEMS), name="effectmapattachment_system_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.system}:{self.key} -> map {self.map_id}"


class HistorySource(AppendOnlyModel):
    """An uploaded history, byte for byte. One row per distinct file (sha256): uploading it again finds it."""

    sha256 = models.CharField(max_length=64, unique=True)
    system = models.CharField(max_length=16, choices=_choices(IMPORT_SYSTEMS))
    # The uploader's own name for the file: shown escaped, never used as a path.
    original_name = models.CharField(max_length=200, blank=True, default="")
    size = models.BigIntegerField()
    event_count = models.BigIntegerField(default=0)
    # {"<event type>": count} of the source events that journal nothing (the converter's ``skipped``).
    skipped = models.JSONField(default=dict, blank=True)
    data = models.BinaryField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(system__in=IMPORT_SYSTEMS), name="historysource_system_valid"),
            models.CheckConstraint(condition=Q(size__gte=0, event_count__gte=0), name="historysource_counts_valid"),
        ]

    def __str__(self) -> str:  # never the bytes
        return f"{self.system} history {self.sha256[:12]} ({self.size} bytes)"


class HistoryImport(models.Model):
    # A random id: the status URL is handed to whoever uploaded, and must not let anyone walk the others.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    source = models.ForeignKey(HistorySource, on_delete=models.PROTECT, related_name="imports")
    # None: no map was named or attached (every name is `unsafe`, the converter's default).
    map_version = models.ForeignKey(
        EffectMapVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="imports"
    )
    # The key the attachment was looked up by (a namespace, task queue, graph), as the uploader gave it.
    source_key = models.CharField(max_length=ID_MAX, blank=True, default="")
    # The run id asked for at upload (``run``), or "" for the one the history names.
    requested_run = models.CharField(max_length=ID_MAX, blank=True, default="")
    generation = models.IntegerField(default=1)
    # The generation this one replaces (a newer map version re-imported the same bytes).
    supersedes = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    state = models.CharField(max_length=16, default=RECEIVED, choices=_choices(IMPORT_STATES))
    progress_done = models.BigIntegerField(default=0)
    progress_total = models.BigIntegerField(default=0)
    # Once imported: {"records", "stored", "duplicates", "batches"}; once failed: the typed refusal
    # {"error", "detail", "line"} (never record bytes).
    result = models.JSONField(default=dict, blank=True)
    uploader = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    token = models.ForeignKey("journals.ApiToken", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    uploader_name = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=IMPORT_STATES), name="historyimport_state_valid"),
            models.CheckConstraint(condition=Q(generation__gte=1), name="historyimport_generation_gte_1"),
            models.CheckConstraint(
                condition=Q(progress_done__gte=0) & Q(progress_done__lte=F("progress_total")),
                name="historyimport_progress_valid",
            ),
            # One import of the same bytes with the same map version per run request: a second upload, or a
            # re-assessment delivered twice, finds it.
            models.UniqueConstraint(
                fields=["source", "requested_run", "map_version"], name="historyimport_unique_conversion"
            ),
        ]

    def __str__(self) -> str:
        return f"import {self.id} ({self.state})"

    @property
    def percent(self) -> int:
        return progress_percent(self.progress_done, self.progress_total, done=self.state in IMPORT_FINAL_STATES)


class ImportedRun(models.Model):
    """A run of an import: the run the history names (``run_base``) and the id it is stored under
    (``run_ident``: the same for the first generation, ``<run_base>~g<n>`` for the n-th). Named by id, not by
    a foreign key, as a package upload names its run (retention may remove the run, the history stays)."""

    history_import = models.ForeignKey(HistoryImport, on_delete=models.PROTECT, related_name="runs")
    run_base = models.CharField(max_length=ID_MAX, db_index=True)
    run_ident = models.CharField(max_length=ID_MAX, unique=True)
    records = models.BigIntegerField(default=0)
    # The source's own ids of the run ({"workflow_id", "run_id", ...}: importers' ConvertedRun.origin),
    # written with ``records`` once the run is stored; empty for an import stored before they were kept.
    origin = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run_ident"]
        constraints = [
            models.UniqueConstraint(fields=["history_import", "run_base"], name="importedrun_unique_per_import"),
        ]

    def __str__(self) -> str:
        return self.run_ident


# How an intent's class was decided: by a named entry of the map, by the map's default because the name
# is not in the map, or by the source's own rule (a Temporal child workflow is idempotent on its id).
BY_ENTRY, BY_DEFAULT, BY_RULE = "entry", "default", "rule"
DECIDED_BY: tuple[str, ...] = (BY_ENTRY, BY_DEFAULT, BY_RULE)


class ImportedIntent(AppendOnlyModel):
    """Which entry of the import's map decided an intent's class (``decided``): a named entry (``map_key``),
    the default because the name is not in the map, or the source's own rule."""

    imported_run = models.ForeignKey(ImportedRun, on_delete=models.PROTECT, related_name="intents")
    intent = models.CharField(max_length=ID_MAX)
    decided = models.CharField(max_length=8, choices=_choices(DECIDED_BY))
    map_key = models.CharField(max_length=ID_MAX, null=True, blank=True)
    # The name the map was asked about, when the journal record names it (a proposal pre-fills it).
    name = models.CharField(max_length=ID_MAX, null=True, blank=True)
    effect_class = models.CharField(max_length=16, choices=EffectClass.choices)
    # The source's ids of the records that dispatched and read it back ({"dispatched": ..., "observed": ...},
    # each the record's ``source_event``: a Temporal or Step Functions event id, a LangGraph
    # checkpoint/task, a DBOS workflow/function id).
    original = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["imported_run", "intent"]
        constraints = [
            models.UniqueConstraint(fields=["imported_run", "intent"], name="importedintent_unique"),
            models.CheckConstraint(condition=Q(effect_class__in=EFFECT_CLASSES), name="importedintent_class_valid"),
            models.CheckConstraint(condition=Q(decided__in=DECIDED_BY), name="importedintent_decided_valid"),
            # Only an entry names its key.
            models.CheckConstraint(
                condition=Q(decided=BY_ENTRY, map_key__isnull=False) | (~Q(decided=BY_ENTRY) & Q(map_key__isnull=True)),
                name="importedintent_key_iff_entry",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.intent}: {self.effect_class} ({self.decided})"


class ImportedTurn(AppendOnlyModel):
    """A turn of an imported run in its source's own words: the name the history gives it (the workflow
    type, the Step Functions state, the LangGraph node that ran) and the source's ids of the records that
    planned and ended it (``{"planned": ..., "ended": ...}``, each a record's ``source_event``)."""

    imported_run = models.ForeignKey(ImportedRun, on_delete=models.PROTECT, related_name="turns")
    turn = models.CharField(max_length=ID_MAX)
    name = models.CharField(max_length=ID_MAX, blank=True, default="")
    original = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["imported_run", "turn"]
        constraints = [models.UniqueConstraint(fields=["imported_run", "turn"], name="importedturn_unique")]

    def __str__(self) -> str:
        return f"{self.turn}: {self.name}"
