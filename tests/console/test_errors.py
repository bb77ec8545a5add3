"""Pages off the main path: friendly 404/403 pages that never list URL patterns (also under DEBUG, as local
development runs), a favicon, and the API explorer served from this site's own files."""

from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

MISSING = ("/api/v1/", "/turns/9999/", "/runs/9999/", "/runs/9999/records/", "/no/such/page/")
PATTERN_LIST = ("URLconf", "urlpatterns", "[name=", "&lt;int:pk&gt;", "<int:pk>", "healthz")


@pytest.mark.parametrize("debug", [True, False])
def test_missing_pages_are_friendly_and_list_no_url_pattern(op_pages, settings, debug):
    settings.DEBUG = debug
    for url in MISSING:
        response = op_pages.get(url)
        assert response.status_code == 404, url
        body = response.content.decode()
        for leak in PATTERN_LIST:
            assert leak not in body, (url, leak)
        if url.startswith("/api/"):
            assert response.json()["error"] == "not_found"
        else:
            assert "Nothing here" in body and 'href="/runs/"' in body and "console.css" in body


def test_a_forbidden_page_says_why_and_what_to_do(outsider_pages, settings):
    settings.DEBUG = True
    response = outsider_pages.get("/runs/")
    assert response.status_code == 403
    body = response.content.decode()
    assert "You do not have access to this page" in body and "viewer role" in body
    assert re.search(r"<p>\s*</p>", body) is None  # no empty paragraph


def test_a_server_error_renders_without_the_database():
    from django.test import RequestFactory

    from console.errors import server_error

    response = server_error(RequestFactory().get("/runs/1/"))
    assert response.status_code == 500 and b"Something went wrong on our side" in response.content


def test_the_favicon_is_served():
    response = Client().get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/x-icon"
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO header


def test_the_api_explorer_loads_nothing_from_another_host(op_pages):
    response = op_pages.get("/api/schema/ui/")
    assert response.status_code == 200
    html = response.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any("swagger-ui" in s for s in sources), sources
    for source in sources:
        assert source.startswith("/"), source
    assert "cdn" not in html.lower()


def test_api_leads_to_the_explorer(op_pages):
    response = op_pages.get("/api/", follow=True)
    assert response.redirect_chain == [("/api/schema/ui/", 302)]
    assert response.status_code == 200 and b"swagger-ui" in response.content
