"""Projection (reads): runs, branches, turns with filters and a fixed query count per page, one turn's
timeline (planned phases with their committing record and time), intents, records, assessments."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from journals.models import Turn
from journals.renderers import FastJSONRenderer
from journals.selectors import turn_detail, turn_rows, turn_with_timeline
from journals.serializers import TurnDetailSerializer, TurnSerializer
from tests.journal_builder import JournalBuilder

pytestmark = pytest.mark.django_db


def ingest(client, b: JournalBuilder) -> None:
    answer = client.post(f"/api/v1/runs/{b.run}/records", b.body(), content_type="application/x-ndjson")
    assert answer.status_code == 200, answer.content


def assess(client, run: str) -> dict:
    answer = client.post(f"/api/v1/runs/{run}/assessments")
    assert answer.status_code == 200, answer.content
    return answer.json()


@pytest.fixture
def forked(runtime) -> JournalBuilder:
    b = JournalBuilder()
    b.full_turn("t1")
    b.plan("t2")
    b.commit("t2", "plan", "envelope")
    b.dispatch("t2", "lookup")
    b.plan("t3")  # planned only on the suffix the fork discards
    b.fork(from_lsn=len(b.lines) - 3, reason="operator rewind")  # keeps t2's envelope, drops lookup and t3
    b.commit("t2", "dispatch")
    ingest(runtime.client, b)
    assess(runtime.client, "run-1")
    return b


def test_run_and_branches(viewer_client, forked):
    run = viewer_client.get("/api/v1/runs/run-1").json()
    assert (run["record_count"], run["live_branch"], run["blocked_reason"]) == (len(forked.lines), 1, None)
    assert run["decisions"] == {"complete": 1, "resume": 1, "discarded": 1}
    branches = viewer_client.get("/api/v1/runs/run-1/branches").json()
    assert branches[0]["branch"] == 0 and not branches[0]["live"] and branches[0]["discarded_from"] is not None
    assert (branches[1]["parent"], branches[1]["live"], branches[1]["from_lsn"]) == (
        0,
        True,
        branches[0]["discarded_from"],
    )
    assert branches[1]["fork_lsn"] == branches[0]["last_lsn"]
    listed = viewer_client.get("/api/v1/runs").json()
    assert listed["count"] == 1 and listed["results"][0]["run_id"] == "run-1"
    assert viewer_client.get("/api/v1/runs/nope").status_code == 404


def test_turn_timeline_shows_planned_and_committed_phases(viewer_client, forked):
    turn = viewer_client.get("/api/v1/runs/run-1/turns/t2").json()
    assert (turn["decision"], turn["resume_from"], turn["status"]) == ("resume", "execute", "open")
    phases = {p["name"]: p for p in turn["phases"]}
    assert [p["name"] for p in turn["phases"]] == turn["plan"]
    assert phases["plan"]["committed"] and phases["plan"]["record"]["branch"] == 0
    # The live commit of `dispatch` is the one on branch 1, with the time the writer stated.
    assert phases["dispatch"]["record"]["branch"] == 1 and phases["dispatch"]["committed_at"].endswith("Z")
    assert not phases["execute"]["committed"] and phases["execute"]["record"] is None
    assert turn["intents"] == [
        {
            "intent": "lookup",
            "effect_class": "safe",
            "idempotency_key": None,
            "resolution": "replay",
            "branch": 0,
            "live": False,
            "dispatches": 1,
            "outcome": None,
        }
    ]
    assert viewer_client.get("/api/v1/runs/run-1/turns/t2/intents").json() == turn["intents"]
    records = viewer_client.get("/api/v1/runs/run-1/turns/t2/records").json()
    assert [r["kind"] for r in records["results"]] == [
        "turn_planned",
        "phase_committed",
        "phase_committed",
        "intent_dispatched",
        "phase_committed",
    ]
    done = viewer_client.get("/api/v1/runs/run-1/turns/t1").json()
    assert done["status"] == "completed" and all(p["committed"] for p in done["phases"])
    assert viewer_client.get("/api/v1/runs/run-1/turns/t3").json()["decision"] == "discarded"


def test_turn_filters(viewer_client, forked):
    def turns(query: str) -> list[str]:
        answer = viewer_client.get(f"/api/v1/turns?{query}")
        assert answer.status_code == 200, answer.content
        return sorted(t["turn"] for t in answer.json()["results"])

    assert turns("") == ["t1", "t2", "t3"]
    assert turns("decision=resume") == ["t2"]
    assert turns("status=completed") == ["t1"]
    assert turns("run=run-1&decision=discarded") == ["t3"]
    assert turns("run=other") == []
    assert turns("updated_after=2000-01-01T00:00:00Z") == ["t1", "t2", "t3"]
    assert turns("updated_before=2000-01-01T00:00:00Z") == []
    assert viewer_client.get("/api/v1/turns?decision=maybe").status_code == 400
    # One valid decision or status is matched without the filter set's form; the answers are the same as
    # through it (a second filter sends the page through the form), and so are the refusals.
    assert turns("decision=resume&status=open") == ["t2"] == turns("decision=resume&updated_after=2000-01-01T00:00Z")
    assert turns("status=open") == ["t2", "t3"] == turns("status=open&reason=")
    assert turns("decision=resume&decision=complete") == ["t1"]  # the last value, as the form reads it
    assert viewer_client.get("/api/v1/turns?status=").status_code == 200
    assert viewer_client.get("/api/v1/turns?status=maybe").status_code == 400
    assert sorted(t["turn"] for t in viewer_client.get("/api/v1/runs/run-1/turns").json()["results"]) == [
        "t1",
        "t2",
        "t3",
    ]


def test_reason_filter(runtime, viewer_client):
    b = JournalBuilder("run-r")
    b.plan("ok")
    b.plan("bad")
    b.commit("bad", "envelope")
    ingest(runtime.client, b)
    assess(runtime.client, "run-r")
    answer = viewer_client.get("/api/v1/turns?reason=phase_prefix_violation").json()
    assert [t["turn"] for t in answer["results"]] == ["bad"]


def _page_queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_turn_list_costs_a_fixed_number_of_queries(runtime, viewer_client, django_assert_num_queries):
    b = JournalBuilder("run-q")
    for i in range(3):
        b.plan(f"t{i}")
    ingest(runtime.client, b)
    few = _page_queries(viewer_client, "/api/v1/turns")
    for i in range(3, 40):
        b.plan(f"t{i}")
    ingest(runtime.client, b)
    assess(runtime.client, "run-q")
    assert Turn.objects.count() == 40
    # session + user + role, then the page (cursor pagination: no count): the same however many turns.
    with django_assert_num_queries(few):
        page = viewer_client.get("/api/v1/turns?decision=resume").json()
    assert len(page["results"]) == 40 and page["next"] is None
    assert _page_queries(viewer_client, "/api/v1/turns") == few
    assert few == 4


def test_turn_pages_follow_cursors(runtime, viewer_client):
    b = JournalBuilder("run-p")
    for i in range(120):
        b.plan(f"t{i:03d}")
    ingest(runtime.client, b)
    seen: list[str] = []
    url = "/api/v1/runs/run-p/turns"
    while url:
        page = viewer_client.get(url).json()
        assert len(page["results"]) <= 50
        seen += [t["turn"] for t in page["results"]]
        url = page["next"]
    assert sorted(seen) == [f"t{i:03d}" for i in range(120)] and len(set(seen)) == 120
    assert viewer_client.get("/api/v1/runs/no-such-run/turns").status_code == 404


def test_audit_list_costs_a_fixed_number_of_queries(runtime, viewer_client):
    b = JournalBuilder("run-a")
    for i in range(6):
        b.plan(f"t{i}")
    ingest(runtime.client, b)

    def recover(turn: str) -> None:
        base = f"/api/v1/runs/run-a/turns/{turn}"
        token = runtime.client.post(base + "/claim", {"worker_id": "w"}, format="json").json()["fencing_token"]
        audit = runtime.client.post(base + "/recovery", {"fencing_token": token}, format="json").json()["id"]
        runtime.client.post(
            base + f"/recovery/{audit}/actions",
            {"fencing_token": token, "kind": "phase", "target": "x"},
            format="json",
        )
        runtime.client.post(base + f"/recovery/{audit}/close", {"fencing_token": token}, format="json")

    recover("t0")
    one = _page_queries(viewer_client, "/api/v1/audits")
    for i in range(1, 6):
        recover(f"t{i}")
    assert _page_queries(viewer_client, "/api/v1/audits") == one
    assert viewer_client.get("/api/v1/audits").json()["count"] == 6


def test_assessments_are_listed_and_retrievable(viewer_client, forked):
    listed = viewer_client.get("/api/v1/runs/run-1/assessments").json()
    assert listed["count"] == 1
    summary = listed["results"][0]
    assert summary["prefix_records"] == len(forked.lines) and summary["engine_version"]
    full = viewer_client.get(f"/api/v1/runs/run-1/assessments/{summary['id']}").json()
    assert {t["turn"]: t["decision"] for t in full["output"]["turns"]} == {
        "t1": "complete",
        "t2": "resume",
        "t3": "discarded",
    }
    assert viewer_client.get("/api/v1/runs/run-1/assessments/999999").status_code == 404


def test_outsiders_read_nothing(outsider_client, client, forked):
    for url in ("/api/v1/runs", "/api/v1/turns", "/api/v1/runs/run-1/turns/t2", "/api/v1/audits"):
        assert outsider_client.get(url).status_code == 403
        assert client.get(url).status_code in (401, 403)


def test_fast_representations_match_drf(forked):
    """The list and detail serializers build their dicts by hand for speed; DRF's generic field-by-field
    rendering of the same declared fields must give the same JSON."""
    turn = turn_with_timeline(turn=Turn.objects.get(turn_id="t2"))
    for serializer_class in (TurnSerializer, TurnDetailSerializer):
        serializer = serializer_class(turn)
        generic = serializers.ModelSerializer.to_representation(serializer, turn)
        assert JSONRenderer().render(serializer.data) == JSONRenderer().render(generic)
    row = turn_rows(run_id="run-1").get(turn_id="t2")
    assert JSONRenderer().render(TurnSerializer.row(row)) == JSONRenderer().render(TurnSerializer(turn).data)
    # The detail answer: one aggregated query on PostgreSQL, the ORM elsewhere; both give the serializer's.
    for turn_id in ("t1", "t2", "t3"):
        turn = turn_with_timeline(turn=Turn.objects.get(turn_id=turn_id))
        detail = turn_detail(run_id="run-1", turn_id=turn_id)
        assert JSONRenderer().render(detail) == JSONRenderer().render(TurnDetailSerializer(turn).data)
    assert turn_detail(run_id="run-1", turn_id="nope") is None and turn_detail(run_id="nope", turn_id="t1") is None


def test_turn_detail_costs_two_queries_on_postgresql(viewer_client, forked, django_assert_num_queries):
    # session + user + role, then the turn with its phases and intents (the ORM path: three queries).
    few = 4 if connection.vendor == "postgresql" else 6
    with django_assert_num_queries(few):
        assert viewer_client.get("/api/v1/runs/run-1/turns/t2").status_code == 200


def test_fast_json_renderer_writes_drf_json():
    """The journal views render with orjson; the bytes are DRF's JSONRenderer's, fallbacks included."""
    moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    payloads = [
        {"results": [{"at": moment, "day": moment.date(), "text": 'naïve \u2028 \u2029 "q"', "n": None}]},
        {"nested": [[1, 2.5, True], {"k": "v"}], 3: "int key", "empty": []},
        {"big": 2**70, "at": moment},  # beyond 64 bits: orjson refuses, DRF's encoder writes it
        [],
        "text",
    ]
    for payload in payloads:
        assert FastJSONRenderer().render(payload) == JSONRenderer().render(payload)
    assert FastJSONRenderer().render(None) == b""
    indented = FastJSONRenderer().render({"a": [1]}, "application/json; indent=2")
    assert indented == JSONRenderer().render({"a": [1]}, "application/json; indent=2") and b"\n" in indented


def test_a_non_finite_number_in_a_stored_record_is_spelled_not_nulled(runtime, viewer_client):
    # A record that breaks the contract (a float, out of range) is still evidence: the API shows it as the
    # string "Infinity", neither a silent null (orjson) nor a 500 (DRF's encoder refuses it).
    b = JournalBuilder()
    b.plan("t1")
    b.lines[-1] = b.lines[-1][:-1] + b',"weight":1e999,"loss":-1e999}'
    ingest(runtime.client, b)
    answer = viewer_client.get("/api/v1/runs/run-1/records")
    assert answer.status_code == 200, answer.content
    record = answer.json()["results"][-1]["record"]
    assert record["weight"] == "Infinity" and record["loss"] == "-Infinity"


def _many_turns() -> None:
    """130 turns over three runs, times tied in groups of seven (cursors then need offsets), decisions and
    statuses spread."""
    from datetime import timedelta

    from journals.models import DECISIONS, TURN_STATUSES, Run

    runs = [Run.objects.create(run_id=name) for name in ("run-a1", "run-a2", "run-b1")]
    start = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    Turn.objects.bulk_create(
        Turn(
            run=runs[i % 3],
            turn_id=f"t{i:03d}",
            plan=["plan", "envelope"],
            completed_phases=["plan"][: i % 2],
            decision=None if i % 11 == 0 else DECISIONS[i % 5],
            status=TURN_STATUSES[i % 2],
            reason="phase_prefix_violation" if i % 5 == 3 else None,
            # Whole seconds for some (no fraction in the cursor's position), microseconds for others.
            updated_at=start + timedelta(seconds=i // 7, microseconds=(i // 7) % 3 * 250_001),
            created_at=start,
        )
        for i in range(130)
    )


def _crawl(client, url: str) -> list[bytes]:
    """Every answer from the first page forwards to the last, then back by the previous links."""
    answers: list[bytes] = []
    next_url: str | None = url
    while next_url:
        answer = client.get(next_url)
        assert answer.status_code == 200, answer.content
        answers.append(answer.content)
        last, next_url = answer.json(), answer.json()["next"]
    previous = last["previous"]
    while previous:
        answer = client.get(previous)
        answers.append(answer.content)
        previous = answer.json()["previous"]
    return answers


@pytest.mark.filterwarnings("ignore:DateTimeField Turn.updated_at received a naive datetime")
def test_turn_pages_of_the_written_statement_are_the_orms(monkeypatch, db):
    """On PostgreSQL the list's fast path (no filter, a valid decision or status) runs one written statement
    (journals.postgres.TurnPageStatement) under DRF's cursor pagination; every page, forwards and back, with tied times
    (offset cursors), a run prefix, a run's list and cursors not of our making, is the ORM's page byte for
    byte."""
    import base64

    from journals import views
    from journals.access import RunScope
    from journals.selectors import turn_rows
    from tests.personas import make_runtime

    _many_turns()
    everyone, prefixed = make_runtime("reader"), make_runtime("reader-a", run_prefix="run-a")

    def cursor(**fields: object) -> str:
        from urllib.parse import urlencode

        return base64.b64encode(urlencode(fields).encode()).decode()

    urls = [
        "/api/v1/turns",
        "/api/v1/turns?decision=resume",
        "/api/v1/turns?status=completed",
        "/api/v1/turns?decision=complete&status=open",
        "/api/v1/runs/run-a2/turns",
        "/api/v1/runs/run-a2/turns?decision=finalize",
        "/api/v1/turns?cursor=" + cursor(o=3, p="2026-03-04 05:06:10.500002+00:00"),
        "/api/v1/turns?cursor=" + cursor(o=2, r=1, p="2026-03-04 05:06:12+00:00"),
        "/api/v1/turns?cursor=" + cursor(o=60),
        "/api/v1/turns?cursor=" + cursor(o=0, p="2026-03-04 05:06:12"),  # naive: the ORM's zone applies
    ]

    def answers() -> list[list[bytes]]:
        out = [_crawl(runtime.client, url) for runtime in (everyone, prefixed) for url in urls]
        out.append([prefixed.client.get("/api/v1/runs/run-b1/turns").content])  # 403
        return out

    # Combinations the API never sends (a token's prefix is checked against the run's id first) still agree.
    # A person's scope may hold several prefixes (their teams'), or none (no team).
    if connection.vendor == "postgresql":
        from journals.postgres import TurnPageStatement

        for prefixes, run_id in (
            (["run-a"], "run-b1"), (["run-a"], "run-a1"), (["run-"], None), (["run-b"], None), ([""], "nope"),
            (["run-a1", "run-b"], None), (["run-a1", "run-b"], "run-a2"), ([], None), ([], "run-a1"), (["_%"], None),
        ):  # fmt: skip
            scope = RunScope.of(prefixes)
            ours = TurnPageStatement(scope=scope, run_id=run_id, exact={}).order_by("-updated_at", "-id")[0:200]
            assert ours == list(turn_rows(scope=scope, run_id=run_id).order_by("-updated_at", "-id")[0:200])

    written = answers()
    orm = lambda *, scope, run_id, exact: turn_rows(scope=scope, run_id=run_id).filter(**exact)  # noqa: E731
    monkeypatch.setattr(views, "turn_page_rows", orm)
    assert answers() == written
    assert sum(len(pages) for pages in written) > 40 and written[0][0].count(b'"turn"') == 50


def test_turn_pages_refuse_cursors_and_runs_that_name_nothing(runtime, viewer_client):
    """A cursor whose position is not a time, or a time at an offset PostgreSQL refuses, is an invalid cursor
    (404, as an undecodable one), and a run id no column can hold (a NUL) names no run: none is a 500."""
    import base64

    for position in ("garbage", "99999-01-01 00:00:00+00:00", "2026-01-01 00:00:00+16:00", "2026-01-01 00:00:00-20:00"):
        cursor = base64.b64encode(f"o=0&p={position}".encode()).decode()
        for client in (runtime.client, viewer_client):
            for url in (f"/api/v1/turns?cursor={cursor}", f"/api/v1/turns?decision=resume&reason=x&cursor={cursor}"):
                answer = client.get(url)
                invalid = {"error": "not_found", "detail": "Invalid cursor", "line": None}
                assert (answer.status_code, answer.json()) == (404, invalid)
    for url in ("/api/v1/runs/a%00b/turns", "/api/v1/runs/a%00b/turns?reason=x"):
        answer = runtime.client.get(url)
        missing = {"error": "not_found", "detail": "No such run.", "line": None}
        assert (answer.status_code, answer.json()) == (404, missing)


def test_a_token_read_costs_the_tokens_lookup_and_the_page(runtime, django_assert_num_queries):
    b = JournalBuilder("run-t")
    for i in range(3):
        b.plan(f"t{i}")
    ingest(runtime.client, b)  # the token's use is noted (at most once a minute): not on the reads below
    for url in ("/api/v1/turns?decision=resume", "/api/v1/turns", "/api/v1/runs/run-t/turns"):
        with django_assert_num_queries(2):
            assert runtime.client.get(url).status_code == 200
    with django_assert_num_queries(2 if connection.vendor == "postgresql" else 4):
        assert runtime.client.get("/api/v1/runs/run-t/turns/t1").status_code == 200


def test_a_rendered_page_leaves_its_rows_to_reference_counting(runtime):
    """DRF's rendering leaves a response in reference cycles (its own renderer context, the view); the
    journal views let go of them once rendered, so a page's rows are freed when the answer is sent, not left
    to the cyclic garbage collector (whose passes they would bring on more often)."""
    import gc

    from rest_framework.test import APIRequestFactory

    from journals.views import TurnListView

    b = JournalBuilder("run-gc")
    for i in range(5):
        b.plan(f"t{i}")
    ingest(runtime.client, b)
    request = APIRequestFactory().get("/api/v1/turns", HTTP_AUTHORIZATION=f"Bearer {runtime.raw}")
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        response = TurnListView.as_view()(request).render()
        assert response.status_code == 200 and response.content.count(b'"turn"') == 5
        del response
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, dict) and {"turn", "plan"} <= o.keys()]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
    assert left == []
