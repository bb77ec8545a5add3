"""The console's pages of a team's notification channels and rules. Thin: parse, call a service, render.

A person sees the teams they belong to (an admin: every team); another team's page is a 404, the answer of
a missing one, so an outsider learns nothing of it. Reading needs the viewer role, changing the operator
role. Every change is a POST with its CSRF token, and a trail row (notifications.services).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from journals import access
from kernel.errors import ServiceError
from teams.models import Team

from . import services
from .channels import target_shown
from .forms import ChannelForm, RuleForm
from .models import NotificationRule, TeamChannel, WebhookDelivery

Page = Callable[..., HttpResponse]


def _signed_in_viewer(view: Page) -> Page:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not access.can_view(request.user):
            raise PermissionDenied("Your role does not allow this.")
        return view(request, *args, **kwargs)

    return wrapped


def _team(request: HttpRequest, team_id: int, *, change: bool = False) -> Team:
    team = services.teams_visible(user=request.user).filter(pk=team_id).first()
    if team is None:
        raise Http404("No such team.")
    if change and not access.can_operate(request.user):
        raise PermissionDenied("You need the operator role to change a team's notifications.")
    return team


def _channel(team: Team, pk: int) -> TeamChannel:
    """The team's channel, or a 404: another team's channel is as absent as a missing one."""
    channel = TeamChannel.objects.filter(team=team, pk=pk).first()
    if channel is None:
        raise Http404("No such channel.")
    return channel


def _rule(team: Team, pk: int) -> NotificationRule:
    """The team's rule, or a 404: another team's rule is as absent as a missing one."""
    rule = NotificationRule.objects.filter(team=team, pk=pk).first()
    if rule is None:
        raise Http404("No such rule.")
    return rule


def _context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    return {
        "nav": "notifications",
        "role": access.role_of(request.user),
        "can_operate": access.can_operate(request.user),
        **extra,
    }


def _team_url(team: Team, note: str = "") -> str:
    url = reverse("notices:team", args=[team.pk])
    return f"{url}?done={note}" if note else url


@_signed_in_viewer
def team_list(request: HttpRequest) -> HttpResponse:
    teams = services.teams_visible(user=request.user)
    return render(request, "notifications/team_list.html", _context(request, teams=teams))


NOTES = {
    "channel-saved": "Channel saved.",
    "channel-deleted": "Channel deleted.",
    "rule-saved": "Rule saved.",
    "rule-deleted": "Rule deleted.",
    "test-queued": "A test message is on its way.",
}


@_signed_in_viewer
def team_page(request: HttpRequest, team_id: int) -> HttpResponse:
    team = _team(request, team_id)
    channels = [
        {"channel": c, "target": target_shown(c), "has_secret": bool(c.secret)}
        for c in TeamChannel.objects.filter(team=team)
    ]
    rules = NotificationRule.objects.filter(team=team).prefetch_related("channels")
    recent = WebhookDelivery.objects.filter(channel__team=team).select_related("channel")[:20]
    note = NOTES.get(request.GET.get("done", ""), "")
    return render(
        request,
        "notifications/team.html",
        _context(request, team=team, channels=channels, rules=rules, recent=recent, note=note),
    )


def _refused(form: Any, error: ServiceError) -> None:
    form.add_error(None, error.detail)


@_signed_in_viewer
@require_http_methods(["GET", "POST"])
def channel_edit(request: HttpRequest, team_id: int, pk: int | None = None) -> HttpResponse:
    team = _team(request, team_id, change=True)
    channel = _channel(team, pk) if pk is not None else None
    if request.method == "POST":
        form = ChannelForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                services.channel_save(
                    actor=request.user,
                    team=team,
                    channel=channel,
                    name=data["name"],
                    kind=data["kind"],
                    target=data["target"] or None,
                    secret=data["secret"] or None,
                    active=data["active"],
                )
            except ServiceError as error:
                _refused(form, error)
            else:
                return HttpResponseRedirect(_team_url(team, "channel-saved"))
    elif channel is not None:
        # An email channel's addresses are shown; a URL (its path can be a credential) and a secret never are.
        target = channel.target if channel.kind == "email" else ""
        form = ChannelForm(
            initial={"name": channel.name, "kind": channel.kind, "target": target, "active": channel.active}
        )
    else:
        form = ChannelForm()
    return render(request, "notifications/channel_form.html", _context(request, team=team, channel=channel, form=form))


@_signed_in_viewer
@require_POST
def channel_delete(request: HttpRequest, team_id: int, pk: int) -> HttpResponse:
    team = _team(request, team_id, change=True)
    channel = _channel(team, pk)
    services.channel_delete(actor=request.user, channel=channel)
    return HttpResponseRedirect(_team_url(team, "channel-deleted"))


@_signed_in_viewer
@require_POST
def channel_test(request: HttpRequest, team_id: int, pk: int) -> HttpResponse:
    team = _team(request, team_id, change=True)
    channel = _channel(team, pk)
    services.channel_test(channel=channel)
    return HttpResponseRedirect(_team_url(team, "test-queued"))


@_signed_in_viewer
@require_http_methods(["GET", "POST"])
def rule_edit(request: HttpRequest, team_id: int, pk: int | None = None) -> HttpResponse:
    team = _team(request, team_id, change=True)
    rule = _rule(team, pk) if pk is not None else None
    if request.method == "POST":
        form = RuleForm(request.POST, team_id=team.pk)
        if form.is_valid():
            data = form.cleaned_data
            try:
                services.rule_save(
                    actor=request.user,
                    team=team,
                    rule=rule,
                    name=data["name"],
                    mode=data["mode"],
                    states=data["states"],
                    reasons=form.reason_list(),
                    run_prefix=data["run_prefix"] or "",
                    threshold_minutes=data["threshold_minutes"],
                    channels=list(data["channels"]),
                    active=data["active"],
                )
            except ServiceError as error:
                _refused(form, error)
            else:
                return HttpResponseRedirect(_team_url(team, "rule-saved"))
    elif rule is not None:
        form = RuleForm(
            team_id=team.pk,
            initial={
                "name": rule.name,
                "mode": rule.mode,
                "states": list(rule.states),
                "reasons": ", ".join(rule.reasons),
                "run_prefix": rule.run_prefix,
                "threshold_minutes": rule.threshold_minutes,
                "channels": list(rule.channels.all()),
                "active": rule.active,
            },
        )
    else:
        form = RuleForm(team_id=team.pk)
    return render(request, "notifications/rule_form.html", _context(request, team=team, rule=rule, form=form))


@_signed_in_viewer
@require_POST
def rule_delete(request: HttpRequest, team_id: int, pk: int) -> HttpResponse:
    team = _team(request, team_id, change=True)
    rule = _rule(team, pk)
    services.rule_delete(actor=request.user, rule=rule)
    return HttpResponseRedirect(_team_url(team, "rule-deleted"))
