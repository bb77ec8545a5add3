"""A team's notification channels and rules: created, changed and removed with a trail row each, in the
same transaction (``notification_channel_change``, ``notification_rule_change``). The trail keeps what
changed, never a channel's secret nor a chat URL's path (its credential)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from journals import access
from kernel.errors import ServiceError
from teams.models import Team
from trail.services import operator_action_record

from .channels import channel_target_check, target_shown
from .models import CHANNEL_KINDS, RULE_MODES, NotificationRule, TeamChannel
from .notices import HELD_STATES, channel_test_send


def teams_visible(*, user: Any) -> QuerySet[Team]:
    """The teams whose channels and rules ``user`` sees: their own; an admin's, every team."""
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    if access.can_administer(user):
        return Team.objects.all()
    return Team.objects.filter(members=user)


class NoticeRefused(ServiceError):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(400, code, detail)


def channel_snapshot(channel: TeamChannel | None) -> dict[str, Any]:
    if channel is None:
        return {}
    return {
        "id": channel.pk,
        "team": channel.team.name,
        "name": channel.name,
        "kind": channel.kind,
        "target": target_shown(channel),
        "has_secret": bool(channel.secret),
        "active": channel.active,
    }


def rule_snapshot(rule: NotificationRule | None) -> dict[str, Any]:
    if rule is None:
        return {}
    return {
        "id": rule.pk,
        "team": rule.team.name,
        "name": rule.name,
        "states": list(rule.states),
        "reasons": list(rule.reasons),
        "run_prefix": rule.run_prefix,
        "threshold_minutes": rule.threshold_minutes,
        "mode": rule.mode,
        "channels": sorted(c.name for c in rule.channels.all()),
        "active": rule.active,
    }


def _record(actor: Any, kind: str, what: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    operator_action_record(actor=actor, kind=kind, reason=what, before=before, after=after)


def _name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise NoticeRefused("name_invalid", "a name of 1 to 100 characters is needed")
    return name


def _locked_or_new(model: type[Any], team: Team, name: str, instance: Any, what: str) -> Any:
    """The row to change, locked (or a new one of the team), once its name is known to be free."""
    taken = model.objects.filter(team=team, name=name)
    if instance is not None:
        taken = taken.exclude(pk=instance.pk)
    if taken.exists():
        raise NoticeRefused("name_taken", f"this team already has a {what} of that name")
    return model(team=team) if instance is None else model.objects.select_for_update().get(pk=instance.pk)


def channel_save(
    *,
    actor: Any,
    team: Team,
    name: str,
    kind: str,
    target: str | None,
    secret: str | None = None,
    active: bool = True,
    channel: TeamChannel | None = None,
) -> TeamChannel:
    """Create (``channel`` None) or change a team's channel. ``target`` or ``secret`` None keeps the one
    stored (a saved URL is never shown again, its path can be a credential)."""
    if kind not in CHANNEL_KINDS:
        raise NoticeRefused("channel_kind_invalid", f"a channel is one of {', '.join(CHANNEL_KINDS)}")
    if target is None:
        target = channel.target if channel is not None else ""
    name, target = _name(name), target.strip()
    kept = channel.secret if channel is not None and channel.kind == kind else ""
    new_secret = kept if secret is None else secret.strip()
    channel_target_check(kind=kind, target=target, secret=new_secret)
    with transaction.atomic():
        channel = _locked_or_new(TeamChannel, team, name, channel, "channel")
        before = channel_snapshot(channel) if channel.pk else {}
        channel.name, channel.kind, channel.target, channel.secret, channel.active = (
            name,
            kind,
            target,
            new_secret,
            active,
        )
        channel.updated_at = timezone.now()
        channel.save()
        verb = "changed" if before else "created"
        _record(
            actor,
            "notification_channel_change",
            f"channel {name!r} of team {team.name} {verb}",
            before,
            channel_snapshot(channel),
        )
    return channel


def channel_delete(*, actor: Any, channel: TeamChannel) -> None:
    with transaction.atomic():
        before = channel_snapshot(channel)
        channel.delete()
        _record(
            actor,
            "notification_channel_change",
            f"channel {before['name']!r} of team {before['team']} deleted",
            before,
            {},
        )


def channel_test(*, channel: TeamChannel) -> list[int]:
    """A test message on the channel (nothing changes: no trail row)."""
    return channel_test_send(channel=channel)


def _clean_list(values: Iterable[str], allowed: Sequence[str] | None, what: str) -> list[str]:
    out = sorted({str(v).strip() for v in values if str(v).strip()})
    if allowed is not None and any(v not in allowed for v in out):
        raise NoticeRefused("rule_invalid", f"{what}: one of {', '.join(allowed)}")
    return out


def rule_save(
    *,
    actor: Any,
    team: Team,
    name: str,
    mode: str,
    states: Iterable[str] = (),
    reasons: Iterable[str] = (),
    run_prefix: str = "",
    threshold_minutes: int = 0,
    channels: Iterable[TeamChannel] = (),
    active: bool = True,
    rule: NotificationRule | None = None,
) -> NotificationRule:
    """Create (``rule`` None) or change a team's rule. Its channels are the team's own (blank: all)."""
    if mode not in RULE_MODES:
        raise NoticeRefused("rule_invalid", f"a rule's mode is one of {', '.join(RULE_MODES)}")
    if threshold_minutes < 0 or threshold_minutes > 60 * 24 * 30:
        raise NoticeRefused("rule_invalid", "a threshold is 0 to 43200 minutes")
    chosen = list(channels)
    if any(c.team_id != team.pk for c in chosen):
        raise NoticeRefused("rule_invalid", "a rule sends only on its own team's channels")
    name = _name(name)
    state_list = _clean_list(states, HELD_STATES, "states")
    reason_list = _clean_list(reasons, None, "reasons")
    with transaction.atomic():
        rule = _locked_or_new(NotificationRule, team, name, rule, "rule")
        before = rule_snapshot(rule) if rule.pk else {}
        rule.name, rule.mode, rule.states, rule.reasons = name, mode, state_list, reason_list
        rule.run_prefix, rule.threshold_minutes, rule.active = run_prefix.strip(), threshold_minutes, active
        rule.updated_at = timezone.now()
        rule.save()
        rule.channels.set(chosen)
        verb = "changed" if before else "created"
        _record(
            actor, "notification_rule_change", f"rule {name!r} of team {team.name} {verb}", before, rule_snapshot(rule)
        )
    return rule


def rule_delete(*, actor: Any, rule: NotificationRule) -> None:
    with transaction.atomic():
        before = rule_snapshot(rule)
        rule.delete()
        _record(
            actor, "notification_rule_change", f"rule {before['name']!r} of team {before['team']} deleted", before, {}
        )
