"""The recovery API: assessments, and the gate (decision, claim, release, approve, block)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from journals.access import CanOperate, CanRunRecovery
from journals.api import ErrorSerializer, LoopxView
from journals.models import Turn
from journals.services import high_water_parse
from journals.views import API_ERRORS
from recovery.assignments.models import TurnAssignment
from recovery.assignments.services import AssignError, turn_assign, turn_unassign
from recovery.models import Assessment, GateDecision, OperatorEvidence
from recovery.selectors import GateView, assessments_list, evidence_list, gate_decisions_list
from recovery.serializers import (
    ApproveRequestSerializer,
    AssessmentSerializer,
    AssessmentSummarySerializer,
    AssignmentSerializer,
    AssignRequestSerializer,
    BlockRequestSerializer,
    BulkRequestSerializer,
    BulkResultSerializer,
    ClaimRequestSerializer,
    ClaimSerializer,
    EvidenceSerializer,
    FencingRequestSerializer,
    GateDecisionSerializer,
    GateSerializer,
    UnassignRequestSerializer,
)
from recovery.services import (
    BULK_MAX,
    GateError,
    assessment_refresh,
    turn_approve,
    turn_block,
    turn_claim,
    turn_decision,
    turn_release,
    turns_bulk_decide,
)
from recovery.state import bulk_candidates

_CONFLICT = {409: OpenApiResponse(ErrorSerializer, description="Refused by the gate's state.")}
# A decision carries the version of the state its author saw (docs/api.md, "Deciding on what you saw").
_ETAG = OpenApiParameter(
    "ETag",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    response=[200],
    description='`"<state_version>"`: the version of the turn\'s effective state in this answer.',
)
_IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description=(
        '`"<state_version>"` from the decision you looked at (its `ETag`). When the turn\'s state has moved '
        "since: 409 `state_changed`, naming what it is now (`state`, `state_version`), and nothing is written. "
        "Without it the decision is made on the state as it is."
    ),
)
_DECIDE_CONFLICT = {
    409: OpenApiResponse(
        ErrorSerializer,
        description="Refused by the gate's state, or `state_changed`: the turn moved since the `If-Match` version.",
    )
}


def seen_version(request: Request) -> str | None:
    """The version of the state the caller decided on, from ``If-Match`` (one entity tag, quoted or not,
    weak or strong); None when absent or ``*`` (any state)."""
    given = request.headers.get("If-Match", "").strip()
    if not given or given == "*":
        return None
    if "," in given:
        raise GateError(400, "if_match_invalid", "If-Match names one version: the ETag of the decision you read")
    return given.removeprefix("W/").strip('"')


def gate_answer(view: GateView) -> Response:
    """The gate's answer, with its state's version as the ETag."""
    data = GateSerializer(view).data
    return Response(data, headers={"ETag": f'"{data["state_version"]}"'})


class AssessmentListView(LoopxView):
    serializer_class = AssessmentSummarySerializer
    permission_classes = [CanRunRecovery]

    def get_queryset(self) -> QuerySet[Assessment]:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no request, no run
            return Assessment.objects.none()
        return assessments_list(run=self.get_run(self.request, self.kwargs["run_id"])).select_related("run")

    @extend_schema(
        operation_id="assessments_list", responses={200: AssessmentSummarySerializer(many=True), **API_ERRORS}
    )
    def get(self, request: Request, run_id: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(AssessmentSummarySerializer(page, many=True).data)

    @extend_schema(
        operation_id="assessments_refresh", request=None, responses={200: AssessmentSerializer, **API_ERRORS}
    )
    def post(self, request: Request, run_id: str) -> Response:
        assessment = assessment_refresh(run=self.get_run(request, run_id))
        return Response(AssessmentSerializer(assessment).data)


class AssessmentDetailView(LoopxView):
    serializer_class = AssessmentSerializer
    queryset = Assessment.objects.none()

    @extend_schema(operation_id="assessments_retrieve", responses={200: AssessmentSerializer, **API_ERRORS})
    def get(self, request: Request, run_id: str, assessment_id: int) -> Response:
        assessment = assessments_list(run=self.get_run(request, run_id)).filter(pk=assessment_id).first()
        if assessment is None:
            raise NotFound("No such assessment.")
        return Response(AssessmentSerializer(assessment).data)


class DecisionView(LoopxView):
    """The current decision for the committed prefix, with the operator's approval or block."""

    serializer_class = GateSerializer
    queryset = Turn.objects.none()

    @extend_schema(
        operation_id="turn_decision",
        parameters=[
            OpenApiParameter(
                "expect",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                required=False,
                description=(
                    "`<branch>:<lsn>[, ...]`: the last lsn the runtime believes committed on the branch (-1 for "
                    "none), as `assess_journal --expect`. A stored prefix that differs: `hold`, `blocked`, "
                    "reason `offset_mismatch`, with `offset_mismatch` naming the branch and both lsns."
                ),
            ),
            _ETAG,
        ],
        responses={200: GateSerializer, **API_ERRORS},
    )
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        expect = high_water_parse(request.query_params.get("expect"), what="expect")
        return gate_answer(turn_decision(turn=turn, expect=expect))


