"""API for webhooks (admins) and deliveries (viewers read, operators resend). People only: a runtime's
API token is refused here, it has no business with notifications."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from journals.access import can_administer, can_operate, can_view, runs_visible
from kernel.errors import ServiceError
from teams.models import Team
from trail.admin_mixin import snapshot
from trail.services import operator_action_record

from . import delivery
from . import services as notice_services
from .admin import url_without_credentials
from .channels import target_shown
from .destinations import destination_check_at_save
from .models import CHANNEL_KINDS, EVENTS, RULE_MODES, NotificationRule, TeamChannel, Webhook, WebhookDelivery
from .notices import HELD_STATES


class IsAdminRole(BasePermission):
    message = "You need the admin role to manage webhooks."

    def has_permission(self, request: Request, view: Any) -> bool:
        return can_administer(request.user)


class CanViewDeliveries(BasePermission):
    message = "You need the viewer role to read deliveries (operator to resend)."

    def has_permission(self, request: Request, view: Any) -> bool:
        return can_operate(request.user) if request.method == "POST" else can_view(request.user)


class WebhookSerializer(serializers.ModelSerializer[Webhook]):
    # write_only: accepted on create/update, never in any response.
    secret = serializers.CharField(write_only=True, min_length=16, max_length=200, required=False)
    events = serializers.ListField(child=serializers.ChoiceField(choices=EVENTS), allow_empty=True)

    class Meta:
        model = Webhook
        fields = ["id", "name", "url", "secret", "events", "active", "team", "created_at"]
        read_only_fields = ["id", "created_at"]

    def validate_url(self, value: str) -> str:
        # Refused typed by the view (webhook_url_refused): a URL that reaches inside is never saved.
        destination_check_at_save(value)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is None and not attrs.get("secret"):
            raise serializers.ValidationError({"secret": "A new webhook needs a secret."})
        return attrs

    def to_representation(self, instance: Webhook) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["url"] = url_without_credentials(instance.url)
        return data


class DeliverySerializer(serializers.ModelSerializer[WebhookDelivery]):
    # Plain strings in the schema: an enum named "status" would collide with other apps' status enums.
    status = serializers.CharField(read_only=True)
    event = serializers.CharField(read_only=True)

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "webhook",
            "event",
            "idempotency_key",
            "status",
            "attempts",
            "attempt_limit",
            "next_attempt_at",
            "last_status_code",
            "last_error",
            "created_at",
            "delivered_at",
        ]
        read_only_fields = fields


def _webhook_record(request: Request, kind: str, before: dict[str, Any], instance: Webhook | None) -> None:
    after = snapshot(instance) if instance is not None else {}
    name = instance.name if instance is not None else before.get("name", "")
    operator_action_record(
        actor=request.user,
        kind=kind,
        reason=f"webhook {name!r} {kind.split('_')[1]}d through the API",
        before=before,
        after=after,
    )


class _TypedRefusals:
    """A service's refusal (a webhook URL that reaches inside) as the API's typed error."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, ServiceError):
            return Response(exc.as_dict(), status=exc.status)
        answer: Response = super().handle_exception(exc)  # type: ignore[misc]
        return answer


class WebhookList(_TypedRefusals, generics.ListCreateAPIView[Webhook]):
    authentication_classes = [SessionAuthentication]
    permission_classes = [IsAdminRole]
    serializer_class = WebhookSerializer
    queryset = Webhook.objects.all()

    def perform_create(self, serializer: Any) -> None:
        with transaction.atomic():
            serializer.save()
            _webhook_record(self.request, "webhook_create", {}, serializer.instance)


class WebhookDetail(_TypedRefusals, generics.RetrieveUpdateDestroyAPIView[Webhook]):
    authentication_classes = [SessionAuthentication]
    permission_classes = [IsAdminRole]
    serializer_class = WebhookSerializer
    queryset = Webhook.objects.all()

    def perform_update(self, serializer: Any) -> None:
        with transaction.atomic():
            before = snapshot(Webhook.objects.select_for_update().get(pk=serializer.instance.pk))
            serializer.save()
            _webhook_record(self.request, "webhook_change", before, serializer.instance)

    def perform_destroy(self, instance: Webhook) -> None:
        with transaction.atomic():
            before = snapshot(instance)
            instance.delete()
            _webhook_record(self.request, "webhook_delete", before, None)


