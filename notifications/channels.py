"""A team channel's messages and how each one leaves: email, chat, page.

- email: Django's mail backend (``EMAIL_BACKEND``: the console backend unless ``EMAIL_HOST`` is set, SMTP
  then). The delivery's body keeps the subject and the text; the addresses are the channel's target.
- chat: a Slack-compatible incoming webhook (Mattermost and Rocket.Chat take the same), ``{"text": ...}``,
  signed like a webhook (``X-LoopX-Signature``) when the channel has a secret.
- page: PagerDuty's Events API v2: ``trigger`` when a hold starts or escalates, ``resolve`` when it ends,
  one ``dedup_key`` per turn hold. The routing key is the channel's secret: it is put into the body only
  as the request leaves, never into the stored body.

Chat and page URLs pass the same destination check as webhooks (notifications.destinations), when saved
and at every attempt. A message names the run, the turn, its state in words (recovery/state.py), how long
it has waited, what it needs and the turn page's absolute URL (``LOOPX_PUBLIC_URL``): never a secret, never
a value of a record's fields.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.core.validators import validate_email
from django.urls import reverse

from journals.models import TurnState
from kernel.errors import ServiceError
from recovery.state import StateValue

from .destinations import DestinationRefused, destination_check_at_save
from .models import TeamChannel, WebhookDelivery
from .transport import SIGNATURE_HEADER, SendResult, delivery_headers, error_text, post_checked, sign

USER_AGENT = "LoopX-Notify/1"
PAGE_SOURCE = "loopx"


class ChannelRefused(ServiceError):
    """A channel's target that cannot be saved (a bad address, a URL that reaches inside)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(400, code, detail)


def email_addresses(target: str) -> list[str]:
    return [a.strip() for a in target.split(",") if a.strip()]


def channel_target_check(*, kind: str, target: str, secret: str) -> None:
    """Refuse a target that cannot be sent to: bad addresses, a URL that reaches inside, a page without
    its routing key."""
    if kind == "email":
        addresses = email_addresses(target)
        if not addresses:
            raise ChannelRefused("channel_target_invalid", "an email channel needs at least one address")
        for address in addresses:
            try:
                validate_email(address)
            except ValidationError:
                raise ChannelRefused("channel_target_invalid", "an address of this channel is not valid") from None
        return
    try:
        destination_check_at_save(target)
    except DestinationRefused as refused:
        raise ChannelRefused(refused.code, refused.detail) from None
    if kind == "page" and not secret:
        raise ChannelRefused("channel_secret_required", "a paging channel needs its integration's routing key")


def target_shown(channel: TeamChannel) -> str:
    """What a page or an answer shows of the target: the addresses, or a URL's scheme and host only
    (a chat webhook's path is its credential)."""
    if channel.kind == "email":
        return channel.target
    parts = urlsplit(channel.target)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/…"


def channel_live(channel: TeamChannel | None) -> bool:
    return channel is not None and channel.active


# --- What a message says -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HoldFacts:
    """One held turn as a message tells it."""

    run: str
    turn: str
    state: str
    label: str
    waited_seconds: int
    needs: str
    link: str
    dedup_key: str


def waited_words(seconds: int) -> str:
    minutes = max(0, seconds) // 60
    if minutes < 1:
        return "less than a minute"
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    return " ".join(p for p in parts if p)


def reason_words(reason: str | None) -> str:
    return (reason or "no reason given").replace("_", " ")


def needs_words(value: StateValue) -> str:
    """What the held turn needs from a person, in words."""
    if value.needs_evidence:
        intents = ", ".join(value.needs_evidence)
        return f"evidence (happened or not happened) for intent {intents}"
    state = value.state
    if state == TurnState.HELD_REVIEW:
        return f"a review, then an approval or a block ({reason_words(value.reason)})"
    if state == TurnState.HELD_JOURNAL:
        return f"a repair of the journal ({reason_words(value.reason)})"
    if state == TurnState.HELD_INTEGRITY:
        return f"a finding resolved: stored records changed ({reason_words(value.reason)})"
    if state == TurnState.PARKED:
        return "a look at why recovery keeps failing, then an approval"
    if state == TurnState.BLOCKED_OPERATOR:
        return "an operator's approval (an operator blocked it)"
    return "nothing more"


def turn_link(turn_pk: int) -> str:
    return str(settings.LOOPX_PUBLIC_URL).rstrip("/") + reverse("console:turn", args=[turn_pk])


def _dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _hold_lines(facts: HoldFacts, event: str, threshold_minutes: int) -> tuple[str, list[str]]:
    where = f"turn {facts.turn} of run {facts.run}"
    if event == "notice.resolve":
        subject = f"LoopX: {where} is no longer held"
        return subject, [f"{subject}: it is {facts.label} now.", f"Open the turn: {facts.link}"]
    still = "still " if event == "notice.escalate" else ""
    subject = f"LoopX: {where} is {still}{facts.label}"
    waited = f"It has waited {waited_words(facts.waited_seconds)}."
    if event == "notice.escalate":
        waited += f" That is past this rule's {threshold_minutes} min."
    return subject, [f"{subject}.", waited, f"It needs {facts.needs}.", f"Open the turn: {facts.link}"]