class ClaimView(LoopxView):
    serializer_class = ClaimSerializer
    permission_classes = [CanRunRecovery]

    @extend_schema(
        operation_id="turn_claim",
        request=ClaimRequestSerializer,
        responses={200: ClaimSerializer, **API_ERRORS, **_CONFLICT},
    )
    def post(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        body = ClaimRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(ClaimSerializer(turn_claim(turn=turn, worker_id=body.validated_data["worker_id"])).data)


class ReleaseView(LoopxView):
    serializer_class = ClaimSerializer
    permission_classes = [CanRunRecovery]

    @extend_schema(
        operation_id="turn_release",
        request=FencingRequestSerializer,
        responses={200: ClaimSerializer, **API_ERRORS, **_CONFLICT},
    )
    def post(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        body = FencingRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(
            ClaimSerializer(turn_release(turn=turn, fencing_token=body.validated_data["fencing_token"])).data
        )


class ApproveView(LoopxView):
    serializer_class = GateSerializer
    permission_classes = [CanOperate]

    @extend_schema(
        operation_id="turn_approve",
        request=ApproveRequestSerializer,
        parameters=[_IF_MATCH, _ETAG],
        responses={200: GateSerializer, **API_ERRORS, **_DECIDE_CONFLICT},
    )
    def post(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        body = ApproveRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        view = turn_approve(
            turn=turn,
            actor=request.user,
            reason=body.validated_data["reason"],
            evidence=body.validated_data.get("evidence"),
            seen=seen_version(request),
        )
        return gate_answer(view)


class BlockView(LoopxView):
    serializer_class = GateSerializer
    permission_classes = [CanOperate]

    @extend_schema(
        operation_id="turn_block",
        request=BlockRequestSerializer,
        parameters=[_IF_MATCH, _ETAG],
        responses={200: GateSerializer, **API_ERRORS, **_DECIDE_CONFLICT},
    )
    def post(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        body = BlockRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data["reason"]
        return gate_answer(turn_block(turn=turn, actor=request.user, reason=reason, seen=seen_version(request)))


class EvidenceListView(LoopxView):
    serializer_class = EvidenceSerializer
    queryset = OperatorEvidence.objects.none()
    pagination_class = None

    @extend_schema(operation_id="turn_evidence_list", responses={200: EvidenceSerializer(many=True), **API_ERRORS})
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        return Response(EvidenceSerializer(evidence_list(turn=turn), many=True).data)


class GateDecisionListView(LoopxView):
    serializer_class = GateDecisionSerializer
    queryset = GateDecision.objects.none()
    pagination_class = None

    @extend_schema(
        operation_id="turn_gate_decisions_list", responses={200: GateDecisionSerializer(many=True), **API_ERRORS}
    )
    def get(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        return Response(GateDecisionSerializer(gate_decisions_list(turn=turn), many=True).data)


class BulkDecisionView(LoopxView):
    """Approve or block every turn of a filter, as the console's bulk page does (operators only)."""

    serializer_class = BulkResultSerializer
    permission_classes = [CanOperate]

    @extend_schema(
        operation_id="turns_bulk",
        request=BulkRequestSerializer,
        responses={200: BulkResultSerializer, **API_ERRORS, **_CONFLICT},
    )
    def post(self, request: Request) -> Response:
        body = BulkRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        filters = body.filters()
        if not filters:
            # A bulk decision over every turn of every run is never what an operator means.
            raise GateError(400, "filter_required", "name at least one filter: a bulk decision applies to a filter")
        action = body.validated_data["action"]
        candidates = bulk_candidates(filters=filters, action=action, scope=self.run_scope()).order_by(
            "effective__since", "id"
        )
        count = candidates.order_by()[: BULK_MAX + 1].count()
        if count > BULK_MAX:
            raise GateError(400, "too_many", f"the filter holds more than {BULK_MAX} turns: narrow it", count=count)
        expected = body.validated_data.get("expected")
        if expected is not None and expected != count:
            raise GateError(409, "filter_changed", "the filter's turns changed since you counted them", count=count)
        outcome = turns_bulk_decide(
            turns=candidates, action=action, actor=request.user, reason=body.validated_data["reason"]
        )
        return Response(BulkResultSerializer(outcome).data)


def _assignment(turn: Turn, assignment: TurnAssignment | None) -> dict[str, object]:
    return {
        "run": turn.run.run_id,
        "turn": turn.turn_id,
        "assignee": assignment.assignee.get_username() if assignment else None,
        "assigned_by": assignment.assigned_by.get_username() if assignment else None,
        "assigned_at": assignment.assigned_at if assignment else None,
    }


class AssignView(LoopxView):
    """An operator's review assignment of a turn (not the runtime's claim): the console's "Take it"."""

    serializer_class = AssignmentSerializer
    permission_classes = [CanOperate]

    @extend_schema(
        operation_id="turn_assign", request=AssignRequestSerializer, responses={200: AssignmentSerializer, **API_ERRORS}
    )
    def post(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        body = AssignRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        assignee = get_user_model().objects.filter(username=body.validated_data["assignee"]).first()
        if assignee is None:
            raise AssignError(400, "assignee_invalid", "no such user")
        done = turn_assign(turn=turn, actor=request.user, assignee=assignee, reason=body.validated_data.get("reason"))
        return Response(AssignmentSerializer(_assignment(turn, done)).data)


class UnassignView(LoopxView):
    serializer_class = AssignmentSerializer
    permission_classes = [CanOperate]

    @extend_schema(
        operation_id="turn_unassign",
        request=UnassignRequestSerializer,
        responses={200: AssignmentSerializer, **API_ERRORS},
    )
    def post(self, request: Request, run_id: str, turn_id: str) -> Response:
        turn = self.get_turn(request, run_id, turn_id)
        body = UnassignRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        turn_unassign(turn=turn, actor=request.user, reason=body.validated_data.get("reason"))
        return Response(AssignmentSerializer(_assignment(turn, None)).data)