class DeliveryList(generics.ListAPIView[WebhookDelivery]):
    authentication_classes = [SessionAuthentication]
    permission_classes = [CanViewDeliveries]
    serializer_class = DeliverySerializer
    filterset_fields = ["status", "event", "webhook"]

    def get_queryset(self) -> QuerySet[WebhookDelivery]:
        # The deliveries about the runs the person sees; those about no run, to whom sees every run.
        return WebhookDelivery.objects.filter(runs_visible(user=self.request.user, field="run_ident"))


class DeliveryResend(generics.GenericAPIView[WebhookDelivery]):
    authentication_classes = [SessionAuthentication]
    permission_classes = [CanViewDeliveries]
    serializer_class = DeliverySerializer

    @extend_schema(request=None, responses={202: DeliverySerializer})
    def post(self, request: Request, pk: int) -> Response:
        visible = WebhookDelivery.objects.filter(runs_visible(user=request.user, field="run_ident"))
        if not visible.filter(pk=pk).exists():
            return Response({"error": "not_found", "detail": "No such delivery.", "line": None}, status=404)
        count = delivery.delivery_resend(ids=[pk], actor=request.user)
        if not count:
            return Response(
                {"error": "delivery_busy", "detail": "The delivery is being attempted right now.", "line": None},
                status=409,
            )
        return Response(DeliverySerializer(WebhookDelivery.objects.get(pk=pk)).data, status=202)


# --- A team's notification channels and rules (notifications.services holds every rule) ---------------


class CanSeeTeams(BasePermission):
    message = "You need the viewer role to read a team's notifications (operator to change them)."

    def has_permission(self, request: Request, view: Any) -> bool:
        safe = request.method in ("GET", "HEAD", "OPTIONS")
        return can_view(request.user) if safe else can_operate(request.user)


class ChannelSerializer(serializers.ModelSerializer[TeamChannel]):
    # write_only: accepted on create and update, never in an answer; a chat or paging URL is answered as its
    # scheme and host only (its path can be a credential).
    secret = serializers.CharField(write_only=True, max_length=200, required=False, allow_blank=True)
    target = serializers.CharField(write_only=True, max_length=2000, required=False)
    kind = serializers.ChoiceField(choices=CHANNEL_KINDS)
    # A plain id: another team's and a missing one get the same refusal (_team_of).
    team = serializers.IntegerField(source="team_id", required=False)

    class Meta:
        model = TeamChannel
        fields = ["id", "team", "name", "kind", "target", "secret", "active", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]

    def to_representation(self, instance: TeamChannel) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["target_shown"] = target_shown(instance)
        data["has_secret"] = bool(instance.secret)
        return data


class RuleSerializer(serializers.ModelSerializer[NotificationRule]):
    states = serializers.ListField(child=serializers.ChoiceField(choices=HELD_STATES), required=False)
    reasons = serializers.ListField(child=serializers.CharField(max_length=64), required=False)
    mode = serializers.ChoiceField(choices=RULE_MODES)
    team = serializers.IntegerField(source="team_id", required=False)

    class Meta:
        model = NotificationRule
        fields = [
            "id",
            "team",
            "name",
            "mode",
            "states",
            "reasons",
            "run_prefix",
            "threshold_minutes",
            "channels",
            "active",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]


def _visible_teams(request: Request) -> QuerySet[Team]:
    return notice_services.teams_visible(user=request.user)


def _team_of(request: Request, data: dict[str, Any], current: Team | None) -> Team:
    """The team named (or kept) by a write: one of the person's teams, or a typed refusal that is the same
    for another team's and for a team that does not exist."""
    team_id = data.get("team_id", current.pk if current is not None else None)
    team = _visible_teams(request).filter(pk=team_id).first() if team_id is not None else None
    if team is None:
        raise ServiceError(400, "team_invalid", "no such team among yours")
    return team


