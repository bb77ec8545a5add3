"""A database that cannot be reached is a 503 with Retry-After, never a 500: the API's one error shape,
the console's plain page, and /healthz naming what is down."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from unittest import mock

import pytest
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.backends.utils import CursorWrapper
from django.test import Client
from kombu.exceptions import OperationalError as BrokerError

from ops.unavailable import dependency_down

UNAVAILABLE_KEYS = {"error", "detail", "line"}


@contextlib.contextmanager
def database_refuses() -> Iterator[None]:
    """Every statement fails as on a connection whose server went away (psycopg names no SQLSTATE then)."""

    def refuse(self, *args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    with mock.patch.object(CursorWrapper, "execute", refuse), mock.patch.object(CursorWrapper, "executemany", refuse):
        yield


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when this returns: nothing listens there


def assert_unavailable(response) -> None:
    assert response.status_code == 503
    assert int(response["Retry-After"]) > 0
    body = response.json()
    assert set(body) == UNAVAILABLE_KEYS
    assert body["error"] == "unavailable" and body["line"] is None
    assert "database" in body["detail"] and "unreachable" in body["detail"]


@pytest.mark.django_db
def test_the_api_answers_503_with_retry_after_while_the_database_refuses(settings):
    settings.LOOPX_UNAVAILABLE_RETRY_AFTER = 7
    client = Client(raise_request_exception=False)
    with database_refuses():
        # A runtime token is looked up in the database before the view runs (DRF's authentication).
        response = client.get("/api/v1/runs", HTTP_AUTHORIZATION="Bearer lxr_not-looked-up-yet")
        posted = client.post(
            "/api/v1/runs/run-503/records", data=b'{"v":1}\n', content_type="application/x-ndjson",
            HTTP_AUTHORIZATION="Bearer lxr_not-looked-up-yet",
        )
    assert_unavailable(response)
    assert response["Retry-After"] == "7"
    assert_unavailable(posted)
    assert response["X-Request-ID"]  # still inside the request id middleware


@pytest.mark.django_db
def test_the_console_answers_a_plain_page_that_names_the_database(operator):
    client = Client(raise_request_exception=False)
    client.force_login(operator)
    with database_refuses():
        # The session is read by a middleware before any view: Django's 500 becomes the 503.
        response = client.get("/runs/")
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "The database is unreachable" in page and "Traceback" not in page


@pytest.mark.django_db
def test_any_other_database_error_is_still_a_500(operator):
    client = Client(raise_request_exception=False)

    def bad_statement(self, *args, **kwargs):
        raise DatabaseError("syntax error at or near")  # a bug, not an outage

    with mock.patch.object(CursorWrapper, "execute", bad_statement):
        response = client.get("/api/v1/runs", HTTP_AUTHORIZATION="Bearer lxr_x")
    assert response.status_code == 500


def test_what_counts_as_down():
    class Deadlock(Exception):
        sqlstate = "40P01"

    class Shutdown(Exception):
        sqlstate = "57P01"  # terminating connection due to administrator command

    class Refused(Exception):
        sqlstate = None

    def wrapped(cause: Exception) -> OperationalError:
        error = OperationalError(str(cause))
        error.__cause__ = cause
        return error

    assert dependency_down(wrapped(Deadlock())) is None
    assert dependency_down(wrapped(Shutdown())) == "database"
    assert dependency_down(wrapped(Refused())) == "database"
    assert dependency_down(InterfaceError("connection already closed")) == "database"
    assert dependency_down(BrokerError("Error 111 connecting to 127.0.0.1:1. Connection refused.")) == "broker"
    assert dependency_down(ValueError("x")) is None


@pytest.mark.django_db
def test_healthz_names_the_database_when_it_is_down():
    client = Client(raise_request_exception=False)
    with database_refuses():
        response = client.get("/healthz")
    assert response.status_code == 200  # liveness: restarting this process would bring nothing back
    body = response.json()
    assert body["status"] == "degraded" and body["down"] == ["database"]
    assert "OperationalError" in body["checks"]["database"]["error"]


@pytest.mark.django_db
def test_healthz_names_the_broker_when_it_is_down(settings):
    settings.CELERY_BROKER_URL = f"redis://:secret-password@127.0.0.1:{closed_port()}/0"
    response = Client().get("/healthz")
    body = response.json()
    assert response.status_code == 200 and body["down"] == ["broker"]
    assert "secret-password" not in response.content.decode()


@pytest.mark.django_db
def test_healthz_is_ok_when_everything_answers():
    body = Client().get("/healthz").json()
    assert body["status"] == "ok" and body["down"] == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_database_on_a_closed_port_is_a_503_not_a_500():
    """The real thing: the connection is made to a port nothing listens on."""
    connection = connections["default"]
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict["PORT"] = str(closed_port())
    connection.settings_dict["HOST"] = "127.0.0.1"
    try:
        client = Client(raise_request_exception=False)
        assert_unavailable(client.get("/api/v1/runs", HTTP_AUTHORIZATION="Bearer lxr_x"))
        health = client.get("/healthz").json()
        assert health["down"] == ["database"]
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
