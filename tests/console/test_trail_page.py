"""The trail page and its streamed export (docs/trail.md)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from trail.chain import row_digest
from trail.models import OperatorAction
from trail.services import operator_action_record

pytestmark = pytest.mark.django_db


def _rows(n: int) -> None:
    for i in range(n):
        operator_action_record(actor=None, actor_name=f"someone-{i % 3}", kind="turn_edit", reason=f"r{i}",
                               after={"password": "hunter2", "i": i})


@pytest.mark.parametrize("n", [5, 40])
def test_the_page_costs_the_same_queries_whatever_the_rows(n, viewer_pages):
    _rows(n)
    with CaptureQueriesContext(connection) as captured:
        answer = viewer_pages.get("/trail/")
    assert answer.status_code == 200
    # Session, user, role; then the capped count and the page's rows (run and turn joined).
    assert len(captured) == 5, [q["sql"][:80] for q in captured]
    assert f"r{n - 1}" in answer.content.decode()


def test_filters_narrow_and_a_bad_one_is_a_typed_400(viewer_pages):
    _rows(6)
    body = viewer_pages.get("/trail/?actor=someone-1").content.decode()
    assert "r1<" in body.replace("</td>", "<") and "r2<" not in body.replace("</td>", "<")
    assert viewer_pages.get("/trail/?since=yesterday").status_code == 400
    assert viewer_pages.get("/trail/?kind=nonsense").status_code == 400


def test_viewers_read_but_only_operators_export(viewer_pages, op_pages):
    assert viewer_pages.get("/trail/export/?format=jsonl").status_code == 403
    assert op_pages.get("/trail/export/?format=xml").status_code == 400
    assert not OperatorAction.objects.filter(kind="trail_export").exists()  # a refused export records nothing


def test_the_jsonl_export_streams_every_row_with_its_chain_and_records_itself(op_pages):
    _rows(3)
    answer = op_pages.get("/trail/export/?format=jsonl")
    assert answer.status_code == 200 and answer.streaming
    lines = [json.loads(x) for x in b"".join(answer.streaming_content).splitlines()]
    assert [x["kind"] for x in lines] == ["turn_edit"] * 3 + ["trail_export"]
    assert all(x["after"].get("password") in (None, "[redacted]") for x in lines)  # secrets never travel
    # A SIEM can re-check the chain from the export alone.
    for before, row in zip(lines, lines[1:], strict=False):
        assert row["prev_digest"] == before["digest"]
    stored = OperatorAction.objects.get(seq=lines[0]["seq"])
    assert row_digest(seq=stored.seq, prev_digest=stored.prev_digest, actor_id=None, actor_name=lines[0]["actor_name"],
                      kind="turn_edit", run_id=None, turn_id=None, reason="r0", before={}, after=stored.after,
                      created_at=stored.created_at, via=stored.via) == lines[0]["digest"]


def test_the_csv_export_has_a_header_and_one_line_a_row(op_pages):
    _rows(2)
    answer = op_pages.get("/trail/export/?format=csv&actor=someone-0")
    table = list(csv.reader(io.StringIO(b"".join(answer.streaming_content).decode())))
    assert table[0][:5] == ["seq", "created_at", "actor_name", "via", "kind"]
    assert [r[4] for r in table[1:]] == ["turn_edit"]


def test_the_old_audit_log_address_leads_to_the_trail_with_its_filters(viewer_pages):
    response = viewer_pages.get("/audit/?kind=turn_block")
    assert response.status_code == 301
    assert response["Location"] == "/trail/?kind=turn_block"
