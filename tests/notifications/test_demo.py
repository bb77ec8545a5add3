"""Under `make run` the demo team has an email channel and a rule: a held demo turn's email is printed by
Django's console mail backend (the worker's stdout)."""

from __future__ import annotations

import pytest

from journals.models import TurnEffective
from notifications.models import NotificationRule, TeamChannel
from ops.demo import DEMO_MAIL, demo_notifications, demo_seed

pytestmark = pytest.mark.django_db


def test_a_held_demo_turn_is_emailed_to_the_console(settings, capsys, eager_celery, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    settings.LOOPX_PUBLIC_URL = "http://127.0.0.1:8000"
    assert demo_notifications() is True
    assert demo_notifications() is False  # a second start adds nothing
    assert TeamChannel.objects.get().target == DEMO_MAIL
    assert NotificationRule.objects.get().mode == "immediate"
    with django_capture_on_commit_callbacks(execute=True):
        demo_seed()
    held = TurnEffective.objects.filter(gate="hold").select_related("turn", "run")
    assert held.exists()
    out = capsys.readouterr().out.replace("\n ", " ")  # unfold long headers
    for row in held:
        label = row.get_state_display()
        assert f"Subject: LoopX: turn {row.turn.turn_id} of run {row.run.run_id} is {label}" in out
        assert f"Open the turn: http://127.0.0.1:8000/turns/{row.turn_id}/" in out
    assert f"To: {DEMO_MAIL}" in out
