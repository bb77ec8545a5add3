"""Receipt (ingest): atomic batches, idempotent redelivery, typed refusals with line numbers, evidence
kept, authentication, run prefixes and throttling."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.test import override_settings

from journals.authentication import ApiTokenRateThrottle
from journals.models import Branch, JournalRecord, Run, Turn
from tests.journal_builder import JournalBuilder
from tests.personas import make_runtime
from trail.tokens import api_token_revoke

pytestmark = pytest.mark.django_db
URL = "/api/v1/runs/{}/records"


def post(client, body: bytes, run: str = "run-1", content_type: str = "application/x-ndjson"):
    return client.post(URL.format(run), body, content_type=content_type)


def two_turns() -> JournalBuilder:
    b = JournalBuilder()
    b.full_turn("t1")
    b.plan("t2")
    b.commit("t2", "plan")
    return b


def test_batch_is_stored_with_cursor_and_counts(runtime):
    b = two_turns()
    answer = post(runtime.client, b.body())
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert data == {
        "run": "run-1",
        "stored": len(b.lines),
        "duplicates": 0,
        "first_seq": 1,
        "last_seq": len(b.lines),
        "branches": [{"branch": 0, "committed_lsn": len(b.lines) - 1, "last_lsn": len(b.lines) - 1}],
        "violations": [],
    }
    assert [bytes(x) for x in JournalRecord.objects.order_by("seq").values_list("line", flat=True)] == b.lines
    assert set(Turn.objects.values_list("turn_id", flat=True)) == {"t1", "t2"}


def test_redelivery_is_idempotent_and_overlap_only_adds_new(runtime):
    b = two_turns()
    first = b.lines[:5]
    assert post(runtime.client, b.body(first)).json()["stored"] == 5
    again = post(runtime.client, b.body(first)).json()
    assert (again["stored"], again["duplicates"], again["last_seq"]) == (0, 5, 5)
    overlap = post(runtime.client, b.body()).json()
    assert (overlap["stored"], overlap["duplicates"]) == (len(b.lines) - 5, 5)
    assert overlap["branches"][0]["committed_lsn"] == len(b.lines) - 1
    assert JournalRecord.objects.count() == len(b.lines)


def test_same_place_other_bytes_is_a_conflict_and_nothing_of_the_batch_is_stored(runtime):
    b = two_turns()
    post(runtime.client, b.body(b.lines[:3]))
    other = JournalBuilder()
    other.full_turn("t1")
    changed = json.loads(other.lines[2])
    changed["note"] = "rewritten"
    changed_line = json.dumps(changed, sort_keys=True, separators=(",", ":")).encode()
    batch = [*b.lines[3:6], changed_line]
    answer = post(runtime.client, b.body(batch))
    assert answer.status_code == 409
    data = answer.json()
    assert data["error"] == "lsn_conflict" and (data["branch"], data["lsn"], data["line"]) == (0, 2, 4)
    assert data["stored_digest"] != data["received_digest"] and len(data["received_digest"]) == 64
    assert JournalRecord.objects.count() == 3  # the three new records of the refused batch are not stored
    assert Run.objects.get().last_seq == 3


def test_conflict_inside_one_batch(runtime):
    b = JournalBuilder()
    b.plan("t1")
    twin = dict(json.loads(b.lines[0]), lineage="other")
    answer = post(runtime.client, b.body([b.lines[0], json.dumps(twin).encode()]))
    assert answer.status_code == 409 and answer.json()["line"] == 2
    assert not JournalRecord.objects.exists()


@pytest.mark.parametrize(
    ("lines", "code", "line"),
    [
        ([b'{"v":2,"run":"run-1","branch":0,"lsn":0,"kind":"turn_planned"', b"x"], "not_json", 1),
        ([b'{"v":2,"run":"run-1","branch":0,"lsn":0,"kind":"k"}', b""], "not_json", 2),
        ([b'{"v":2,"run":"run-1","branch":0,"lsn":0,"kind":"k"}', b"[1,2]"], "not_json", 2),
        ([b'{"v":2,"run":"run-1","branch":0,"lsn":0,"x":NaN}'], "not_json", 1),
        (
            [b'{"v":2,"run":"run-1","branch":0,"lsn":0,"kind":"k"}', b'{"v":2,"run":"run-2","branch":0,"lsn":1}'],
            "run_mismatch",
            2,
        ),
        ([b'{"v":2,"branch":0,"lsn":0}'], "envelope_invalid", 1),
        ([b'{"v":2,"run":"run-1","lsn":0}'], "envelope_invalid", 1),
        ([b'{"v":2,"run":"run-1","branch":-1,"lsn":0}'], "envelope_invalid", 1),
        ([b'{"v":2,"run":"run-1","branch":true,"lsn":0}'], "envelope_invalid", 1),
        ([b'{"v":2,"run":"run-1","branch":0,"lsn":"3"}'], "envelope_invalid", 1),
        ([b'{"v":2,"run":"run-1","branch":0,"lsn":1.5}'], "envelope_invalid", 1),
        ([b'{"v":2,"run":"run-1","branch":0,"lsn":99999999999999999999}'], "envelope_invalid", 1),
        ([b'{"v":2,"run":"run-1","branch":0,"lsn":0,"turn":"' + b"t" * 201 + b'"}'], "identifier_too_long", 1),
        ([b'{"v":2,"run":"run-1","branch":0,"lsn":0,"turn":"a\\u0000b"}'], "identifier_invalid", 1),
    ],
)
def test_malformed_input_is_refused_with_a_typed_code_and_line(runtime, lines, code, line):
    answer = post(runtime.client, b"\n".join(lines) + b"\n")
    assert answer.status_code == 400, answer.content
    data = answer.json()
    assert (data["error"], data["line"]) == (code, line)
    assert not JournalRecord.objects.exists() and not Run.objects.filter(record_count__gt=0).exists()


def test_error_messages_never_quote_record_bytes(runtime):
    answer = post(runtime.client, b'{"run":"run-1","branch":0,"lsn":0,"password":"hunter2-SECRET"\n')
    assert answer.status_code == 400
    assert b"hunter2" not in answer.content


@override_settings(LOOPX_INGEST_MAX_LINE_BYTES=200, LOOPX_INGEST_MAX_BATCH_RECORDS=3, LOOPX_INGEST_MAX_BATCH_BYTES=2000)
def test_limits_are_413_with_codes(runtime):
    b = JournalBuilder()
    b.plan("t1", note="x" * 300)
    answer = post(runtime.client, b.body())
    assert (answer.status_code, answer.json()["error"], answer.json()["line"]) == (413, "line_too_large", 1)
    small = JournalBuilder()
    for i in range(4):
        small.plan(f"t{i}")
    answer = post(runtime.client, small.body())
    assert (answer.status_code, answer.json()["error"]) == (413, "too_many_records")
    answer = post(runtime.client, b"{}\n" * 700)
    assert (answer.status_code, answer.json()["error"]) == (413, "batch_too_large")
    assert not JournalRecord.objects.exists()


def test_contract_breaking_records_are_stored_as_evidence(runtime):
    b = JournalBuilder()
    b.plan("t1")
    b.record("no_such_kind", turn="t1")
    b.raw(b'{"branch":0,"kind":"phase_committed","lsn":2,"phase":"plan","run":"run-1","turn":"t1","v":2,"w":1.5}')
    b.raw(b'{"branch":0,"kind":"phase_committed","lsn":7,"run":"run-1","turn":"t1","v":2}')  # an lsn gap
    answer = post(runtime.client, b.body())
    assert answer.status_code == 200 and answer.json()["stored"] == 4
    # The ack cursor stops before the gap; lsn 7 is stored but not acknowledged as contiguous.
    assert answer.json()["branches"] == [{"branch": 0, "committed_lsn": 2, "last_lsn": 7}]
    decision = runtime.client.get("/api/v1/runs/run-1/turns/t1/decision").json()
    assert (decision["state"], decision["decision"]) == ("hold", "blocked")
    assert decision["reason"] in {"kind_unknown", "record_invalid", "lsn_gap"}


def test_filling_a_gap_moves_the_cursor_over_records_stored_beyond_it_and_counts_each_record_once(runtime):
    def line(lsn: int, branch: int = 0) -> bytes:
        return b'{"branch":%d,"kind":"note","lsn":%d,"run":"run-1","v":2}\n' % (branch, lsn)

    assert post(runtime.client, line(0) + line(2) + line(3) + line(6)).json()["branches"] == [
        {"branch": 0, "committed_lsn": 0, "last_lsn": 6}
    ]
    # lsn 1 fills the first gap (the cursor runs over 2 and 3, stored before); lsn 5 leaves the second.
    answer = post(runtime.client, line(1) + line(5) + line(0, branch=1)).json()
    assert answer["branches"] == [
        {"branch": 0, "committed_lsn": 3, "last_lsn": 6},
        {"branch": 1, "committed_lsn": 0, "last_lsn": 0},
    ]
    assert post(runtime.client, line(4)).json()["branches"][0] == {"branch": 0, "committed_lsn": 6, "last_lsn": 6}
    counts = dict(Branch.objects.filter(run__run_id="run-1").values_list("number", "record_count"))
    assert counts == {0: 7, 1: 1} == {
        n: JournalRecord.objects.filter(run__run_id="run-1", branch=n).count() for n in (0, 1)
    }


def test_json_array_body_is_accepted(runtime):
    b = two_turns()
    items = [json.loads(line) for line in b.lines]
    answer = runtime.client.post(URL.format("run-1"), items, format="json")
    assert answer.status_code == 200 and answer.json()["stored"] == len(items)
    assert [bytes(x) for x in JournalRecord.objects.order_by("seq").values_list("line", flat=True)] == b.lines
    bad = runtime.client.post(URL.format("run-1"), [items[0], 3], format="json")
    assert (bad.status_code, bad.json()["error"], bad.json()["line"]) == (400, "not_json", 2)


def test_plain_text_and_unknown_media_types(runtime):
    b = two_turns()
    assert post(runtime.client, b.body(), content_type="text/plain").status_code == 200
    assert post(runtime.client, b.body(), content_type="application/xml").status_code == 415


def test_forks_create_branches_with_cursors(runtime):
    b = JournalBuilder()
    b.plan("t1")
    b.commit("t1", "plan", "envelope")
    b.fork(from_lsn=1)
    b.commit("t1", "envelope")
    data = post(runtime.client, b.body()).json()
    assert data["branches"] == [
        {"branch": 0, "committed_lsn": 3, "last_lsn": 3},
        {"branch": 1, "committed_lsn": 0, "last_lsn": 0},
    ]
    assert Branch.objects.count() == 2


def test_authentication_and_roles(runtime, viewer_client, outsider_client, operator_client, client):
    b = two_turns()
    assert post(client, b.body()).status_code in (401, 403)
    assert post(outsider_client, b.body()).status_code == 403
    assert post(viewer_client, b.body()).status_code == 403
    assert post(operator_client, b.body()).status_code == 200
    bogus = make_runtime("other")
    bogus.client.credentials(HTTP_AUTHORIZATION="Bearer lxr_not-a-real-token")
    assert post(bogus.client, b.body()).status_code == 401


def test_revoked_token_is_refused(runtime):
    api_token_revoke(token=runtime.token)
    assert post(runtime.client, two_turns().body()).status_code == 401


def test_run_prefix_limits_a_token(db):
    limited = make_runtime("prod-runtime", run_prefix="prod-")
    b = JournalBuilder("prod-1")
    b.plan("t1")
    assert post(limited.client, b.body(), run="prod-1").status_code == 200
    other = JournalBuilder("dev-1")
    other.plan("t1")
    assert post(limited.client, other.body(), run="dev-1").status_code == 403
    assert limited.client.get("/api/v1/runs/dev-1").status_code == 403
    assert [r["run_id"] for r in limited.client.get("/api/v1/runs").json()["results"]] == ["prod-1"]
    assert not Run.objects.filter(run_id="dev-1").exists()


def test_token_is_throttled_per_token(runtime, monkeypatch):
    monkeypatch.setattr(ApiTokenRateThrottle, "THROTTLE_RATES", {"api_token": "3/min"})
    from django.core.cache import cache

    cache.clear()
    codes = [runtime.client.get("/api/v1/runs").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    other = make_runtime("runtime-b")
    assert other.client.get("/api/v1/runs").status_code == 200
    cache.clear()


def test_digest_is_of_the_canonical_bytes_whatever_the_formatting(runtime):
    b = JournalBuilder()
    b.plan("t1")
    assert post(runtime.client, b.body()).json()["stored"] == 1
    spaced = json.dumps(json.loads(b.lines[0]), indent=None, separators=(", ", ": ")).encode()
    assert spaced != b.lines[0]
    again = post(runtime.client, spaced + b"\n").json()
    assert (again["stored"], again["duplicates"]) == (0, 1)
    stored = JournalRecord.objects.get()
    assert stored.digest == hashlib.sha256(b.lines[0]).hexdigest() and bytes(stored.line) == b.lines[0]
