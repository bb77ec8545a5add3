"""Shapes of the import API: an import's status, the source a run was imported from, and which map entry
decided each intent's class."""

from __future__ import annotations

from typing import Any

from django.urls import NoReverseMatch, reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from journals.models import EFFECT_CLASSES
from recovery.imports.models import DECIDED_BY, IMPORT_STATES, IMPORT_SYSTEMS, HistoryImport, ImportedRun


def _absolute(request: Any, path: str) -> str:
    return request.build_absolute_uri(path) if request is not None else path


class ImportProgressSerializer(serializers.Serializer[Any]):
    done = serializers.IntegerField(help_text="Events of the history converted so far.")
    total = serializers.IntegerField(help_text="Events of the history.")
    percent = serializers.IntegerField(min_value=0, max_value=100)


class HistorySourceSerializer(serializers.Serializer[Any]):
    """The history file an import read: never its contents."""

    system = serializers.ChoiceField(choices=IMPORT_SYSTEMS)
    name = serializers.CharField(source="original_name", help_text="The uploader's name for the file (as sent).")
    sha256 = serializers.CharField()
    size = serializers.IntegerField()
    events = serializers.IntegerField(source="event_count")
    skipped = serializers.DictField(
        child=serializers.IntegerField(), help_text="Source events that journal nothing, by event type."
    )


class EffectMapRefSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(source="map.name")
    version = serializers.IntegerField(source="number")
    entries = serializers.DictField(child=serializers.ChoiceField(choices=EFFECT_CLASSES))
    default = serializers.ChoiceField(choices=EFFECT_CLASSES)


class ImportedRunSerializer(serializers.Serializer[Any]):
    run = serializers.CharField(source="run_ident", help_text="The run id in the store.")
    history_run = serializers.CharField(source="run_base", help_text="The run id the history names.")
    records = serializers.IntegerField()
    run_url = serializers.SerializerMethodField()

    @extend_schema_field(serializers.URLField(allow_null=True))
    def get_run_url(self, row: ImportedRun) -> str | None:
        try:
            path = reverse("api-run", args=[row.run_ident])
        except NoReverseMatch:
            return None
        return _absolute(self.context.get("request"), path)


class HistoryImportSerializer(serializers.ModelSerializer[HistoryImport]):
    state = serializers.ChoiceField(choices=IMPORT_STATES)
    status_url = serializers.SerializerMethodField()
    # Declared fields named like Field attributes: DRF's metaclass takes them out of the class; the stubs
    # see Field.source.
    source = HistorySourceSerializer()  # type: ignore[assignment]
    effect_map = EffectMapRefSerializer(source="map_version", allow_null=True)
    source_key = serializers.CharField(help_text="The key the map's attachment was looked up by ('' for none).")
    generation = serializers.IntegerField(
        help_text="1 for the upload; n for its (n-1)-th re-import after its map got a new version."
    )
    superseded = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()
    runs = ImportedRunSerializer(many=True)
    result = serializers.JSONField(
        help_text="imported: {records, stored, duplicates, batches}; failed: the typed refusal {error, detail, line}."
    )
    uploader = serializers.CharField(source="uploader_name")

    class Meta:
        model = HistoryImport
        fields = [
            "id",
            "state",
            "status_url",
            "source",
            "effect_map",
            "source_key",
            "generation",
            "superseded",
            "progress",
            "runs",
            "result",
            "uploader",
            "created_at",
            "finished_at",
        ]

    def get_status_url(self, upload: HistoryImport) -> str:
        return _absolute(self.context.get("request"), reverse("api-import", args=[upload.pk]))

    @extend_schema_field(serializers.BooleanField())
    def get_superseded(self, upload: HistoryImport) -> bool:
        return HistoryImport.objects.filter(supersedes=upload).exists()

    @extend_schema_field(ImportProgressSerializer)
    def get_progress(self, upload: HistoryImport) -> dict[str, int]:
        return {"done": upload.progress_done, "total": upload.progress_total, "percent": upload.percent}


class ImportUploadSerializer(serializers.Serializer[Any]):
    """The multipart form of POST /api/v1/imports."""

    file = serializers.FileField(help_text="The history: Temporal JSON, a LangGraph SQLite file, Step Functions JSON.")
    source = serializers.ChoiceField(choices=IMPORT_SYSTEMS)  # type: ignore[assignment]  # a declared field, as above
    run = serializers.CharField(required=False, allow_blank=True, help_text="The run id (default: the history's).")
    effect_map = serializers.CharField(required=False, allow_blank=True, help_text="A map's name (default: attached).")
    key = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="The source's key an attached map is found by (a Temporal namespace or task queue, a graph).",
    )


class IntentClassSerializer(serializers.Serializer[Any]):
    """How an imported intent got its effect class."""

    intent = serializers.CharField()
    effect_class = serializers.ChoiceField(choices=EFFECT_CLASSES)
    decided = serializers.ChoiceField(
        choices=DECIDED_BY,
        help_text="entry: the map's entry `map_key`; default: the name is not in the map; rule: the source's own "
        "rule (e.g. a Temporal child workflow is idempotent on its workflow id).",
    )
    map_key = serializers.CharField(allow_null=True)
    name = serializers.CharField(allow_null=True, help_text="The name looked up in the map, when the journal has it.")
    effect_map = serializers.CharField(allow_null=True)
    effect_map_version = serializers.IntegerField(allow_null=True)
