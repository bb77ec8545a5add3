"""Admin: webhooks (the secret is write-only) and deliveries (what operators see and resend)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from trail.admin_mixin import AuditedAdminMixin

from . import delivery
from .models import EVENTS, Webhook, WebhookAttempt, WebhookDelivery

if TYPE_CHECKING:
    from django.utils.datastructures import _ListOrTuple


def url_without_credentials(url: str) -> str:
    """The URL as shown in lists: no user:password, no query string (either may hold a token)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(invalid URL)"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class WebhookForm(forms.ModelForm[Webhook]):
    # Write-only: the widget never renders the stored value, and a blank field keeps it.
    secret = forms.CharField(
        required=False,
        strip=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Signs every delivery (HMAC-SHA256). Write-only: leave blank to keep the current secret.",
    )
    events = forms.MultipleChoiceField(choices=[(e, e) for e in EVENTS], widget=forms.CheckboxSelectMultiple)
    url = forms.URLField(max_length=2000, assume_scheme="https", help_text="Receives a POST for each event.")

    class Meta:
        model = Webhook
        fields = ["name", "url", "secret", "events", "active", "team"]

    def clean_secret(self) -> str:
        value: str = self.cleaned_data.get("secret") or ""
        if not value:
            if not self.instance.pk:
                raise forms.ValidationError("A new webhook needs a secret.")
            return self.instance.secret
        if len(value) < 16:
            raise forms.ValidationError("Use at least 16 characters.")
        return value


class WebhookAttemptInline(admin.TabularInline[WebhookAttempt, WebhookDelivery]):
    model = WebhookAttempt
    extra = 0
    can_delete = False
    # A tuple: the one value fits both attributes' types (fields may also group names).
    fields = ("number", "started_at", "duration_ms", "status_code", "ok", "error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Webhook)
class WebhookAdmin(AuditedAdminMixin, admin.ModelAdmin[Webhook]):
    trail_kind = "webhook"
    form = WebhookForm
    list_display = ["name", "shown_url", "subscribed", "active", "created_at"]
    list_filter = ["active"]
    search_fields = ["name"]

    @admin.display(description="URL")
    def shown_url(self, obj: Webhook) -> str:
        return url_without_credentials(obj.url)

    @admin.display(description="events")
    def subscribed(self, obj: Webhook) -> str:
        return ", ".join(obj.events or [])

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str | _ListOrTuple[str]]:
        fields: list[str | _ListOrTuple[str]] = ["name", "url", "secret", "events", "active", "team"]
        if obj is not None and not self.has_change_permission(request, obj):
            # A view-only page renders fields as text: the secret is never one of them.
            fields.remove("secret")
        return fields

    def save_model(self, request: HttpRequest, obj: Webhook, form: Any, change: bool) -> None:
        from django.utils import timezone

        obj.updated_at = timezone.now()
        super().save_model(request, obj, form, change)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin[WebhookDelivery]):
    list_display = [
        "id", "webhook", "event", "status", "attempts", "last_status_code", "short_error", "created_at",
        "delivered_at", "next_attempt_at",
    ]
    list_filter = ["status", "event", "webhook"]
    search_fields = ["idempotency_key"]
    readonly_fields = (  # a tuple, as on the inline
        "webhook", "event", "idempotency_key", "status", "attempts", "attempt_limit", "next_attempt_at",
        "lease_until", "last_status_code", "last_error", "request_id", "created_at", "updated_at", "delivered_at",
        "run_ident", "body",
    )
    fields = readonly_fields
    inlines = [WebhookAttemptInline]
    actions = ["resend_deliveries"]

    @admin.display(description="last error")
    def short_error(self, obj: WebhookDelivery) -> str:
        return obj.last_error[:80]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Resend selected deliveries", permissions=["change"])
    def resend_deliveries(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = delivery.delivery_resend(ids=list(queryset.values_list("pk", flat=True)), actor=request.user)
        self.message_user(request, f"{count} deliveries queued to resend.", messages.SUCCESS)
