"""Browser tests: Playwright (sync API) drives Debian's Chromium against pytest-django's live_server.

Chromium comes from Debian's package, never from `playwright install`. When it is missing, the session
installs it with apt-get, and fails (never skips) when that is impossible: a browser test that does not
run must not look like one that passed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
PASSWORD = "correct-horse-battery"


def _install_chromium() -> None:
    if os.path.exists(CHROMIUM):
        return
    if shutil.which("apt-get") is None:
        pytest.fail(f"{CHROMIUM} is missing and apt-get is not available to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env, timeout=900)
    except (subprocess.SubprocessError, OSError) as err:
        pytest.fail(f"{CHROMIUM} is missing and could not be installed: {err}")
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"apt-get installed chromium but {CHROMIUM} is still missing")


@pytest.fixture(scope="session")
def chromium() -> Iterator[object]:
    _install_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium) -> Iterator[object]:
    context = chromium.new_context(viewport={"width": 1400, "height": 900}, timezone_id="Europe/Berlin")
    context.set_default_timeout(15_000)
    page = context.new_page()
    # The pages load nothing the Content-Security-Policy refuses (docs/deployment.md): the browser reports
    # each refusal on its console, and any one fails the test.
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    yield page
    context.close()
    assert not refused, f"the browser refused what a page loads: {refused[:3]}"


@pytest.fixture
def shot():
    SHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> Path:
        path = SHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 0
        return path

    return take


def make_user(username: str, role: str | None):
    """A person with a role. Transactional tests flush the groups the migration created: make them again."""
    from django.contrib.auth.models import Group, User

    from teams.services import team_ensure, team_members_add

    user = User.objects.create_user(username=username, password=PASSWORD)
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    team_members_add(team=team_ensure(name="all-runs", prefixes=[""]), users=[user])  # sees every run
    return user


def login(page, base: str, username: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/")


@contextmanager
def sized_page(chromium, width: int, height: int = 900) -> Iterator[object]:
    """A page of its own browser context at one screen size (a phone's 375 px, a laptop's 1440 px), closed
    after the test's block whatever it asserted."""
    context = chromium.new_context(viewport={"width": width, "height": height}, timezone_id="Europe/Berlin")
    context.set_default_timeout(15_000)
    try:
        yield context.new_page()
    finally:
        context.close()
