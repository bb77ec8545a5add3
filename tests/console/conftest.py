"""Fixtures of the console's page tests: the personas (tests/personas.py) with a browser-like client."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.console.scenarios import Scenario, payments_run, torn_run


def page_client(user, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


@pytest.fixture
def op_pages(operator) -> Client:
    return page_client(operator)


@pytest.fixture
def viewer_pages(viewer) -> Client:
    return page_client(viewer)


@pytest.fixture
def outsider_pages(outsider) -> Client:
    return page_client(outsider)


@pytest.fixture
def admin_pages(admin_user) -> Client:
    return page_client(admin_user)


@pytest.fixture
def pay(db) -> Scenario:
    return payments_run()


@pytest.fixture
def torn(db) -> Scenario:
    return torn_run()
