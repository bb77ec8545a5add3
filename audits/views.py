"""The audit API: recoveries under the gate (open, report actions, close) and the audit trail reads."""

from __future__ import annotations

import django_filters
from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from audits.models import OPERATOR_ACTION_KINDS, OperatorAction, RecoveryAudit, RecoveryAuditAction
from audits.serializers import (
    ActionRequestSerializer,
    AuditActionSerializer,
    CloseRequestSerializer,
    OpenRequestSerializer,
    OperatorActionSerializer,
    RecoveryAuditSerializer,
)
from audits.services import recovery_audit_action_report, recovery_audit_close, recovery_audit_open
from journals.models import Turn
from journals.views import _ERRORS
from loopx_site.access import CanRunRecovery
from loopx_site.api import ErrorSerializer, LoopxView

_CONFLICT = {409: OpenApiResponse(ErrorSerializer, description="Stale fencing token, or refused by the gate.")}


def _audits() -> QuerySet[RecoveryAudit]:
    """Audits with everything their answer shows, in a fixed number of queries."""
    return RecoveryAudit.objects.select_related("run", "turn", "closure").prefetch_related(
        Prefetch("actions", queryset=RecoveryAuditAction.objects.order_by("position")),
        "divergences__action",
    )


class AuditFilter(django_filters.FilterSet):
    run = django_filters.CharFilter(field_name="run__run_id", max_length=200)
    turn = django_filters.CharFilter(field_name="turn__turn_id", max_length=200)

    class Meta:
        model = RecoveryAudit
        fields = ["run", "turn"]


class OperatorActionFilter(django_filters.FilterSet):
    run = django_filters.CharFilter(field_name="run__run_id", max_length=200)
    turn = django_filters.CharFilter(field_name="turn__turn_id", max_length=200)
    kind = django_filters.ChoiceFilter(choices=[(k, k) for k in OPERATOR_ACTION_KINDS])

    class Meta:
        model = OperatorAction
        fields = ["run", "turn", "kind"]


class TurnRecoveryView(LoopxView):
    """POST: open a recovery under the claim's fencing token. GET: the turn's recoveries."""

    serializer_class = RecoveryAuditSerializer
    permission_classes = [CanRunRecovery]
    queryset = RecoveryAudit.objects.none()

    @extend_schema(
        operation_id="recovery_open",
        request=OpenRequestSerializer,
        responses={201: RecoveryAuditSerializer, **_ERRORS, **_CONFLICT},
    )
    def post(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        body = OpenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        audit = recovery_audit_open(turn=turn, fencing_token=body.validated_data["fencing_token"])
        return Response(RecoveryAuditSerializer(_audits().get(pk=audit.pk)).data, status=201)

    @extend_schema(operation_id="recovery_list", responses={200: RecoveryAuditSerializer(many=True), **_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        page = self.paginate_queryset(_audits().filter(turn=turn).order_by("-id"))
        return self.get_paginated_response(RecoveryAuditSerializer(page, many=True).data)


class _AuditOfTurn(LoopxView):
    serializer_class = RecoveryAuditSerializer
    queryset = RecoveryAudit.objects.none()
    permission_classes = [CanRunRecovery]

    def get_audit(self, request: Request, run_id: str, turn_id: str, audit_id: int) -> tuple[Turn, RecoveryAudit]:
        turn = self.get_turn(request, run_id, turn_id)
        audit = _audits().filter(turn=turn, pk=audit_id).first()
        if audit is None:
            raise NotFound("No such recovery audit.")
        return turn, audit


class RecoveryAuditDetailView(_AuditOfTurn):
    @extend_schema(operation_id="recovery_retrieve", responses={200: RecoveryAuditSerializer, **_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str, audit_id: int) -> Response:
        return Response(RecoveryAuditSerializer(self.get_audit(request, run_id, turn_id, audit_id)[1]).data)


class RecoveryActionView(_AuditOfTurn):
    serializer_class = AuditActionSerializer

    @extend_schema(
        operation_id="recovery_action_report",
        request=ActionRequestSerializer,
        responses={201: AuditActionSerializer, **_ERRORS, **_CONFLICT},
    )
    def post(self, request: Request, run_id: str, turn_id: str, audit_id: int) -> Response:
        _, audit = self.get_audit(request, run_id, turn_id, audit_id)
        body = ActionRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        action = recovery_audit_action_report(
            audit=audit,
            fencing_token=data["fencing_token"],
            kind=data["kind"],
            target=data["target"],
            detail=data.get("detail"),
        )
        return Response(AuditActionSerializer(action).data, status=201)


class RecoveryCloseView(_AuditOfTurn):
    @extend_schema(
        operation_id="recovery_close",
        request=CloseRequestSerializer,
        responses={200: RecoveryAuditSerializer, **_ERRORS, **_CONFLICT},
    )
    def post(self, request: Request, run_id: str, turn_id: str, audit_id: int) -> Response:
        _, audit = self.get_audit(request, run_id, turn_id, audit_id)
        body = CloseRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        recovery_audit_close(
            audit=audit, fencing_token=body.validated_data["fencing_token"], note=body.validated_data.get("note", "")
        )
        return Response(RecoveryAuditSerializer(_audits().get(pk=audit.pk)).data)


class AuditListView(LoopxView):
    serializer_class = RecoveryAuditSerializer
    filterset_class = AuditFilter

    def get_queryset(self) -> QuerySet[RecoveryAudit]:
        return _audits().filter(self.run_scope().q("run__run_id")).order_by("-id")

    @extend_schema(operation_id="audits_list", responses={200: RecoveryAuditSerializer(many=True), **_ERRORS})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(RecoveryAuditSerializer(page, many=True).data)


class OperatorActionListView(LoopxView):
    serializer_class = OperatorActionSerializer
    filterset_class = OperatorActionFilter

    def get_queryset(self) -> QuerySet[OperatorAction]:
        # An action about no run (a token made, a finding of no run) is seen only by whom sees every run.
        actions = OperatorAction.objects.select_related("run", "turn").order_by("-id")
        return actions.filter(self.run_scope().q("run__run_id"))

    @extend_schema(
        operation_id="operator_actions_list", responses={200: OperatorActionSerializer(many=True), **_ERRORS}
    )
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(OperatorActionSerializer(page, many=True).data)
