"""The admin: every model of the store, the recovery state, the audit trail and the console, registered here.

Evidence and the audit trail are read-only (append-only models never change). Projections and state are
read-only too: they change only through services. The one edit is a turn's annotations (lineage repair,
notes), which `save_model` hands to console.services.turn_annotate so that it is recorded as an
OperatorAction with the diff, and a block, which goes through recovery.services.turn_block: the same block
an operator makes on the turn page, which the gate reads. Record bytes are never shown: only their redacted projection.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.apps import apps
from django.contrib import admin, messages
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.utils.html import format_html
from django_celery_beat.models import ClockedSchedule, CrontabSchedule, IntervalSchedule, PeriodicTask, SolarSchedule

from journals.models import TURN_ASSESSED_FIELDS, JournalRecord, Turn, TurnEffective, TurnState
from journals.selectors import record_public
from kernel.errors import ServiceError
from recovery.services import turn_block
from recovery.state import DONE, state_of, state_version
from teams.models import Team
from trail.admin_mixin import AuditedAdminMixin
from trail.models import OperatorAction
from trail.services import operator_action_record

from .changes import field_changes
from .models import TurnAnnotation
from .services import EDITABLE, turn_annotate


class ReadOnlyAdmin(admin.ModelAdmin[Any]):  # every model of the store, see _register_the_rest
    """View only: no add, no change, no delete, whoever asks."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(JournalRecord)
class JournalRecordAdmin(ReadOnlyAdmin):
    list_display = ("run", "seq", "branch", "lsn", "kind", "turn", "received_at")
    list_filter = ("kind",)
    search_fields = ("run__run_id", "turn")
    list_select_related = ("run",)
    # `line` holds the raw bytes, secrets included (contract section 8): shown only redacted.
    exclude = ("line",)
    readonly_fields = ("redacted_record",)

    @admin.display(description="record (secrets redacted)")
    def redacted_record(self, obj: JournalRecord) -> str:
        public = record_public(obj)["record"]
        text = json.dumps(public, indent=1, sort_keys=True, ensure_ascii=False) if public is not None else "—"
        return format_html("<pre>{}</pre>", text)


class TurnEditForm(forms.ModelForm[Turn]):
    lineage_repair = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}), max_length=4000)
    notes = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4}), max_length=4000)
    block_turn = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        max_length=4000,
        label="Block this turn, because",
        help_text="Filled in, this blocks the turn (the gate holds it) until an operator approves it.",
    )
    change_reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        max_length=4000,
        help_text="Why you change this: recorded with the diff in the turn's history.",
    )
    # The version of the turn's state this page showed: a block made on a state the turn has left is refused.
    state_version = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)

    class Meta:
        model = Turn
        fields: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        annotation = TurnAnnotation.objects.filter(turn=self.instance).first() if self.instance.pk else None
        for name in EDITABLE:
            self.fields[name].initial = getattr(annotation, name, "") if annotation else ""
        if self.instance.pk:
            effective = TurnEffective.objects.filter(turn=self.instance).first()
            self.fields["state_version"].initial = state_version(state_of(effective))


