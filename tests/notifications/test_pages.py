"""The console's pages and the API of a team's channels and rules: team-scoped (another team's channel is a
404, its name never shown), CSRF-guarded POST forms, a "send a test" button, and a trail row per change;
a secret is never shown back."""

from __future__ import annotations

import pytest
from django.test import Client

from notifications.models import NotificationRule, TeamChannel, WebhookDelivery
from teams.models import Team
from tests.personas import BLUE, RED
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db
ROUTING_KEY = "R0UTING-KEY-page-0003"


def _client(user, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def _csrf(client: Client, url: str) -> str:
    page = client.get(url)
    assert page.status_code == 200
    return str(page.context["csrf_token"])


def test_a_team_adds_edits_tests_and_deletes_a_channel_and_a_rule(
    red_operator, webhook_receiver, eager_celery, django_capture_on_commit_callbacks
):
    red = Team.objects.get(name=RED[0])
    client = _client(red_operator, csrf=True)
    new = f"/notifications/teams/{red.pk}/channels/new/"
    form = {
        "name": "pager",
        "kind": "page",
        "target": f"{webhook_receiver.base}/v2/enqueue",
        "secret": ROUTING_KEY,
        "active": "on",
    }
    assert client.post(new, form).status_code == 403  # no CSRF token: refused
    token = _csrf(client, new)
    answer = client.post(new, {**form, "csrfmiddlewaretoken": token})
    assert answer.status_code == 302 and answer["Location"].endswith("?done=channel-saved")
    channel = TeamChannel.objects.get(team=red, name="pager")
    assert channel.secret == ROUTING_KEY

    page = client.get(f"/notifications/teams/{red.pk}/")
    text = page.content.decode()
    target = f"{webhook_receiver.base}/v2/enqueue"
    assert "pager" in text and ROUTING_KEY not in text and target not in text
    edit = client.get(f"/notifications/teams/{red.pk}/channels/{channel.pk}/").content.decode()
    assert ROUTING_KEY not in edit and target not in edit

    # An edit that leaves the target and the secret blank keeps them.
    answer = client.post(
        f"/notifications/teams/{red.pk}/channels/{channel.pk}/",
        {
            "name": "on-call pager",
            "kind": "page",
            "target": "",
            "secret": "",
            "active": "on",
            "csrfmiddlewaretoken": token,
        },
    )
    assert answer.status_code == 302
    channel.refresh_from_db()
    assert (channel.name, channel.secret, channel.target) == (
        "on-call pager",
        ROUTING_KEY,
        f"{webhook_receiver.base}/v2/enqueue",
    )

    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(
            f"/notifications/teams/{red.pk}/channels/{channel.pk}/test/", {"csrfmiddlewaretoken": token}
        )
    assert answer.status_code == 302
    (test,) = webhook_receiver.posted("/v2/enqueue")
    assert test["routing_key"] == ROUTING_KEY and test["event_action"] == "trigger"
    assert test["payload"]["summary"] == "LoopX: a test of the channel on-call pager of team red. Nothing is held."
    assert WebhookDelivery.objects.get(channel=channel).status == "delivered"

    answer = client.post(
        f"/notifications/teams/{red.pk}/rules/new/",
        {
            "name": "unsafe",
            "mode": "escalate",
            "states": ["held_effect"],
            "reasons": "effect_indeterminate",
            "run_prefix": "red-pay",
            "threshold_minutes": "15",
            "channels": [str(channel.pk)],
            "active": "on",
            "csrfmiddlewaretoken": token,
        },
    )
    assert answer.status_code == 302
    rule = NotificationRule.objects.get(team=red)
    assert (rule.mode, rule.states, rule.reasons, rule.run_prefix, rule.threshold_minutes) == (
        "escalate",
        ["held_effect"],
        ["effect_indeterminate"],
        "red-pay",
        15,
    )
    assert list(rule.channels.all()) == [channel]
    assert (
        client.post(
            f"/notifications/teams/{red.pk}/rules/{rule.pk}/delete/", {"csrfmiddlewaretoken": token}
        ).status_code
        == 302
    )
    assert (
        client.post(
            f"/notifications/teams/{red.pk}/channels/{channel.pk}/delete/", {"csrfmiddlewaretoken": token}
        ).status_code
        == 302
    )
    assert not TeamChannel.objects.exists() and not NotificationRule.objects.exists()

    kinds = list(OperatorAction.objects.order_by("seq").values_list("kind", flat=True))
    assert kinds == ["notification_channel_change"] * 2 + ["notification_rule_change"] * 2 + [
        "notification_channel_change"
    ]
    for row in OperatorAction.objects.all():
        assert ROUTING_KEY not in str(row.before) + str(row.after) and "/v2/enqueue" not in str(row.before) + str(
            row.after
        )


def test_an_outsider_team_sees_nothing_of_another_teams_notifications(red_operator, blue_operator, red_viewer):
    red = Team.objects.get(name=RED[0])
    blue = Team.objects.get(name=BLUE[0])
    TeamChannel.objects.create(team=red, name="red-secret-channel", kind="email", target="red@example.test")
    blue_client = _client(blue_operator)
    assert "red-secret-channel" not in blue_client.get("/notifications/").content.decode()
    assert blue_client.get(f"/notifications/teams/{red.pk}/").status_code == 404
    red_channel = TeamChannel.objects.get()
    for url in (
        f"/notifications/teams/{red.pk}/channels/{red_channel.pk}/test/",
        f"/notifications/teams/{red.pk}/channels/{red_channel.pk}/delete/",
        f"/notifications/teams/{blue.pk}/channels/{red_channel.pk}/delete/",
    ):
        assert blue_client.post(url).status_code == 404
    assert TeamChannel.objects.count() == 1 and not WebhookDelivery.objects.exists()
    # A viewer of red reads red's page but changes nothing.
    viewer = _client(red_viewer)
    assert "red-secret-channel" in viewer.get(f"/notifications/teams/{red.pk}/").content.decode()
    assert viewer.post(f"/notifications/teams/{red.pk}/channels/{red_channel.pk}/delete/").status_code == 403

    # The API: blue lists only its own channels, and cannot reach or write into red's.
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_login(blue_operator)
    assert api.get("/api/v1/notification-channels").json()["results"] == []
    assert api.get(f"/api/v1/notification-channels/{red_channel.pk}").status_code == 404
    refused = api.post(
        "/api/v1/notification-channels",
        {"team": red.pk, "name": "sneak", "kind": "email", "target": "x@example.test"},
        format="json",
    )
    assert refused.status_code == 400 and refused.json()["error"] == "team_invalid"


def test_the_api_creates_a_channel_and_a_rule_and_never_answers_a_secret(blue_operator):
    from rest_framework.test import APIClient

    blue = Team.objects.get(name=BLUE[0])
    api = APIClient()
    api.force_login(blue_operator)
    made = api.post(
        "/api/v1/notification-channels",
        {
            "team": blue.pk,
            "name": "chat",
            "kind": "chat",
            "target": "http://127.0.0.1:9/hooks/T0KEN-PATH",
            "secret": "chat-secret-0004",
        },
        format="json",
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["target_shown"] == "http://127.0.0.1:9/…" and body["has_secret"] is True
    assert "chat-secret-0004" not in made.content.decode() and "T0KEN-PATH" not in made.content.decode()
    rule = api.post(
        "/api/v1/notification-rules",
        {"team": blue.pk, "name": "reviews", "mode": "digest", "states": ["held_review"], "channels": [body["id"]]},
        format="json",
    )
    assert rule.status_code == 201, rule.content
    assert rule.json()["states"] == ["held_review"] and rule.json()["channels"] == [body["id"]]
    bad = api.post(
        "/api/v1/notification-rules",
        {"team": blue.pk, "name": "x", "mode": "digest", "states": ["resuming"]},
        format="json",
    )
    assert bad.status_code == 400
    inside = api.post(
        "/api/v1/notification-channels",
        {"team": blue.pk, "name": "meta", "kind": "chat", "target": "http://169.254.169.254/latest"},
        format="json",
    )
    assert inside.status_code == 400 and inside.json()["error"] == "webhook_url_refused"
    kinds = set(OperatorAction.objects.values_list("kind", flat=True))
    assert kinds == {"notification_channel_change", "notification_rule_change"}
