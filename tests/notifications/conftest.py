"""Real receivers on loopback for the team channels' tests: an SMTP server (aiosmtpd) started here, and the
webhook tests' HTTP receiver (chat and paging)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.ops.conftest import free_port, webhook_receiver

__all__ = ["webhook_receiver"]  # the HTTP receiver of chat and paging (tests/ops/conftest.py)


@dataclass
class Mailbox:
    port: int
    messages: list[EmailMessage] = field(default_factory=list)

    def texts(self) -> list[tuple[list[str], str, str]]:
        """(recipients, subject, text) of every message received, in order."""
        out = []
        for message in self.messages:
            body = message.get_body(preferencelist=("plain",))
            text = body.get_content().replace("\r\n", "\n") if body is not None else ""
            out.append((sorted(a.strip() for a in str(message["To"]).split(",")), str(message["Subject"]), text))
        return out


class _Collect:
    def __init__(self, box: Mailbox) -> None:
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.box.messages.append(message_from_bytes(envelope.content, policy=policy.default))  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server(settings) -> Iterator[Mailbox]:
    """An SMTP server on a spare loopback port; Django's SMTP backend is pointed at it."""
    box = Mailbox(port=free_port())
    controller = Controller(_Collect(box), hostname="127.0.0.1", port=box.port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", box.port
    settings.EMAIL_USE_TLS = False
    settings.DEFAULT_FROM_EMAIL = "loopx@example.test"
    try:
        yield box
    finally:
        controller.stop()
