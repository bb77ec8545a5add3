"""The audit API: recoveries under the gate (open, report actions, close) and the audit trail reads."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Prefetch, QuerySet
from django.http import StreamingHttpResponse
from django_celery_beat.models import PeriodicTask
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from audits.schedules import schedule_change, schedule_state
from audits.serializers import (
    ActionRequestSerializer,
    AuditActionSerializer,
    CloseRequestSerializer,
    OpenRequestSerializer,
    OperatorActionSerializer,
    RecoveryAuditSerializer,
)
from journals.access import (
    CanExport,
    CanOperate,
    CanRunRecovery,
    OperatorRole,
    can_administer,
    runtime_token,
)
from journals.api import ErrorSerializer, LoopxView
from journals.models import ApiToken, Turn
from journals.views import API_ERRORS
from kernel.errors import ServiceError
from recovery.findings.doors import finding_for_read, finding_for_write
from recovery.findings.models import FINDING_KINDS, FINDING_STATES, Finding
from recovery.findings.services import finding_acknowledge, finding_resolve
from recovery.recovery_audits.models import RecoveryAudit, RecoveryAuditAction
from recovery.recovery_audits.services import recovery_audit_action_report, recovery_audit_close, recovery_audit_open
from trail.export import EXPORT_FORMATS, FILTERS, trail_export
from trail.models import OPERATOR_ACTION_KINDS, OperatorAction
from trail.tokens import api_token_create, api_token_revoke

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
        responses={201: RecoveryAuditSerializer, **API_ERRORS, **_CONFLICT},
    )
    def post(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        body = OpenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        audit = recovery_audit_open(turn=turn, fencing_token=body.validated_data["fencing_token"])
        return Response(RecoveryAuditSerializer(_audits().get(pk=audit.pk)).data, status=201)

    @extend_schema(operation_id="recovery_list", responses={200: RecoveryAuditSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        page = self.paginate_queryset(_audits().filter(turn=turn).order_by("-id"))
        return self.get_paginated_response(RecoveryAuditSerializer(page, many=True).data)


class _AuditOfTurn(LoopxView):
    serializer_class: type[serializers.BaseSerializer[Any]] = RecoveryAuditSerializer
    queryset = RecoveryAudit.objects.none()
    permission_classes = [CanRunRecovery]

    def get_audit(self, request: Request, run_id: str, turn_id: str, audit_id: int) -> tuple[Turn, RecoveryAudit]:
        turn = self.get_turn(request, run_id, turn_id)
        audit = _audits().filter(turn=turn, pk=audit_id).first()
        if audit is None:
            raise NotFound("No such recovery audit.")
        return turn, audit


class RecoveryAuditDetailView(_AuditOfTurn):
    @extend_schema(operation_id="recovery_retrieve", responses={200: RecoveryAuditSerializer, **API_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str, audit_id: int) -> Response:
        return Response(RecoveryAuditSerializer(self.get_audit(request, run_id, turn_id, audit_id)[1]).data)


class RecoveryActionView(_AuditOfTurn):
    serializer_class = AuditActionSerializer

    @extend_schema(
        operation_id="recovery_action_report",
        request=ActionRequestSerializer,
        responses={201: AuditActionSerializer, **API_ERRORS, **_CONFLICT},
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
        responses={200: RecoveryAuditSerializer, **API_ERRORS, **_CONFLICT},
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

    @extend_schema(operation_id="audits_list", responses={200: RecoveryAuditSerializer(many=True), **API_ERRORS})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(RecoveryAuditSerializer(page, many=True).data)


class OperatorActionListView(LoopxView):
    serializer_class = OperatorActionSerializer
    filterset_class = OperatorActionFilter

    def get_queryset(self) -> QuerySet[OperatorAction]:
        # An action about no run (a token made, a finding of no run) is seen only by whom sees every run.
        actions = OperatorAction.objects.select_related("run", "turn").order_by("-seq")
        return actions.filter(self.run_scope().q("run__run_id"))

    @extend_schema(
        operation_id="operator_actions_list", responses={200: OperatorActionSerializer(many=True), **API_ERRORS}
    )
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(OperatorActionSerializer(page, many=True).data)


# --- the console's acts, in the API: findings, tokens, the trail's export ---------------------------


class FindingSerializer(serializers.ModelSerializer[Finding]):
    # Plain strings in the schema: enums named "kind" and "state" would collide with other apps'.
    kind = serializers.CharField(read_only=True)
    state = serializers.CharField(read_only=True)
    run = serializers.CharField(source="run.run_id", allow_null=True, default=None)
    turn = serializers.CharField(source="turn.turn_id", allow_null=True, default=None)

    class Meta:
        model = Finding
        fields = ["id", "kind", "run", "turn", "fact_key", "evidence", "blocks_run", "state", "first_seen", "last_seen",
                  "seen_count", "acknowledge_reason", "resolved_by_name", "resolved_at", "resolution_reason"]
        read_only_fields = fields


class ReasonSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(max_length=4000)


class FindingFilter(django_filters.FilterSet):
    run = django_filters.CharFilter(field_name="run__run_id", max_length=200)
    kind = django_filters.ChoiceFilter(choices=[(k, k) for k in FINDING_KINDS])
    state = django_filters.ChoiceFilter(choices=[(s, s) for s in FINDING_STATES])

    class Meta:
        model = Finding
        fields = ["run", "kind", "state"]


class FindingListView(LoopxView):
    serializer_class = FindingSerializer
    filterset_class = FindingFilter
    permission_classes = [CanOperate]  # people only: a runtime token has no business with findings

    def get_queryset(self) -> QuerySet[Finding]:
        return Finding.objects.select_related("run", "turn").filter(self.run_scope().q("run__run_id")).order_by(
            "-last_seen", "-id"
        )

    @extend_schema(operation_id="findings_list", responses={200: FindingSerializer(many=True), **API_ERRORS})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(FindingSerializer(page, many=True).data)


class FindingDetailView(LoopxView):
    serializer_class = FindingSerializer
    permission_classes = [CanOperate]
    queryset = Finding.objects.none()

    @extend_schema(operation_id="findings_retrieve", responses={200: FindingSerializer, **API_ERRORS})
    def get(self, request: Request, finding_id: int) -> Response:
        return Response(FindingSerializer(finding_for_read(actor=request.user, pk=finding_id)).data)


class _FindingTransition(LoopxView):
    serializer_class = FindingSerializer
    permission_classes = [CanOperate]
    queryset = Finding.objects.none()
    transition = staticmethod(finding_resolve)

    def post(self, request: Request, finding_id: int) -> Response:
        # First: another team's finding is a 404, whatever the body.
        finding = finding_for_write(actor=request.user, pk=finding_id)
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        done = type(self).transition(finding=finding, actor=request.user, reason=body.validated_data["reason"])
        return Response(FindingSerializer(Finding.objects.select_related("run", "turn").get(pk=done.pk)).data)


class FindingResolveView(_FindingTransition):
    transition = staticmethod(finding_resolve)

    @extend_schema(operation_id="findings_resolve", request=ReasonSerializer,
                   responses={200: FindingSerializer, **API_ERRORS, **_CONFLICT})
    def post(self, request: Request, finding_id: int) -> Response:
        return super().post(request, finding_id)


class FindingAcknowledgeView(_FindingTransition):
    transition = staticmethod(finding_acknowledge)

    @extend_schema(operation_id="findings_acknowledge", request=ReasonSerializer,
                   responses={200: FindingSerializer, **API_ERRORS, **_CONFLICT})
    def post(self, request: Request, finding_id: int) -> Response:
        return super().post(request, finding_id)


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "run_prefix", "created_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class TokenCreateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    run_prefix = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class TokenCreatedSerializer(TokenSerializer):
    token = serializers.CharField(help_text="The token itself: shown this once, never again.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]


class IsAdministrator(BasePermission):
    message = "You need the admin role to manage API tokens."

    def has_permission(self, request: Request, view: Any) -> bool:
        return runtime_token(request) is None and can_administer(request.user)


class TokenListView(LoopxView):
    serializer_class = TokenSerializer
    permission_classes = [IsAdministrator]
    queryset = ApiToken.objects.order_by("name")

    @extend_schema(operation_id="tokens_list", responses={200: TokenSerializer(many=True), **API_ERRORS})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(TokenSerializer(page, many=True).data)

    @extend_schema(operation_id="tokens_create", request=TokenCreateSerializer,
                   responses={201: TokenCreatedSerializer, **API_ERRORS})
    def post(self, request: Request) -> Response:
        body = TokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if ApiToken.objects.filter(name=body.validated_data["name"]).exists():
            raise ServiceError(409, "token_name_taken", "a token of this name exists")
        token, raw = api_token_create(**body.validated_data, actor=request.user)
        response = Response({**TokenSerializer(token).data, "token": raw}, status=201)
        response["Cache-Control"] = "no-store"
        return response


class TokenRevokeView(LoopxView):
    serializer_class = TokenSerializer
    permission_classes = [IsAdministrator]
    queryset = ApiToken.objects.none()

    @extend_schema(operation_id="tokens_revoke", request=None, responses={200: TokenSerializer, **API_ERRORS})
    def post(self, request: Request, token_id: int) -> Response:
        token = ApiToken.objects.filter(pk=token_id).first()
        if token is None:
            raise NotFound("No such token.")
        if token.revoked_at is not None:
            raise ServiceError(409, "token_revoked", "the token is already revoked")
        return Response(TokenSerializer(api_token_revoke(token=token, actor=request.user)).data)


class OperatorActionExportView(LoopxView):
    """The trail as a stream (JSONL or CSV) for a SIEM; the export itself is a row of the log. The
    operator role, as the console's export: a viewer reads the log's pages, never takes it away whole."""

    permission_classes = [CanExport]
    queryset = OperatorAction.objects.none()

    @extend_schema(
        operation_id="operator_actions_export",
        parameters=[OpenApiParameter("output", str, enum=list(EXPORT_FORMATS), default="jsonl"),
                    *[OpenApiParameter(name, str) for name in FILTERS]],
        responses={(200, "application/jsonl"): OpenApiResponse(OpenApiTypes.STR), **API_ERRORS},
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        fmt = request.query_params.get("output", "jsonl")  # not `format`: DRF keeps that for its renderers
        stream = trail_export(actor=request.user, params=request.query_params, fmt=fmt)
        response = StreamingHttpResponse(stream, content_type="application/jsonl" if fmt == "jsonl" else "text/csv")
        response["Content-Disposition"] = f'attachment; filename="loopx-trail.{fmt}"'
        return response


class ScheduleSerializer(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    name = serializers.CharField()
    task = serializers.CharField()
    enabled = serializers.BooleanField()
    every_seconds = serializers.IntegerField(allow_null=True)
    kwargs = serializers.CharField()
    last_run_at = serializers.CharField(allow_null=True)


class ScheduleChangeSerializer(serializers.Serializer[Any]):
    enabled = serializers.BooleanField(required=False, allow_null=True, default=None)
    every_seconds = serializers.IntegerField(required=False, allow_null=True, default=None)
    reason = serializers.CharField(max_length=4000)


class ScheduleListView(LoopxView):
    serializer_class = ScheduleSerializer
    permission_classes = [OperatorRole]  # operators read the schedules, admins change them (docs/api.md)
    pagination_class = None
    queryset = PeriodicTask.objects.none()

    @extend_schema(operation_id="schedules_list", responses={200: ScheduleSerializer(many=True), **API_ERRORS})
    def get(self, request: Request) -> Response:
        tasks = PeriodicTask.objects.select_related("interval").order_by("name")
        return Response([schedule_state(t) for t in tasks])


class ScheduleDetailView(LoopxView):
    serializer_class = ScheduleSerializer
    permission_classes = [IsAdministrator]
    queryset = PeriodicTask.objects.none()

    @extend_schema(operation_id="schedules_change", request=ScheduleChangeSerializer,
                   responses={200: ScheduleSerializer, **API_ERRORS})
    def patch(self, request: Request, schedule_id: int) -> Response:
        task = PeriodicTask.objects.filter(pk=schedule_id).first()
        if task is None:
            raise NotFound("No such schedule.")
        body = ScheduleChangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        changed = schedule_change(task=task, actor=request.user, **body.validated_data)
        return Response(schedule_state(changed))
