"""The pages load nothing from another host (docs/deployment.md): every answer carries the
Content-Security-Policy of ``LOOPX_CSP``, which allows this host only and no inline script or style, and no
page the project renders holds an inline script, style or event handler that the policy would block."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]
INLINE = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle=|\son[a-z]+=", re.IGNORECASE)


def test_the_policy_allows_this_host_only():
    policy = settings.LOOPX_CSP
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    assert "unsafe" not in policy and "http" not in policy and "*" not in policy


def test_no_template_holds_an_inline_script_style_or_handler():
    templates = [p for p in ROOT.rglob("*.html") if ".venv" not in p.parts and "var" not in p.parts]
    assert len(templates) > 20
    for path in templates:
        text = re.sub(r"{#.*?#}", "", path.read_text(), flags=re.DOTALL)
        assert not INLINE.search(text), f"{path.relative_to(ROOT)}: {INLINE.search(text)}"


@pytest.mark.django_db
def test_every_kind_of_page_is_served_with_the_policy(operator, admin_user):
    from tests.console.scenarios import payments_run

    pay = payments_run()
    admin_user.is_superuser = True
    admin_user.save()
    anonymous, person, admin = Client(), Client(), Client()
    person.force_login(operator)
    admin.force_login(admin_user)
    pages = [
        (anonymous, "/accounts/login/"),
        (person, "/"),
        (person, f"/turns/{pay.turns['t-skip'].pk}/"),
        (person, f"/runs/{pay.run.pk}/"),
        (person, "/no-such-page/"),
        (admin, "/admin/"),
        (admin, "/admin/journals/apitoken/"),
        (person, "/api/schema/ui/"),
    ]
    for client, url in pages:
        answer = client.get(url)
        assert answer.status_code in (200, 404), (url, answer.status_code)
        assert answer["Content-Security-Policy"] == settings.LOOPX_CSP, url
        html = answer.content.decode()
        assert not INLINE.search(html), (url, INLINE.search(html))
        # Nothing is loaded from another host: every src and stylesheet href is this host's.
        assert not re.search(r'(?:src|href)="(?:https?:)?//', html), f"{url} loads from another host"
