"""The repair API (docs/repair.md): list a run's repairs, preview one (stores nothing), apply a preview.
Operators only; a runtime token is refused (a repair is a person's decision, like an approval)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from journals.access import CanOperate
from journals.api import ErrorSerializer, LoopxView
from journals.views import API_ERRORS
from recovery.repair.models import REPAIR_KINDS, JournalRepair
from recovery.repair.services import journal_repair_apply, journal_repair_preview, repairs_list
from recovery.serializers import AssessmentSerializer

_CONFLICT = {
    409: OpenApiResponse(ErrorSerializer, description="The run is not broken, the repair does not verify, or the "
                         "preview is stale."),
    413: OpenApiResponse(ErrorSerializer, description="The corrected journal is too large."),
}


class RepairRequestSerializer(serializers.Serializer[Any]):
    # A plain string in the schema (an enum named "kind" would collide with other apps'); the service
    # refuses any other value (400 repair_kind_invalid).
    kind = serializers.CharField(max_length=16, help_text=f"One of: {', '.join(REPAIR_KINDS)}.")
    through_seq = serializers.IntegerField(required=False, allow_null=True, default=None,
                                           help_text="accept_prefix: the last record (seq) accepted.")
    journal = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False,
                                    help_text="supersede: the corrected journal (JSONL) the runtime re-sent.")
    reason = serializers.CharField(max_length=4000, required=False, allow_blank=True, default="")


class RepairApplySerializer(RepairRequestSerializer):
    reason = serializers.CharField(max_length=4000)
    preview = serializers.CharField(min_length=64, max_length=64, help_text="The `preview` of the preview.")


class RepairSerializer(serializers.ModelSerializer[JournalRepair]):
    run = serializers.CharField(source="run.run_id")
    kind = serializers.CharField(read_only=True)
    text = serializers.CharField(read_only=True)

    class Meta:
        model = JournalRepair
        fields = [
            "id", "run", "number", "kind", "through_seq", "at_seq", "set_aside_records", "set_aside_sha256",
            "replacement_sha256", "replacement_records", "actor_name", "reason", "created_at", "text",
        ]
        read_only_fields = fields


class RepairAppliedSerializer(serializers.Serializer[Any]):
    repair = RepairSerializer()
    assessment = AssessmentSerializer()


def _args(data: dict[str, Any]) -> dict[str, Any]:
    journal = data.get("journal") or None
    return {"kind": data["kind"], "through_seq": data.get("through_seq"), "journal": journal}


class RepairListView(LoopxView):
    serializer_class = RepairSerializer
    queryset = JournalRepair.objects.none()
    permission_classes = [CanOperate]
    pagination_class = None

    @extend_schema(operation_id="repairs_list", responses={200: RepairSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str) -> Response:
        return Response(RepairSerializer(repairs_list(run=self.get_run(request, run_id)), many=True).data)

    @extend_schema(
        operation_id="repairs_apply",
        request=RepairApplySerializer,
        responses={201: RepairAppliedSerializer, **API_ERRORS, **_CONFLICT},
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = self.get_run(request, run_id)
        body = RepairApplySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        repair, assessment = journal_repair_apply(
            run=run, actor=request.user, reason=data["reason"], preview=data["preview"], **_args(data)
        )
        return Response(
            {"repair": RepairSerializer(repair).data, "assessment": AssessmentSerializer(assessment).data}, status=201
        )


class RepairPreviewView(LoopxView):
    """What the assessment would become under the repair; nothing is stored (a POST only to carry the
    corrected journal)."""

    serializer_class = RepairRequestSerializer
    permission_classes = [CanOperate]

    @extend_schema(
        operation_id="repairs_preview",
        request=RepairRequestSerializer,
        responses={200: OpenApiResponse(description="The preview: `preview` digest, the repair, the assessment."),
                   **API_ERRORS, **_CONFLICT},
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = self.get_run(request, run_id)
        body = RepairRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        preview = journal_repair_preview(run=run, actor=request.user, reason=data.get("reason", ""), **_args(data))
        return Response(preview.as_dict())
