"""The receipt layer's door: what a batch would break is refused before it is stored, when the writer says
where it stands (LoopX-Expect), and named in the answer when it does not. A stale owner is fenced before
anything else about its batch is looked at. On PostgreSQL the same tests go through the streamed path
(canonical, all-new batches) and the general one."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from django.utils import timezone

from engine.canonical import canonical_bytes, digest
from journals.models import JournalRecord, Run
from recovery.models import TurnClaim
from recovery.services import assessment_refresh
from tests.journal_builder import JournalBuilder

pytestmark = pytest.mark.django_db
URL = "/api/v1/runs/run-1/records"


def post(client, lines: list[bytes], **headers: str):
    body = b"".join(line + b"\n" for line in lines)
    names = {"fencing": "LoopX-Fencing", "expect": "LoopX-Expect"}
    return client.post(
        URL, body, content_type="application/x-ndjson", headers={names[k]: v for k, v in headers.items()}
    )


def stored() -> list[bytes]:
    return [bytes(line) for line in JournalRecord.objects.order_by("seq").values_list("line", flat=True)]


@pytest.fixture
def journal(runtime) -> JournalBuilder:
    b = JournalBuilder()
    b.plan("t1")
    b.commit("t1", "plan")
    assert post(runtime.client, b.lines, expect="0:-1").status_code == 200
    return b


def rewrite(line: bytes, **fields) -> bytes:
    return canonical_bytes({**orjson.loads(line), **fields})


# --- Fencing first ----------------------------------------------------------------------------------------


def test_a_stale_owner_is_fenced_whatever_else_is_wrong_with_its_batch(runtime, journal):
    claims = "/api/v1/runs/run-1/turns/t1/claim"
    old = runtime.client.post(claims, {"worker_id": "w1"}, format="json").json()["fencing_token"]
    TurnClaim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    new = runtime.client.post(claims, {"worker_id": "w2"}, format="json").json()["fencing_token"]
    before = stored()
    journal.commit("t1", "envelope")
    # A stale Expect, a broken prev and a torn line: the stale token is what the writer must hear.
    broken = [rewrite(journal.lines[-1], prev="0" * 64), b'{"v":2,"run":"run-1"']
    for lines in (broken, journal.lines[-1:]):
        answer = post(runtime.client, lines, fencing=f"t1={old}", expect="0:0")
        assert answer.status_code == 409, answer.content
        body = answer.json()
        assert (body["error"], body["turn"], body["token"], body["current"]) == ("fenced", "t1", old, new)
    assert stored() == before


# --- Under LoopX-Expect: refused at the door ----------------------------------------------------------------


def test_a_wrong_prev_under_expect_is_chain_mismatch_naming_the_prev_it_needs_and_stores_nothing(runtime, journal):
    before = stored()
    journal.commit("t1", "envelope")
    wrong = rewrite(journal.lines[-1], prev="0" * 64)
    answer = post(runtime.client, [wrong], expect="0:1")
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert body["error"] == "chain_mismatch" and body["violation"] == "chain_broken"
    assert (body["line"], body["branch"], body["lsn"], body["expected_lsn"]) == (1, 0, 2, 2)
    assert body["expected_prev"] == digest(orjson.loads(before[-1]))
    assert stored() == before
    # The corrected record goes in.
    assert post(runtime.client, journal.lines[-1:], expect="0:1").status_code == 200
    assert stored() == before + journal.lines[-1:]


def test_a_skipped_lsn_under_expect_is_chain_mismatch_and_stores_nothing(runtime, journal):
    before = stored()
    journal.commit("t1", "envelope", "dispatch")
    answer = post(runtime.client, journal.lines[-1:], expect="0:1")  # lsn 3: lsn 2 skipped
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert (body["error"], body["violation"], body["lsn"], body["expected_lsn"]) == ("chain_mismatch", "lsn_gap", 3, 2)
    assert stored() == before
    # A good record before the skip in the same batch is not stored either: a refused batch stores nothing.
    whole = post(runtime.client, [journal.lines[-2], rewrite(journal.lines[-1], lsn=9)], expect="0:1")
    assert whole.status_code == 409 and whole.json()["line"] == 2
    assert stored() == before


def test_a_record_broken_by_itself_under_expect_is_422_and_stores_nothing(runtime, journal):
    before = stored()
    for fields, violation in [
        ({"note": 1.5}, "record_invalid"),
        ({"kind": "turn_plan"}, "kind_unknown"),
        ({"v": 7}, "schema_unsupported"),
        ({"at": "yesterday"}, "record_invalid"),
    ]:
        good = orjson.loads(journal.lines[-1])
        line = canonical_bytes({**good, "lsn": 2, "prev": digest(good), "phase": "envelope", **fields})
        answer = post(runtime.client, [line], expect="0:1")
        assert answer.status_code == 422, (fields, answer.content)
        assert (answer.json()["error"], answer.json()["violation"]) == ("record_invalid", violation)
    assert stored() == before


def test_a_redelivery_and_a_fork_under_expect_go_in(runtime, journal):
    journal.commit("t1", "envelope")
    new_branch = journal.fork(from_lsn=0)
    journal.commit("t1", "plan")  # lsn 0 of the new branch, chained to the fork record
    # The record at the cursor again (its bytes compared), then the new ones.
    answer = post(runtime.client, journal.lines[1:], expect="0:1")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["stored"], body["duplicates"], body["violations"]) == (3, 1, [])
    # The new branch's next record, with the branch named in Expect.
    journal.commit("t1", "envelope")
    assert post(runtime.client, journal.lines[-1:], expect=f"{new_branch}:0").status_code == 200


def test_the_first_record_of_a_forked_branch_chains_to_its_stored_fork(runtime, journal):
    new_branch = journal.fork(from_lsn=0)
    assert post(runtime.client, journal.lines[-1:], expect="0:1").status_code == 200
    journal.commit("t1", "plan")
    wrong = rewrite(journal.lines[-1], prev=digest(orjson.loads(journal.lines[0])))
    answer = post(runtime.client, [wrong], expect=f"{new_branch}:-1")
    assert answer.status_code == 409 and answer.json()["expected_prev"] == digest(orjson.loads(journal.lines[-2]))
    assert post(runtime.client, journal.lines[-1:], expect=f"{new_branch}:-1").status_code == 200
    # A branch no fork created.
    orphan = rewrite(journal.lines[-1], branch=new_branch + 1, lsn=0)
    answer = post(runtime.client, [orphan], expect=f"{new_branch + 1}:-1")
    assert answer.status_code == 409 and answer.json()["violation"] == "fork_invalid"


# --- Without LoopX-Expect: stored as evidence, the faults named ------------------------------------------------


def test_without_expect_a_broken_batch_is_stored_and_its_faults_are_listed(runtime, journal):
    journal.commit("t1", "envelope", "dispatch")
    lines = [rewrite(journal.lines[-2], prev="0" * 64), rewrite(journal.lines[-1], lsn=7)]
    answer = post(runtime.client, lines)
    assert answer.status_code == 200, answer.content
    faults = [(v["code"], v["line"], v["branch"], v["lsn"]) for v in answer.json()["violations"]]
    assert faults == [("chain_broken", 1, 0, 2), ("lsn_gap", 2, 0, 7)]
    assert stored()[-2:] == lines
    # The assessment agrees: the run is blocked on the first of them.
    assert assessment_refresh(run=Run.objects.get(run_id="run-1")).blocked_reason == "chain_broken"


def test_without_expect_a_clean_batch_lists_no_fault(runtime, journal):
    journal.commit("t1", "envelope")
    assert post(runtime.client, journal.lines[-1:]).json()["violations"] == []


def test_a_deeply_nested_record_is_read_not_a_crash(runtime):
    # orjson reads 1,024 levels of nesting but writes only 254: the strict reader decides past that.
    def nested(depth: int) -> bytes:
        line = canonical_bytes(JournalBuilder().plan("t1"))
        return line[:-1] + b',"x":' + b"[" * depth + b"]" * depth + b"}"

    answer = post(runtime.client, [nested(300)])
    assert answer.status_code == 200, answer.content
    assert answer.json()["violations"] == []
    assert assessment_refresh(run=Run.objects.get(run_id="run-1")).blocked_reason is None
    # Deeper than any reader here goes: not one JSON object it can read, refused whole.
    deeper = post(runtime.client, [nested(1100)])
    assert (deeper.status_code, deeper.json()["error"]) == (400, "not_json")