def hold_body(*, kind: str, event: str, facts: HoldFacts, team: str, rule: str, threshold_minutes: int) -> str:
    """The stored body of one hold's message to one kind of channel (no secret: see channel_send)."""
    subject, lines = _hold_lines(facts, event, threshold_minutes)
    if kind == "email":
        return _dumps({"subject": subject, "text": "\n".join(lines) + "\n"})
    if kind == "chat":
        return _dumps({"text": "\n".join(lines)})
    if event == "notice.resolve":
        return _dumps({"event_action": "resolve", "dedup_key": facts.dedup_key})
    return _dumps(
        {
            "event_action": "trigger",
            "dedup_key": facts.dedup_key,
            "payload": {
                "summary": " ".join(lines[:2])[:1024],
                "source": PAGE_SOURCE,
                "severity": "critical" if event == "notice.escalate" else "error",
                "component": facts.run,
                "group": team,
                "class": facts.state,
                "custom_details": {
                    "run": facts.run,
                    "turn": facts.turn,
                    "state": facts.label,
                    "waited": waited_words(facts.waited_seconds),
                    "needs": facts.needs,
                    "rule": rule,
                },
            },
            "links": [{"href": facts.link, "text": "Turn page"}],
            "client": "LoopX",
            "client_url": facts.link,
        }
    )


def digest_body(*, kind: str, rule: str, day: str, holds: Sequence[HoldFacts]) -> str:
    """One rule's daily digest: every hold it follows that is still open, longest waiting first."""
    subject = f"LoopX daily digest, {day}: {len(holds)} held turn{'s' if len(holds) != 1 else ''} ({rule})"
    lines = [subject + "."]
    for facts in holds:
        lines.append(
            f"- turn {facts.turn} of run {facts.run}: {facts.label}, waited {waited_words(facts.waited_seconds)}, "
            f"needs {facts.needs}: {facts.link}"
        )
    if kind == "email":
        return _dumps({"subject": subject, "text": "\n".join(lines) + "\n"})
    return _dumps({"text": "\n".join(lines)})


def test_body(*, kind: str, channel: str, team: str, key: str) -> str:
    text = f"LoopX: a test of the channel {channel} of team {team}. Nothing is held."
    if kind == "email":
        return _dumps({"subject": f"LoopX: test of {channel}", "text": text + "\n"})
    if kind == "chat":
        return _dumps({"text": text})
    return _dumps(
        {
            "event_action": "trigger",
            "dedup_key": key,
            "payload": {"summary": text, "source": PAGE_SOURCE, "severity": "info"},
            "client": "LoopX",
        }
    )


# --- Sending -----------------------------------------------------------------------------------------


def _timeout() -> float:
    return float(getattr(settings, "LOOPX_WEBHOOK_TIMEOUT_SECONDS", 5))


def _send_email(channel: TeamChannel, delivery: WebhookDelivery) -> SendResult:
    started = time.perf_counter()
    message = json.loads(delivery.body)
    try:
        connection = get_connection(timeout=_timeout())
        EmailMessage(
            subject=message["subject"],
            body=message["text"],
            to=email_addresses(channel.target),
            connection=connection,
            headers={"X-LoopX-Event": delivery.event, "X-LoopX-Delivery": str(delivery.pk)},
        ).send()
    except Exception as exc:  # refused, timed out, rejected recipients: the server is down for us
        return SendResult(False, None, error_text(exc), (time.perf_counter() - started) * 1000)
    return SendResult(True, None, "", (time.perf_counter() - started) * 1000)


def _send_http(channel: TeamChannel, delivery: WebhookDelivery, number: int) -> SendResult:
    body = delivery.body.encode()
    headers = delivery_headers(
        event=delivery.event,
        delivery_id=delivery.pk,
        attempt=number,
        key=delivery.idempotency_key,
        request_id=delivery.request_id,
        user_agent=USER_AGENT,
    )
    if channel.kind == "page":
        payload = json.loads(delivery.body)
        payload["routing_key"] = channel.secret  # only as the request leaves: the stored body has none
        body = _dumps(payload).encode()
    elif channel.secret:
        headers[SIGNATURE_HEADER] = sign(channel.secret, body)
    return post_checked(channel.target, body, headers, _timeout())


def channel_send(delivery: WebhookDelivery, number: int) -> SendResult:
    """One attempt of a channel's delivery."""
    channel = delivery.channel
    if channel is None:
        return SendResult(False, None, "no channel", 0.0)
    if channel.kind == "email":
        return _send_email(channel, delivery)
    return _send_http(channel, delivery, number)