def _channel_save(request: Request, serializer: Any, channel: TeamChannel | None) -> None:
    data = serializer.validated_data
    team = _team_of(request, data, channel.team if channel else None)
    serializer.instance = notice_services.channel_save(
        actor=request.user,
        team=team,
        channel=channel,
        name=data.get("name", channel.name if channel else ""),
        kind=data.get("kind", channel.kind if channel else ""),
        target=data.get("target"),
        secret=data.get("secret"),
        active=data.get("active", channel.active if channel else True),
    )


class ChannelList(_TypedRefusals, generics.ListCreateAPIView[TeamChannel]):
    authentication_classes = [SessionAuthentication]
    permission_classes = [CanSeeTeams]
    serializer_class = ChannelSerializer

    def get_queryset(self) -> QuerySet[TeamChannel]:
        return TeamChannel.objects.filter(team__in=_visible_teams(self.request))

    def perform_create(self, serializer: Any) -> None:
        _channel_save(self.request, serializer, None)


class ChannelDetail(_TypedRefusals, generics.RetrieveUpdateDestroyAPIView[TeamChannel]):
    authentication_classes = [SessionAuthentication]
    permission_classes = [CanSeeTeams]
    serializer_class = ChannelSerializer

    def get_queryset(self) -> QuerySet[TeamChannel]:
        return TeamChannel.objects.filter(team__in=_visible_teams(self.request))

    def perform_update(self, serializer: Any) -> None:
        _channel_save(self.request, serializer, serializer.instance)

    def perform_destroy(self, instance: TeamChannel) -> None:
        notice_services.channel_delete(actor=self.request.user, channel=instance)


class ChannelTest(_TypedRefusals, generics.GenericAPIView[TeamChannel]):
    authentication_classes = [SessionAuthentication]
    permission_classes = [CanSeeTeams]
    serializer_class = ChannelSerializer

    def get_queryset(self) -> QuerySet[TeamChannel]:
        return TeamChannel.objects.filter(team__in=_visible_teams(self.request))

    @extend_schema(request=None, responses={202: DeliverySerializer(many=True)})
    def post(self, request: Request, pk: int) -> Response:
        ids = notice_services.channel_test(channel=self.get_object())
        return Response(DeliverySerializer(WebhookDelivery.objects.filter(pk__in=ids), many=True).data, status=202)


def _rule_save(request: Request, serializer: Any, rule: NotificationRule | None) -> None:
    data = serializer.validated_data
    team = _team_of(request, data, rule.team if rule else None)

    def kept(name: str, default: Any) -> Any:
        return data[name] if name in data else (getattr(rule, name) if rule else default)

    channels = data["channels"] if "channels" in data else (list(rule.channels.all()) if rule else [])
    serializer.instance = notice_services.rule_save(
        actor=request.user,
        team=team,
        rule=rule,
        name=kept("name", ""),
        mode=kept("mode", "immediate"),
        states=kept("states", []),
        reasons=kept("reasons", []),
        run_prefix=kept("run_prefix", ""),
        threshold_minutes=kept("threshold_minutes", 0),
        channels=channels,
        active=kept("active", True),
    )


class RuleList(_TypedRefusals, generics.ListCreateAPIView[NotificationRule]):
    authentication_classes = [SessionAuthentication]
    permission_classes = [CanSeeTeams]
    serializer_class = RuleSerializer

    def get_queryset(self) -> QuerySet[NotificationRule]:
        return NotificationRule.objects.filter(team__in=_visible_teams(self.request)).prefetch_related("channels")

    def perform_create(self, serializer: Any) -> None:
        _rule_save(self.request, serializer, None)


class RuleDetail(_TypedRefusals, generics.RetrieveUpdateDestroyAPIView[NotificationRule]):
    authentication_classes = [SessionAuthentication]
    permission_classes = [CanSeeTeams]
    serializer_class = RuleSerializer

    def get_queryset(self) -> QuerySet[NotificationRule]:
        return NotificationRule.objects.filter(team__in=_visible_teams(self.request)).prefetch_related("channels")

    def perform_update(self, serializer: Any) -> None:
        _rule_save(self.request, serializer, serializer.instance)

    def perform_destroy(self, instance: NotificationRule) -> None:
        notice_services.rule_delete(actor=self.request.user, rule=instance)