# Marks a request whose change the services refused: no "changed successfully", no admin log entry.
_REFUSED = "loopx_admin_refused"


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin[Turn]):
    form = TurnEditForm
    # The state people see (the operator's decision on top of the engine's) comes first: an operator-blocked
    # turn reads "blocked by an operator" here as on every page, never the engine's "resume".
    list_display = ("turn_id", "run", "state", "decision", "reason", "status", "updated_at")
    list_filter = ("effective__state", "decision", "reason", "status")
    search_fields = ("turn_id", "run__run_id", "lineage")
    list_select_related = ("run", "effective")
    readonly_fields = ("run", "turn_id", *TURN_ASSESSED_FIELDS, "updated_at", "state")
    fieldsets = (
        ("The engine's view (from the journal; never edited)", {"fields": readonly_fields[:-1]}),
        ("Operator's annotations", {"fields": (*EDITABLE, "change_reason")}),
        ("Operator's decision", {"fields": ("state", "block_turn", "state_version")}),
    )

    @admin.display(description="state", ordering="effective__state")
    def state(self, obj: Turn) -> str:
        try:
            effective = obj.effective  # joined by the list (list_select_related)
        except TurnEffective.DoesNotExist:
            return "not yet assessed"
        return str(TurnState(effective.state).label)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Turn | None = None) -> bool:
        # A finished or discarded turn is not edited (the list itself stays browsable).
        if not super().has_change_permission(request, obj):
            return False
        if obj is None:
            return True
        effective = TurnEffective.objects.filter(turn=obj).first()
        return effective is None or effective.gate != DONE

    def save_model(self, request: HttpRequest, obj: Turn, form: forms.ModelForm[Turn], change: bool) -> None:
        """Never save the Turn row itself: the annotations and a block go through the services, each
        recorded as an OperatorAction (the annotations with their diff). Both or neither: a block refused
        (the turn moved since this page showed it, ...) leaves the annotations unsaved too."""
        changes = {name: form.cleaned_data.get(name) or "" for name in EDITABLE}
        block = (form.cleaned_data.get("block_turn") or "").strip()
        seen = form.cleaned_data.get("state_version") or None
        try:
            with transaction.atomic():
                if block:
                    turn_block(turn=obj, actor=request.user, reason=block, seen=seen)
                turn_annotate(turn=obj, actor=request.user, changes=changes, reason=form.cleaned_data["change_reason"])
        except ServiceError as err:
            setattr(request, _REFUSED, True)
            messages.error(request, f"Not saved: {err.detail}")

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        if getattr(request, _REFUSED, False):
            return None  # nothing was changed: the admin's own history says nothing either
        return super().log_change(request, obj, message)

    def response_change(self, request: HttpRequest, obj: Turn) -> HttpResponse:
        if getattr(request, _REFUSED, False):
            return HttpResponseRedirect(request.path)  # the page again, with the refusal and the turn as it is now
        return super().response_change(request, obj)

    def save_related(self, request: HttpRequest, form: forms.ModelForm[Turn], formsets: Any, change: bool) -> None:
        return None  # nothing related is edited here


@admin.register(TurnAnnotation)
class TurnAnnotationAdmin(ReadOnlyAdmin):
    list_display = ("turn", "updated_by", "updated_at")
    list_select_related = ("turn", "updated_by")


@admin.register(OperatorAction)
class OperatorActionAdmin(ReadOnlyAdmin):
    """The operator trail, read-only. Its before and after are shown as the fields that changed, each with
    its value before and after (console.changes), not as two JSON documents."""

    list_display = ("seq", "created_at", "actor_name", "kind", "run", "turn", "via")
    list_filter = ("kind", "via")
    list_select_related = ("run", "turn")
    exclude = ("before", "after")
    readonly_fields = ("what_changed",)

    @admin.display(description="what changed")
    def what_changed(self, obj: OperatorAction) -> str:
        return render_to_string("console/_changes.html", {"changes": field_changes(obj.before, obj.after)})


def _register_the_rest() -> None:
    """Every other model of our apps, read-only, so that the admin is complete as the apps grow."""
    for label in ("journals", "trail", "recovery", "audits", "console"):
        for model in apps.get_app_config(label).get_models():
            if admin.site.is_registered(model):
                continue
            names = [f.name for f in model._meta.fields][:7]
            admin_class = type(f"{model.__name__}Admin", (ReadOnlyAdmin,), {"list_display": names})
            admin.site.register(model, admin_class)


_register_the_rest()


def _audit_the_admins() -> None:
    """Beat's schedules (django-celery-beat's admin), users and roles (django.contrib.auth's admin) and teams
    (who sees which runs) are edited in their apps' own admin pages; each is re-registered here with the
    trail's mixin so that every add,
    change and delete is an OperatorAction (trail/admin_mixin.py)."""
    families = {PeriodicTask: "schedule", IntervalSchedule: "schedule", CrontabSchedule: "schedule",
                SolarSchedule: "schedule", ClockedSchedule: "schedule", User: "user", Group: "role", Team: "team"}
    for model, family in families.items():
        current = admin.site._registry.get(model)
        if current is None or isinstance(current, AuditedAdminMixin):
            continue
        base = type(current)
        attrs: dict[str, Any] = {"trail_kind": family, "__module__": __name__}
        if model is User:
            attrs["user_change_password"] = _audited_password_change(base)
        admin.site.unregister(model)
        admin.site.register(model, type(f"Audited{base.__name__}", (AuditedAdminMixin, base), attrs))


def _audited_password_change(base: type[Any]) -> Any:
    def user_change_password(self: Any, request: HttpRequest, id: str, form_url: str = "") -> Any:
        with transaction.atomic():
            response = base.user_change_password(self, request, id, form_url)
            if request.method == "POST" and response.status_code == 302:
                user = self.get_object(request, id)
                operator_action_record(
                    actor=request.user, kind="user_change", reason=f"password of user {user} set in the admin",
                    after={"username": user.get_username(), "secrets_changed": ["password"]},
                )
            return response

    return user_change_password


_audit_the_admins()
