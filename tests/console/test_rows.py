"""The rows composed in Python (console/rows.py) escape every value, and their links are what reverse() answers
(console/links.py), for every pk, without a database."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

import pytest
from django.urls import reverse, set_script_prefix
from django.utils.html import escape as django_escape

from console.links import html_url_former, url_former
from console.rows import grid_rows, record_items
from console.runs import GridCell, GridRow, RecordRow
from journals.models import Turn
from tests.console.test_hostile_values import HOSTILE, parse

NAME = "<script>x()</script>\"'&é"


@pytest.mark.parametrize("pk", [1, 7, 10, 987654321])
def test_a_formed_url_is_what_reverse_answers(pk):
    for name in ("console:turn", "console:run", "console:approve", "console:block", "console:records"):
        assert url_former(name)(pk=pk) == reverse(name, args=[pk])
    assert url_former("console:record")(pk=pk, branch=pk + 1, lsn=0) == reverse("console:record", args=[pk, pk + 1, 0])


def test_a_formed_url_keeps_the_script_prefix():
    set_script_prefix("/loopx/")
    try:
        assert url_former("console:turn")(pk=12) == "/loopx/turns/12/" == reverse("console:turn", args=[12])
    finally:
        set_script_prefix("/")


def test_a_formed_url_for_an_attribute_is_the_url_escaped():
    # A script prefix with characters reverse() leaves unquoted and an attribute must escape.
    set_script_prefix("/a&b'c/")
    try:
        for pk in (3, 40):
            url = reverse("console:block", args=[pk])
            assert "&" in url and "'" in url
            assert html_url_former("console:block")(pk=pk) == django_escape(url)
        assert html_url_former("console:turns")() == django_escape(reverse("console:turns"))
    finally:
        set_script_prefix("/")


def test_a_route_with_a_part_other_than_a_number_is_reversed():
    # The turns list takes no number: the former falls back to reverse() and answers the same.
    assert url_former("console:turns")() == reverse("console:turns")


def test_the_grid_escapes_every_value():
    turn = Turn(pk=41, turn_id=NAME)
    cells = [
        GridCell(phase=NAME, state="committed", branch=0, lsn=3, url="/runs/1/records/0/3/?a=1&b=2"),
        GridCell(phase=NAME, state="missing"),
        GridCell(phase=NAME, state="unplanned"),
    ]
    html = str(grid_rows([GridRow(turn=turn, state="resume", shown=None, cells=cells)]))
    assert NAME not in html and escape(NAME, quote=True) in html
    assert 'href="/runs/1/records/0/3/?a=1&amp;b=2"' in html
    (row,) = parse(f"<table><tbody>{html}</tbody></table>").rows
    assert row["hrefs"][0] == reverse("console:turn", args=[41])
    assert row["cells"][1:] == ["✓", "·", ""]
    assert "script" not in parse(html).tags


def test_the_event_history_escapes_every_value():
    at = datetime(2026, 12, 6, tzinfo=UTC)
    fields = {"phase": NAME, "at": NAME}
    rows = [
        RecordRow(1, 0, 0, "phase_committed", NAME, at, fields, discarded=False, url="/r/?x=1&y=2"),
        RecordRow(2, 0, 1, NAME, None, at, None, discarded=True, url="/r/2/"),
    ]
    html = str(record_items(rows, {NAME: 5}))
    for value in HOSTILE + (NAME,):
        assert value not in html
    assert escape(NAME, quote=True) in html
    assert f'href="{reverse("console:turn", args=[5])}"' in html and 'href="/r/?x=1&amp;y=2"' in html
    assert "script" not in parse(html).tags and 'class="record discarded-row"' in html
