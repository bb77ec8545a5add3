"""Telling a team about its held turns: which rule speaks, when, and on which channels.

A *hold* (TurnHold) runs from the moment the gate holds a turn until it lets it go; its ``dedup_key`` names
it in every message. A rule's *notice* (HoldNotice) of a hold says at most one first message, one
escalation and one resolve, so a repeated assessment or sweep stays quiet:

- ``immediate``: a ``notice.trigger`` as soon as the hold matches the rule, a ``notice.escalate`` once the
  turn has waited ``threshold_minutes`` (when the threshold is not 0);
- ``escalate``: a ``notice.escalate`` once the turn has waited ``threshold_minutes``;
- ``digest``: nothing per hold; one ``notice.digest`` a day (from ``LOOPX_NOTIFY_DIGEST_HOUR``, UTC) that
  lists every open hold the rule follows past its threshold. A paging channel gets no digest.

A notice that said something says ``notice.resolve`` when its hold ends or stops matching the rule. The
state is read from TurnEffective (recovery/state.py, its one writer): ``notices_turns_changed`` runs on that
writer's ``turn_hold_changed`` signal, in its transaction, so an operator's approval resolves at once;
``notices_sweep`` (beat) escalates, resolves what a lost signal missed and sends the digests.

A rule hears only of its team's runs (the team's prefixes, journals.access.RunScope), and only of those
starting with its own ``run_prefix``. Every message is a delivery row (notifications.delivery), created
under a savepoint and published after commit: a failing channel never blocks the caller, nor another
channel.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Prefetch, Q
from django.utils import timezone

from journals.access import RunScope
from journals.models import TurnEffective
from recovery.state import HELD, HOLD, state_of

from . import channels as messages
from .delivery import deliveries_create
from .models import HoldNotice, NotificationRule, TeamChannel, TurnHold

logger = logging.getLogger("loopx.notifications")

HELD_STATES = tuple(sorted(str(s) for s in HELD))


@dataclass(frozen=True)
class RuleView:
    """An active rule with what routing needs read once: its team's scope and its channels."""

    rule: NotificationRule
    scope: RunScope
    channels: tuple[TeamChannel, ...]

    def matches(self, *, run_id: str, state: str, reason: str | None) -> bool:
        rule = self.rule
        return (
            state in HELD_STATES
            and self.scope.allows(run_id)
            and run_id.startswith(rule.run_prefix)
            and (not rule.states or state in rule.states)
            and (not rule.reasons or (reason or "") in rule.reasons)
        )


def active_rules() -> list[RuleView]:
    rules = (
        NotificationRule.objects.filter(active=True)
        .select_related("team")
        .prefetch_related(
            "team__prefixes",
            Prefetch("channels", queryset=TeamChannel.objects.filter(active=True)),
            Prefetch("team__notification_channels", queryset=TeamChannel.objects.filter(active=True)),
        )
    )
    views = []
    for rule in rules:
        chosen = list(rule.channels.all()) or list(rule.team.notification_channels.all())
        scope = RunScope.of(p.prefix for p in rule.team.prefixes.all())
        views.append(RuleView(rule, scope, tuple(chosen)))
    return views


def dedup_key(*, run_id: str, turn_id: str, started_at: datetime) -> str:
    raw = "\0".join((run_id, turn_id, started_at.isoformat()))
    return "loopx-hold-" + hashlib.sha256(raw.encode()).hexdigest()[:32]


def _facts(effective: TurnEffective, hold: TurnHold, now: datetime) -> messages.HoldFacts:
    value = state_of(effective)
    if value is None:  # an effective row always has a state; this names the impossible for the type checker
        raise ValueError("a turn's effective row without a state")
    return messages.HoldFacts(
        run=hold.run_ident,
        turn=hold.turn_ident,
        state=str(value.state),
        label=value.label,
        # From the start of the hold, not of its current state: a hold that changes reason keeps its wait.
        waited_seconds=int((now - min(hold.started_at, effective.since)).total_seconds()),
        needs=messages.needs_words(value),
        link=messages.turn_link(effective.turn_id),
        dedup_key=hold.dedup_key,
    )


def _deliver(channel_list: Iterable[TeamChannel], event: str, key: str, body_of: Any, run_id: str | None) -> list[int]:
    """One delivery per channel, its body in the channel's shape (an existing key makes none)."""
    targets = [("channel", channel, body_of(channel.kind)) for channel in channel_list]
    return deliveries_create(targets=targets, event=event, key=key, run=run_id)


