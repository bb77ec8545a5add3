"""The console's one write of its own in the API: a blocked turn's annotations (console.services.turn_annotate,
recorded on the trail as ``turn_edit`` with the diff). Mounted under /api/v1/ by loopx_site/urls.py."""

from __future__ import annotations

from typing import Any

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from journals.access import CanOperate
from journals.api import LoopxView
from journals.views import API_ERRORS

from .models import TurnAnnotation
from .services import EDITABLE, MAX_TEXT, turn_annotate


class AnnotationSerializer(serializers.Serializer[Any]):
    lineage_repair = serializers.CharField(allow_blank=True)
    notes = serializers.CharField(allow_blank=True)
    updated_at = serializers.DateTimeField(allow_null=True)


class AnnotateSerializer(serializers.Serializer[Any]):
    lineage_repair = serializers.CharField(required=False, allow_blank=True, max_length=MAX_TEXT)
    notes = serializers.CharField(required=False, allow_blank=True, max_length=MAX_TEXT)
    reason = serializers.CharField(max_length=4000)


def _shown(annotation: TurnAnnotation | None) -> dict[str, object]:
    data: dict[str, object] = {name: getattr(annotation, name, "") if annotation else "" for name in EDITABLE}
    data["updated_at"] = annotation.updated_at if annotation else None
    return data


class AnnotationView(LoopxView):
    serializer_class = AnnotationSerializer
    permission_classes = [CanOperate]
    queryset = TurnAnnotation.objects.none()

    @extend_schema(operation_id="turn_annotations_retrieve", responses={200: AnnotationSerializer, **API_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        return Response(AnnotationSerializer(_shown(TurnAnnotation.objects.filter(turn=turn).first())).data)

    @extend_schema(operation_id="turn_annotations_update", request=AnnotateSerializer,
                   responses={200: AnnotationSerializer, **API_ERRORS})
    def post(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        body = AnnotateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        reason = data.pop("reason")
        annotation = turn_annotate(turn=turn, actor=request.user, changes=data, reason=reason)
        return Response(AnnotationSerializer(_shown(annotation)).data)


urlpatterns = [
    path("runs/<str:run_id>/turns/<str:turn_id>/annotations", AnnotationView.as_view(), name="api-turn-annotations"),
]
