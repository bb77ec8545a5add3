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
from trail.admin_mixin import snapshot
from trail.services import operator_action_record

from . import delivery
from .admin import url_without_credentials
from .destinations import destination_check_at_save
from .models import EVENTS, Webhook, WebhookDelivery


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
            "id", "webhook", "event", "idempotency_key", "status", "attempts", "attempt_limit", "next_attempt_at",
            "last_status_code", "last_error", "created_at", "delivered_at",
        ]
        read_only_fields = fields


def _webhook_record(request: Request, kind: str, before: dict[str, Any], instance: Webhook | None) -> None:
    after = snapshot(instance) if instance is not None else {}
    name = instance.name if instance is not None else before.get("name", "")
    operator_action_record(
        actor=request.user, kind=kind, reason=f"webhook {name!r} {kind.split('_')[1]}d through the API",
        before=before, after=after,
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
