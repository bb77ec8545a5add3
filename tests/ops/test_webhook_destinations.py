"""Webhooks cannot reach inside (notifications/destinations.py, docs/deployment.md): a URL whose host is, or
resolves to, a loopback, link-local, private or otherwise non-global address is refused when it is saved
(admin form, API) and again at delivery, since a name can resolve elsewhere by then. The allow-list
(``LOOPX_WEBHOOK_ALLOW_NETS``) opens a network for an internal receiver.

The resolver is the tests' table (tests/conftest.py); the only receiver is a loopback server started here,
reachable only through the allow-list. No test sends a packet outside 127.0.0.0/8: a refused address is
refused before any connection is made (asserted by a socket guard)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from notifications import delivery
from notifications.destinations import DestinationRefused, destination_check
from notifications.models import Webhook, WebhookDelivery

pytestmark = pytest.mark.django_db

INSIDE = ["127.0.0.1", "169.254.169.254", "10.0.0.1", "192.168.1.20", "172.16.0.5", "::1", "fe80::1", "0.0.0.0"]
SECRET = "s" * 24


@pytest.fixture
def names(webhook_destinations: dict[str, list[str]], settings: Any) -> dict[str, list[str]]:
    """Names that resolve inside; the allow-list empty (production's default)."""
    webhook_destinations.update({
        "hooks.local.test": ["127.0.0.1"],
        "metadata.test": ["169.254.169.254"],
        "intranet.test": ["10.0.0.1"],
        "mixed.test": ["93.184.216.34", "10.0.0.1"],  # one public address does not excuse a private one
        "public.test": ["93.184.216.34"],
    })  # fmt: skip
    settings.LOOPX_WEBHOOK_ALLOW_NETS = []
    return webhook_destinations


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every connection the code under test opens, refused before a packet when it is not loopback."""
    opened: list[tuple[str, int]] = []
    real = socket.create_connection

    def guarded(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        host, port = address[0], int(address[1])
        opened.append((host, port))
        if not ipaddress.ip_address(host).is_loopback:
            raise AssertionError(f"a test tried to connect to {host}")
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", guarded)
    return opened


@pytest.mark.parametrize("host", INSIDE)
def test_an_address_inside_is_refused(names, host):
    literal = f"[{host}]" if ":" in host else host
    with pytest.raises(DestinationRefused) as refused:
        destination_check(f"http://{literal}:8080/hook")
    assert refused.value.code == "webhook_url_refused"


@pytest.mark.parametrize("name", ["hooks.local.test", "metadata.test", "intranet.test", "mixed.test"])
def test_a_name_that_resolves_inside_is_refused(names, name):
    with pytest.raises(DestinationRefused) as refused:
        destination_check(f"https://{name}/hook")
    assert refused.value.code == "webhook_url_refused" and name in refused.value.detail


def test_a_public_name_passes_and_keeps_its_checked_addresses(names):
    checked = destination_check("https://public.test/hook?x=1")
    assert checked.host == "public.test" and checked.port == 443 and checked.path == "/hook?x=1"
    assert [str(a) for a in checked.addresses] == ["93.184.216.34"]


def test_the_allow_list_opens_a_network(names, settings):
    settings.LOOPX_WEBHOOK_ALLOW_NETS = ["10.0.0.0/8"]
    assert [str(a) for a in destination_check("http://intranet.test/h").addresses] == ["10.0.0.1"]
    with pytest.raises(DestinationRefused):
        destination_check("http://metadata.test/h")


def test_the_api_refuses_to_save_a_url_inside_typed(names, admin_client_api: APIClient):
    for url in ("http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:5432/", "https://intranet.test/h"):
        answer = admin_client_api.post(
            "/api/v1/webhooks", {"name": "inside", "url": url, "secret": SECRET, "events": []}, format="json"
        )
        assert answer.status_code == 400, answer.content
        assert answer.json()["error"] == "webhook_url_refused" and "line" in answer.json()
    assert not Webhook.objects.exists()
    made = admin_client_api.post(
        "/api/v1/webhooks", {"name": "pub", "url": "https://public.test/h", "secret": SECRET, "events": []},
        format="json",
    )
    assert made.status_code == 201, made.content
    moved = admin_client_api.patch(f"/api/v1/webhooks/{made.json()['id']}", {"url": "http://10.0.0.1/"}, format="json")
    assert moved.status_code == 400 and moved.json()["error"] == "webhook_url_refused"
    assert Webhook.objects.get().url == "https://public.test/h"


def test_the_model_and_the_admin_form_refuse_it(names):
    from notifications.admin import WebhookForm

    with pytest.raises(ValidationError) as refused:
        Webhook(name="m", url="http://metadata.test/", secret=SECRET, events=[]).full_clean()
    assert "url" in refused.value.message_dict
    form = WebhookForm(data={"name": "f", "url": "http://10.0.0.1/", "secret": SECRET, "events": ["turn.blocked"],
                             "active": True})  # fmt: skip
    assert not form.is_valid() and "url" in form.errors


def test_delivery_checks_again_when_the_name_moved_inside(names, loopback_only, webhook_receiver):
    """Saved while the name was public; it resolves to the metadata service now: refused, nothing sent."""
    hook = Webhook.objects.create(name="moved", url="http://public.test/hook", secret=SECRET, events=["turn.blocked"])
    Webhook(pk=hook.pk, name="moved", url=hook.url, secret=SECRET, events=["turn.blocked"]).full_clean(
        validate_unique=False
    )
    names["public.test"] = ["169.254.169.254"]
    [pk] = delivery.enqueue("turn.blocked", ("r", "t", 1), {"run": "r"})
    assert delivery.attempt(pk) == "retry"
    item = WebhookDelivery.objects.get(pk=pk)
    assert item.last_error.startswith("webhook_url_refused") and "169.254.169.254" in item.last_error
    assert loopback_only == [] and webhook_receiver.requests == []


def test_the_loopback_receiver_is_reached_only_through_the_allow_list(names, loopback_only, webhook_receiver,
                                                                      settings):  # fmt: skip
    port = int(webhook_receiver.url.rsplit(":", 1)[1].split("/")[0])
    Webhook.objects.create(name="local", url=f"http://hooks.local.test:{port}/hook", secret=SECRET,
                           events=["turn.blocked"])  # fmt: skip
    [pk] = delivery.enqueue("turn.blocked", ("r", "t", 1), {"run": "r"})
    assert delivery.attempt(pk) == "retry"  # not allowed: refused before connecting
    assert loopback_only == [] and webhook_receiver.requests == []
    settings.LOOPX_WEBHOOK_ALLOW_NETS = ["127.0.0.0/8"]
    WebhookDelivery.objects.filter(pk=pk).update(next_attempt_at=WebhookDelivery.objects.get(pk=pk).created_at)
    assert delivery.attempt(pk) == "delivered"
    assert loopback_only == [("127.0.0.1", port)]  # the checked address, never the name resolved again
    [request] = webhook_receiver.requests
    assert request["headers"]["host"] == f"hooks.local.test:{port}"  # the receiver is named by its host


def test_a_redirect_is_not_followed_and_the_answer_kept_is_a_short_redacted_excerpt(names, loopback_only):
    """A receiver answers 302 to the metadata service with a long body holding a token: the redirect is a
    failed attempt (never followed), and the log keeps at most 200 characters of the body, redacted."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    from django.test import override_settings

    leak = "Authorization: Bearer lx_" + "a" * 40
    body = (f"moved {leak} " + "x" * 5000).encode()

    class Redirecting(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        with override_settings(LOOPX_WEBHOOK_ALLOW_NETS=["127.0.0.1/32"]):
            Webhook.objects.create(name="r", url=f"http://127.0.0.1:{server.server_address[1]}/h", secret=SECRET,
                                   events=["turn.blocked"])  # fmt: skip
            [pk] = delivery.enqueue("turn.blocked", ("r", "t", 1), {"run": "r"})
            assert delivery.attempt(pk) == "retry"
    finally:
        server.shutdown()
        server.server_close()
    item = WebhookDelivery.objects.get(pk=pk)
    assert item.last_status_code == 302
    assert item.last_error.startswith("HTTP 302: moved")
    assert len(item.last_error) <= len("HTTP 302: ") + delivery.EXCERPT_CHARS
    assert "lx_aaaa" not in item.last_error and "[redacted]" in item.last_error
    assert all(ipaddress.ip_address(h).is_loopback for h, _ in loopback_only)
    assert item.attempt_rows.get().error == item.last_error