def _say(view: RuleView, notice: HoldNotice, event: str, facts: messages.HoldFacts) -> list[int]:
    rule = view.rule
    key = f"{event}:{notice.hold.dedup_key}:{rule.pk}"
    return _deliver(
        view.channels,
        event,
        key,
        lambda kind: messages.hold_body(
            kind=kind,
            event=event,
            facts=facts,
            team=rule.team.name,
            rule=rule.name,
            threshold_minutes=rule.threshold_minutes,
        ),
        notice.hold.run_ident,
    )


def _resolve(notice: HoldNotice, view: RuleView | None, facts: messages.HoldFacts | None, now: datetime) -> None:
    if notice.resolved_at is not None:
        return
    notice.resolved_at = now
    notice.save(update_fields=["resolved_at"])
    if view is not None and facts is not None and (notice.triggered_at or notice.escalated_at):
        _say(view, notice, "notice.resolve", facts)


def _advance(view: RuleView, notice: HoldNotice, facts: messages.HoldFacts, now: datetime) -> None:
    rule = view.rule
    if notice.resolved_at is not None or rule.mode == "digest":
        return
    if rule.mode == "immediate" and notice.triggered_at is None:
        notice.triggered_at = now
        notice.save(update_fields=["triggered_at"])
        _say(view, notice, "notice.trigger", facts)
    past = facts.waited_seconds >= rule.threshold_minutes * 60
    wants_escalation = rule.mode == "escalate" or rule.threshold_minutes > 0
    if past and wants_escalation and notice.escalated_at is None:
        notice.escalated_at = now
        notice.save(update_fields=["escalated_at"])
        _say(view, notice, "notice.escalate", facts)


def _rule_views_by_pk(views: Iterable[RuleView]) -> dict[int, RuleView]:
    return {v.rule.pk: v for v in views}


def _reconcile(effective: TurnEffective, run_id: str, turn_id: str, views: list[RuleView], now: datetime) -> None:
    """Bring one turn's hold and notices in line with its stored state."""
    hold = TurnHold.objects.filter(turn_id=effective.turn_id, ended_at__isnull=True).first()
    by_pk = _rule_views_by_pk(views)
    if effective.gate != HOLD:
        if hold is None:
            return
        facts = _facts(effective, hold, now)
        for notice in hold.notices.filter(resolved_at__isnull=True).select_related("rule"):
            _resolve(notice, by_pk.get(notice.rule_id) or _inactive_view(notice.rule), facts, now)
        hold.ended_at = now
        hold.save(update_fields=["ended_at"])
        return
    matching = [v for v in views if v.matches(run_id=run_id, state=effective.state, reason=effective.reason)]
    if hold is None:
        if not matching:
            return
        started = min(now, effective.since)  # the hold began when the gate held the turn, not when a rule saw it
        hold = TurnHold.objects.create(
            turn_id=effective.turn_id,
            run_ident=run_id,
            turn_ident=turn_id,
            started_at=started,
            dedup_key=dedup_key(run_id=run_id, turn_id=turn_id, started_at=started),
        )
    facts = _facts(effective, hold, now)
    wanted = {v.rule.pk for v in matching}
    for notice in hold.notices.filter(resolved_at__isnull=True).select_related("rule"):
        if notice.rule_id not in wanted:
            _resolve(notice, by_pk.get(notice.rule_id) or _inactive_view(notice.rule), facts, now)
    for view in matching:
        notice, _ = HoldNotice.objects.get_or_create(hold=hold, rule=view.rule, defaults={"opened_at": now})
        _advance(view, notice, facts, now)


def _inactive_view(rule: NotificationRule) -> RuleView:
    """A rule switched off still resolves what it said (on the channels it would use)."""
    chosen = list(rule.channels.filter(active=True)) or list(rule.team.notification_channels.filter(active=True))
    return RuleView(rule, RunScope(()), tuple(chosen))


