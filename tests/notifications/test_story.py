"""The team channels over one story, against real receivers on loopback (an SMTP server, an HTTP receiver):
a held unsafe effect pages past its threshold and is resolved the moment an operator approves it with
evidence; a review hold goes into the red team's daily digest; the blue team hears nothing of red's runs."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta

import pytest

from journals.models import Turn, TurnEffective
from notifications import services
from notifications.models import HoldNotice, TurnHold, WebhookDelivery
from notifications.notices import notices_sweep
from recovery.services import turn_approve
from teams.models import Team
from tests.console.scenarios import payments_run
from tests.personas import BLUE, RED

pytestmark = pytest.mark.django_db
ROUTING_KEY = "R0UTING-KEY-red-team-0001"
CHAT_SECRET = "chat-signing-secret-0002"
PUBLIC = "https://loopx.example.test"


@pytest.fixture
def teams(db, settings, webhook_receiver, smtp_server, red_operator, blue_operator):
    settings.LOOPX_PUBLIC_URL = PUBLIC
    settings.LOOPX_NOTIFY_DIGEST_HOUR = 8
    settings.LOOPX_WEBHOOK_BACKOFF_SECONDS = 0
    red_admin, blue_admin = red_operator, blue_operator
    red, blue = Team.objects.get(name=RED[0]), Team.objects.get(name=BLUE[0])
    page = services.channel_save(
        actor=red_admin,
        team=red,
        name="on-call pager",
        kind="page",
        target=f"{webhook_receiver.base}/v2/enqueue",
        secret=ROUTING_KEY,
    )
    chat = services.channel_save(
        actor=red_admin,
        team=red,
        name="red chat",
        kind="chat",
        target=f"{webhook_receiver.base}/red-chat",
        secret=CHAT_SECRET,
    )
    mail = services.channel_save(
        actor=red_admin, team=red, name="red mail", kind="email", target="red-oncall@example.test"
    )
    services.rule_save(
        actor=red_admin,
        team=red,
        name="unsafe effect unconfirmed",
        mode="escalate",
        states=["held_effect"],
        threshold_minutes=15,
        channels=[page],
    )
    services.rule_save(
        actor=red_admin, team=red, name="held now", mode="immediate", states=["held_effect"], channels=[chat]
    )
    services.rule_save(
        actor=red_admin, team=red, name="reviews", mode="digest", states=["held_review"], channels=[mail]
    )
    blue_mail = services.channel_save(
        actor=blue_admin, team=blue, name="blue mail", kind="email", target="blue@example.test"
    )
    blue_chat = services.channel_save(
        actor=blue_admin, team=blue, name="blue chat", kind="chat", target=f"{webhook_receiver.base}/blue-chat"
    )
    services.rule_save(
        actor=blue_admin, team=blue, name="everything", mode="immediate", channels=[blue_mail, blue_chat]
    )
    services.rule_save(actor=blue_admin, team=blue, name="daily", mode="digest", channels=[blue_mail])
    return red_admin


def _at(turn: Turn, minutes: int):
    return TurnEffective.objects.get(turn=turn).since + timedelta(minutes=minutes, seconds=5)


def test_a_held_unsafe_effect_pages_after_its_threshold_and_resolves_on_approval(
    teams, webhook_receiver, smtp_server, eager_celery, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        scenario = payments_run("red-pay-1")
    charge = scenario.turns["t-charge"]
    link = f"{PUBLIC}/turns/{charge.pk}/"
    hold = TurnHold.objects.get(turn=charge, ended_at__isnull=True)
    assert hold.dedup_key.startswith("loopx-hold-")

    # The immediate chat rule spoke at once, signed; the escalating page rule waits for its threshold.
    chat = webhook_receiver.posted("/red-chat")
    assert chat == [
        {
            "text": "LoopX: turn t-charge of run red-pay-1 is held: effect unconfirmed.\n"
            "It has waited less than a minute.\n"
            "To lift the hold: record what happened to intent charge-card (evidence: happened or not happened), "
            "then approve the turn.\n"
            f"Open the turn: {link}"
        }
    ]
    raw = next(r for r in webhook_receiver.requests if r["path"] == "/red-chat")
    assert (
        raw["headers"]["x-loopx-signature"]
        == "sha256=" + hmac.new(CHAT_SECRET.encode(), raw["body"], hashlib.sha256).hexdigest()
    )
    assert webhook_receiver.posted("/v2/enqueue") == []

    with django_capture_on_commit_callbacks(execute=True):
        notices_sweep(now=_at(charge, 10))
    assert webhook_receiver.posted("/v2/enqueue") == []

    with django_capture_on_commit_callbacks(execute=True):
        notices_sweep(now=_at(charge, 16))
    pages = webhook_receiver.posted("/v2/enqueue")
    summary = (
        "LoopX: turn t-charge of run red-pay-1 is still held: effect unconfirmed. "
        "It has waited 16 min. That is past this rule's 15 min."
    )
    assert pages == [
        {
            "routing_key": ROUTING_KEY,
            "event_action": "trigger",
            "dedup_key": hold.dedup_key,
            "payload": {
                "summary": summary,
                "source": "loopx",
                "severity": "critical",
                "component": "red-pay-1",
                "group": "red",
                "class": "held_effect",
                "custom_details": {
                    "run": "red-pay-1",
                    "turn": "t-charge",
                    "state": "held: effect unconfirmed",
                    "waited": "16 min",
                    "needs": "record what happened to intent charge-card (evidence: happened or not happened), "
                    "then approve the turn",
                    "rule": "unsafe effect unconfirmed",
                },
            },
            "links": [{"href": link, "text": "Turn page"}],
            "client": "LoopX",
            "client_url": link,
        }
    ]

    # Quiet on repeats: later sweeps say nothing more about the same hold.
    with django_capture_on_commit_callbacks(execute=True):
        notices_sweep(now=_at(charge, 20))
        notices_sweep(now=_at(charge, 40))
    assert len(webhook_receiver.posted("/v2/enqueue")) == 1
    assert len(webhook_receiver.posted("/red-chat")) == 1

    # The operator's approval with evidence ends the hold: the resolve leaves at once, no sweep needed.
    with django_capture_on_commit_callbacks(execute=True):
        turn_approve(turn=charge, actor=teams, reason="the charge went through", evidence={"charge-card": "happened"})
    assert TurnEffective.objects.get(turn=charge).gate != "hold"
    assert webhook_receiver.posted("/v2/enqueue")[1:] == [
        {"routing_key": ROUTING_KEY, "event_action": "resolve", "dedup_key": hold.dedup_key}
    ]
    # The evidence settled the effect (the engine resumes the turn): the hold ended there.
    assert webhook_receiver.posted("/red-chat")[1:] == [
        {"text": f"LoopX: turn t-charge of run red-pay-1 is no longer held: it is resuming now.\nOpen the turn: {link}"}
    ]
    hold.refresh_from_db()
    assert hold.ended_at is not None
    assert not HoldNotice.objects.filter(hold=hold, resolved_at__isnull=True).exists()

    # The delivery log keeps every message, and never the routing key nor the chat's secret.
    log = WebhookDelivery.objects.filter(channel__isnull=False)
    assert {d.status for d in log} == {"delivered"}
    assert all(ROUTING_KEY not in d.body and CHAT_SECRET not in d.body for d in log)

    # The blue team heard nothing of red's runs. Red's mail follows review holds in a daily digest only: it
    # heard nothing of the held effect (a sweep past the digest hour may have sent that day's digest).
    assert webhook_receiver.posted("/blue-chat") == []
    assert all(
        subject.startswith("LoopX daily digest, ") and "t-charge" not in body
        for _, subject, body in smtp_server.texts()
    )


def test_a_review_hold_goes_into_the_daily_digest_and_blue_hears_nothing(
    teams, webhook_receiver, smtp_server, eager_celery, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        scenario = payments_run("red-pay-2")
    skip = scenario.turns["t-skip"]
    since = TurnEffective.objects.get(turn=skip).since
    morning = (since + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    waited = int((morning - since).total_seconds()) // 60
    days, rest = divmod(waited, 24 * 60)
    hours, minutes = divmod(rest, 60)
    waited_words = " ".join(f"{n} {unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "min")) if n)

    with django_capture_on_commit_callbacks(execute=True):
        notices_sweep(now=morning.replace(hour=7))  # before the digest hour
    assert smtp_server.messages == []

    with django_capture_on_commit_callbacks(execute=True):
        notices_sweep(now=morning)
        notices_sweep(now=morning + timedelta(hours=2))  # once a day
    day = morning.date().isoformat()
    assert smtp_server.texts() == [
        (
            ["red-oncall@example.test"],
            f"LoopX daily digest, {day}: 1 held turn (reviews)",
            f"LoopX daily digest, {day}: 1 held turn (reviews).\n"
            f"- turn t-skip of run red-pay-2: held for review, waited {waited_words}, to lift the hold: review what "
            f"the engine found, then approve the turn or block it: {PUBLIC}/turns/{skip.pk}/\n",
        )
    ]
    digest = WebhookDelivery.objects.get(event="notice.digest")
    assert digest.idempotency_key.endswith(day) and digest.status == "delivered"

    # The next morning, the hold still open, the digest comes again.
    with django_capture_on_commit_callbacks(execute=True):
        notices_sweep(now=morning + timedelta(days=1))
    assert len(smtp_server.messages) == 2

    # Blue's rules (immediate and digest, every held state) heard nothing of red's runs.
    assert all("blue@example.test" not in str(m["To"]) for m in smtp_server.messages)
    assert webhook_receiver.posted("/blue-chat") == []
    assert not HoldNotice.objects.filter(rule__team__name=BLUE[0]).exists()


def test_a_held_turn_of_blue_reaches_blue_only(
    teams, webhook_receiver, smtp_server, eager_celery, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        scenario = payments_run("blue-pay-1")
    held = sorted(t for t, turn in scenario.turns.items() if TurnEffective.objects.get(turn=turn).gate == "hold")
    assert held == ["t-charge", "t-skip"]
    texts = [m["text"].split("\n")[0] for m in webhook_receiver.posted("/blue-chat")]
    assert sorted(texts) == [
        "LoopX: turn t-charge of run blue-pay-1 is held: effect unconfirmed.",
        "LoopX: turn t-skip of run blue-pay-1 is held for review.",
    ]
    assert sorted(s for _, s, _ in smtp_server.texts()) == [
        "LoopX: turn t-charge of run blue-pay-1 is held: effect unconfirmed",
        "LoopX: turn t-skip of run blue-pay-1 is held for review",
    ]
    assert all(to == ["blue@example.test"] for to, _, _ in smtp_server.texts())
    assert webhook_receiver.posted("/red-chat") == [] and webhook_receiver.posted("/v2/enqueue") == []


def test_a_failing_channel_blocks_neither_ingest_nor_another_channel(
    teams, webhook_receiver, smtp_server, eager_celery, settings, django_capture_on_commit_callbacks
):
    settings.EMAIL_PORT = 1  # nothing listens there: every mail attempt fails
    settings.LOOPX_WEBHOOK_MAX_ATTEMPTS = 2
    with django_capture_on_commit_callbacks(execute=True):
        scenario = payments_run("blue-pay-2")
    assert TurnEffective.objects.get(turn=scenario.turns["t-charge"]).gate == "hold"
    mails = WebhookDelivery.objects.filter(channel__kind="email")
    assert mails.count() == 2 and {m.status for m in mails} == {"failed"}
    assert all(m.attempts == 2 and m.last_error for m in mails)
    assert len(webhook_receiver.posted("/blue-chat")) == 2


def test_trail_rows_for_every_channel_and_rule_change(teams):
    from trail.models import OperatorAction

    rows = OperatorAction.objects.filter(kind__in=["notification_channel_change", "notification_rule_change"])
    assert rows.count() == 10
    for row in rows:
        text = json.dumps([row.before, row.after, row.reason])
        assert ROUTING_KEY not in text and CHAT_SECRET not in text and "/red-chat" not in text


def test_a_hold_keeps_its_wait_when_its_state_changes(
    teams, webhook_receiver, smtp_server, eager_celery, django_capture_on_commit_callbacks
):
    """The threshold counts from the start of the hold: a held turn whose state or reason changes ten
    minutes in (its state's own clock restarts) still pages at sixteen minutes."""
    with django_capture_on_commit_callbacks(execute=True):
        scenario = payments_run("red-pay-2")
    charge = scenario.turns["t-charge"]
    hold = TurnHold.objects.get(turn=charge, ended_at__isnull=True)
    TurnEffective.objects.filter(turn=charge).update(since=hold.started_at + timedelta(minutes=10))
    with django_capture_on_commit_callbacks(execute=True):
        notices_sweep(now=hold.started_at + timedelta(minutes=16, seconds=5))
    pages = webhook_receiver.posted("/v2/enqueue")
    assert [page["event_action"] for page in pages] == ["trigger"]
    assert pages[0]["dedup_key"] == hold.dedup_key
    assert pages[0]["payload"]["custom_details"]["waited"] == "16 min"
