"""The time zone is typed (with a short list of common zones to pick from), not chosen among ~600 entries."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.middleware import SESSION_KEY

pytestmark = pytest.mark.django_db


def test_the_zone_field_offers_a_short_list_and_takes_any_iana_name(op_pages):
    html = op_pages.get(reverse("console:preferences")).content.decode()
    assert 'list="zone-list"' in html and "<select" not in html.split('id="zone-list"')[0].split("<form")[-1]
    assert 10 < html.count("<option") < 40
    response = op_pages.post(reverse("console:preferences"), {"zone": "America/Argentina/Salta"})
    assert response.status_code == 302 and op_pages.session[SESSION_KEY] == "America/Argentina/Salta"
    refused = op_pages.post(reverse("console:preferences"), {"zone": "Mars/Olympus"})
    assert refused.status_code == 200 and "Not a time zone name" in refused.content.decode()
    assert op_pages.session[SESSION_KEY] == "America/Argentina/Salta"
