"""Shapes of the package API: an upload's status (state, progress, findings, the run it became)."""

from __future__ import annotations

from typing import Any

from django.urls import NoReverseMatch, reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from recovery.packages.models import IMPORTED, UPLOAD_FORMATS, UPLOAD_STATES, PackageUpload


class PackageFindingSerializer(serializers.Serializer[Any]):
    """One reason the package was refused (docs/packages.md's codes, plus ``upload_unreadable``,
    ``upload_changed``, ``check_timed_out`` and ``check_failed``: docs/package-import.md). ``detail`` never
    quotes file contents."""

    code = serializers.CharField()
    member = serializers.CharField(allow_null=True, help_text="The member as the archive names it; null: the archive.")
    detail = serializers.CharField()


class PackageProgressSerializer(serializers.Serializer[Any]):
    done = serializers.IntegerField(help_text="Bytes of the package file verification has read so far.")
    total = serializers.IntegerField(help_text="The package file's size.")
    percent = serializers.IntegerField(min_value=0, max_value=100)


def _absolute(request: Any, path: str) -> str:
    return request.build_absolute_uri(path) if request is not None else path


class PackageUploadSerializer(serializers.ModelSerializer[PackageUpload]):
    state = serializers.ChoiceField(choices=UPLOAD_STATES)
    status_url = serializers.SerializerMethodField()
    name = serializers.CharField(source="original_name", help_text="The uploader's name for the file (as sent).")
    format = serializers.ChoiceField(choices=UPLOAD_FORMATS, allow_null=True)
    members = serializers.IntegerField(source="member_count", allow_null=True)
    progress = serializers.SerializerMethodField()
    findings = PackageFindingSerializer(many=True)
    run = serializers.CharField(
        source="run_ident", allow_null=True, help_text="The run the package carries (once its import started)."
    )
    run_url = serializers.SerializerMethodField()
    result = serializers.JSONField(
        help_text="imported: {records, stored, duplicates, batches}, plus corrupt_lines [{line, offset, size, "
        "finding}] when lines of the journal were not complete records (a torn tail: kept as evidence, never "
        "quoted; the run is blocked with storage_corruption); import_failed: the ingest service's typed "
        "refusal {error, detail, line, ...}."
    )
    uploader = serializers.CharField(source="uploader_name")

    class Meta:
        model = PackageUpload
        fields = [
            "id",
            "state",
            "status_url",
            "name",
            "sha256",
            "size",
            "format",
            "members",
            "progress",
            "findings",
            "run",
            "run_url",
            "result",
            "uploader",
            "checks",
            "created_at",
            "checked_at",
            "finished_at",
        ]

    def get_status_url(self, upload: PackageUpload) -> str:
        return _absolute(self.context.get("request"), reverse("api-package", args=[upload.pk]))

    @extend_schema_field(PackageProgressSerializer)
    def get_progress(self, upload: PackageUpload) -> dict[str, int]:
        return {"done": upload.progress_done, "total": upload.progress_total, "percent": upload.percent}

    @extend_schema_field(serializers.URLField(allow_null=True))
    def get_run_url(self, upload: PackageUpload) -> str | None:
        if upload.state != IMPORTED or not upload.run_ident:
            return None
        try:
            path = reverse("api-run", args=[upload.run_ident])
        except NoReverseMatch:  # a run id no URL can name (a '/' in it: packages are not limited by paths)
            return None
        return _absolute(self.context.get("request"), path)