def notices_turns_changed(*, run_id: str, turn_ids: list[str], now: datetime | None = None) -> None:
    """Turns of a run entered, changed within or left a hold: open, advance or resolve their notices. Runs
    in the caller's transaction under its own savepoint; an error rolls back only the notices. With no
    active rule and no open hold of the run it costs two queries, whatever the number of turns."""
    if not turn_ids:
        return
    now = now or timezone.now()
    with transaction.atomic():
        open_holds = TurnHold.objects.filter(run_ident=run_id, ended_at__isnull=True)
        if not NotificationRule.objects.filter(active=True).exists() and not open_holds.exists():
            return
        views = active_rules()
        rows = TurnEffective.objects.filter(turn__run__run_id=run_id, turn__turn_id__in=turn_ids)
        for effective in rows.select_related("turn"):
            _reconcile(effective, run_id, effective.turn.turn_id, views, now)


def _digest_due(rule: NotificationRule, now: datetime) -> bool:
    hour = int(getattr(settings, "LOOPX_NOTIFY_DIGEST_HOUR", 8))
    return now.hour >= hour and rule.last_digest_on != now.date()


def _digest(view: RuleView, now: datetime) -> int:
    rule = view.rule
    open_notices = HoldNotice.objects.filter(
        rule=rule, resolved_at__isnull=True, hold__ended_at__isnull=True
    ).select_related("hold")
    holds: list[messages.HoldFacts] = []
    for notice in open_notices:
        effective = TurnEffective.objects.filter(turn_id=notice.hold.turn_id, gate=HOLD).first()
        if effective is None:
            continue
        facts = _facts(effective, notice.hold, now)
        if facts.waited_seconds >= rule.threshold_minutes * 60:
            holds.append(facts)
    rule.last_digest_on = now.date()
    rule.save(update_fields=["last_digest_on"])
    if not holds:
        return 0
    holds.sort(key=lambda f: (-f.waited_seconds, f.run, f.turn))
    day = now.date().isoformat()
    return len(
        _deliver(
            [c for c in view.channels if c.kind != "page"],
            "notice.digest",
            f"notice.digest:{rule.pk}:{day}",
            lambda kind: messages.digest_body(kind=kind, rule=rule.name, day=day, holds=holds),
            None,
        )
    )


def notices_sweep(*, now: datetime | None = None, limit: int = 5000) -> dict[str, int]:
    """Beat: open what a lost signal missed, escalate holds past their threshold, resolve holds that
    ended, send the digests that are due. Returns counts."""
    now = now or timezone.now()
    views = active_rules()
    turns: set[int] = set(TurnHold.objects.filter(ended_at__isnull=True).values_list("turn_id", flat=True)[:limit])
    for view in views:
        rule = view.rule
        held = TurnEffective.objects.filter(gate=HOLD).filter(view.scope.q("run__run_id"))
        held = held.filter(run__run_id__startswith=rule.run_prefix)
        if rule.states:
            held = held.filter(state__in=list(rule.states))
        if rule.reasons:
            held = held.filter(Q(reason__in=list(rule.reasons)))
        turns.update(held.values_list("turn_id", flat=True)[:limit])
    reconciled = 0
    for effective in TurnEffective.objects.filter(turn_id__in=sorted(turns)).select_related("turn", "run"):
        try:
            with transaction.atomic():
                _reconcile(effective, effective.run.run_id, effective.turn.turn_id, views, now)
            reconciled += 1
        except Exception:  # one turn's trouble never stops the others' notices
            logger.exception("notice reconcile failed", extra={"event": "notice.reconcile_failed"})
    # A hold whose turn lost its state row (removed) ends too.
    for hold in TurnHold.objects.filter(ended_at__isnull=True).exclude(
        turn_id__in=TurnEffective.objects.values("turn_id")
    ):
        hold.notices.filter(resolved_at__isnull=True).update(resolved_at=now)
        hold.ended_at = now
        hold.save(update_fields=["ended_at"])
    digests = 0
    for view in views:
        if view.rule.mode == "digest" and _digest_due(view.rule, now):
            with transaction.atomic():
                digests += _digest(view, now)
    return {"turns": reconciled, "digests": digests}


def channel_test_send(*, channel: TeamChannel, now: datetime | None = None) -> list[int]:
    """An operator's "send a test": one message on the channel, through the same delivery path."""
    now = now or timezone.now()
    key = f"notice.test:{channel.pk}:{now.isoformat()}"
    page_key = "loopx-test-" + hashlib.sha256(key.encode()).hexdigest()[:24]
    with transaction.atomic():
        return _deliver(
            [channel],
            "notice.test",
            key,
            lambda kind: messages.test_body(kind=kind, channel=channel.name, team=channel.team.name, key=page_key),
            None,
        )
