"""Runtime API tokens in the admin: created here (shown once), revoked here; never edited.

Registered before the console's catch-all read-only registrations (console/admin.py), which skip it.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from journals.access import can_administer
from journals.models import ApiToken
from trail.tokens import api_token_create, api_token_revoke


class ApiTokenForm(forms.ModelForm[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["name", "run_prefix"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    form = ApiTokenForm
    list_display = ("name", "run_prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "run_prefix")
    actions = ["revoke"]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_administer(request.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return can_administer(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a token is created or revoked, never edited

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoked tokens stay, so that the audit trail's names keep meaning something

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # The revoke action is an administrator's, though "change" is refused for everyone.
        actions = super().get_actions(request)
        if not can_administer(request.user):
            actions.pop("revoke", None)
        return actions

    def save_model(self, request: HttpRequest, obj: ApiToken, form: forms.ModelForm[ApiToken], change: bool) -> None:
        token, raw = api_token_create(name=obj.name, run_prefix=obj.run_prefix, actor=request.user)
        obj.pk, obj.token_hash, obj.created_at = token.pk, token.token_hash, token.created_at
        obj._state.adding, obj._state.db = False, token._state.db
        # Through __dict__: an attribute of our own on the request, which HttpRequest does not declare.
        request.__dict__["_loopx_new_token"] = raw  # shown by response_add, then gone

    def response_add(self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None) -> HttpResponse:
        context = {**self.admin_site.each_context(request), "token": obj, "raw": request.__dict__["_loopx_new_token"]}
        response = TemplateResponse(request, "admin/journals/apitoken/created.html", context)
        response["Cache-Control"] = "no-store"  # the only page that ever shows a token
        return response

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            api_token_revoke(token=token, actor=request.user)
        messages.success(request, f"{queryset.count()} token(s) revoked.")
