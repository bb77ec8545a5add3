"""Conditional writes (contract section 9): LoopX-Fencing refuses a stale owner's batch and a batch that
names a claimed turn without its token; LoopX-Expect refuses a batch written against another high-water;
the gate's ?expect holds a turn whose stored prefix differs. A refused batch stores nothing. On PostgreSQL
the same tests go through the streamed path (canonical, all-new batches) and the general one (a redelivery
in the batch)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from journals.models import Branch, JournalRecord
from journals.services import IngestError, fencing_parse, high_water_parse
from recovery.models import TurnClaim
from tests.journal_builder import JournalBuilder

pytestmark = pytest.mark.django_db
URL = "/api/v1/runs/run-1/records"
T = "/api/v1/runs/run-1/turns/{}"


def post(client, lines: list[bytes], **headers: str):
    body = b"".join(line + b"\n" for line in lines)
    names = {"fencing": "LoopX-Fencing", "expect": "LoopX-Expect"}
    sent = {names[k]: v for k, v in headers.items()}
    return client.post(URL, body, content_type="application/x-ndjson", headers=sent)


def claim(client, turn: str, worker: str) -> int:
    answer = client.post(T.format(turn) + "/claim", {"worker_id": worker}, format="json")
    assert answer.status_code == 200, answer.content
    return int(answer.json()["fencing_token"])


def expire_leases() -> None:
    TurnClaim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))


def stored() -> list[bytes]:
    return [bytes(line) for line in JournalRecord.objects.order_by("seq").values_list("line", flat=True)]


@pytest.fixture
def journal(runtime) -> JournalBuilder:
    b = JournalBuilder()
    b.plan("t1")
    b.plan("t2")
    assert post(runtime.client, b.lines).status_code == 200
    return b


# --- LoopX-Fencing ---------------------------------------------------------------------------------------


def test_a_claimed_turn_takes_records_only_with_its_current_token(runtime, journal):
    token = claim(runtime.client, "t1", "w1")
    before = stored()
    journal.commit("t1", "plan")
    missing = post(runtime.client, journal.lines[-1:])
    assert missing.status_code == 409, missing.content
    assert missing.json()["error"] == "fencing_required" and missing.json()["turn"] == "t1"
    assert stored() == before
    assert post(runtime.client, journal.lines[-1:], fencing=f"t1={token}").status_code == 200
    assert stored() == before + journal.lines[-1:]


def test_a_stale_owner_is_fenced_naming_the_turn_and_both_tokens_and_nothing_is_stored(runtime, journal):
    old = claim(runtime.client, "t1", "w1")
    expire_leases()  # w1's lease ran out; w2 takes the turn
    new = claim(runtime.client, "t1", "w2")
    assert new > old
    before = stored()
    journal.commit("t2", "plan")  # an unclaimed turn in the same batch: the batch is refused whole
    journal.commit("t1", "plan")
    answer = post(runtime.client, journal.lines[-2:], fencing=f"t1={old}")
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert (body["error"], body["turn"], body["token"], body["current"]) == ("fenced", "t1", old, new)
    assert stored() == before
    assert not Branch.objects.filter(committed_lsn__gt=1).exists()
    # The redelivery of stored records with the stale token is fenced too (the general path on PostgreSQL).
    again = post(runtime.client, journal.lines[:1] + journal.lines[-2:], fencing=f"t1={old}")
    assert again.status_code == 409 and again.json()["error"] == "fenced"
    assert stored() == before
    assert post(runtime.client, journal.lines[-2:], fencing=f"t1={new}").status_code == 200


def test_a_redelivery_of_stored_records_needs_no_token(runtime, journal):
    claim(runtime.client, "t1", "w1")
    again = post(runtime.client, journal.lines)  # t1's planning, already stored: it changes nothing
    assert again.status_code == 200 and again.json()["duplicates"] == 2
    journal.commit("t1", "plan")
    mixed = post(runtime.client, journal.lines)  # with a new record for t1: the token is needed
    assert mixed.status_code == 409 and mixed.json()["error"] == "fencing_required"
    assert JournalRecord.objects.count() == 2


def test_a_token_never_handed_out_is_fenced(runtime, journal):
    token = claim(runtime.client, "t1", "w1")
    journal.commit("t1", "plan")
    forged = post(runtime.client, journal.lines[-1:], fencing=f"t1={token + 5}")
    assert forged.status_code == 409 and forged.json()["current"] == token
    never = post(runtime.client, journal.lines[-1:], fencing=f"t1={token}, t2=1")  # t2 was never claimed
    assert never.status_code == 409 and (never.json()["turn"], never.json()["current"]) == ("t2", 0)
    assert JournalRecord.objects.count() == 2


def test_a_released_claim_still_needs_the_token_and_an_unclaimed_turn_needs_none(runtime, journal):
    token = claim(runtime.client, "t1", "w1")
    assert runtime.client.post(T.format("t1") + "/release", {"fencing_token": token}, format="json").status_code == 200
    journal.commit("t1", "plan")
    assert post(runtime.client, journal.lines[-1:]).json()["error"] == "fencing_required"
    journal.commit("t2", "plan")
    assert post(runtime.client, journal.lines[-1:]).status_code == 200  # t2 was never claimed


def test_turn_ids_in_the_fencing_header_are_percent_encoded(runtime):
    b = JournalBuilder()
    b.plan("a,b=c d%")
    assert post(runtime.client, b.lines).status_code == 200
    token = claim(runtime.client, "a%2Cb%3Dc%20d%25", "w1")
    b.commit("a,b=c d%", "plan")
    assert post(runtime.client, b.lines[-1:], fencing=f"a%2Cb%3Dc%20d%25={token}").status_code == 200


@pytest.mark.parametrize(
    "header",
    ["t1", "t1=", "=3", "t1=x", "t1=0", "t1=-1", "t1=1, t1=2", "t1=99999999999999999999", "%ff=1", "t1=1;t2=2"],
)
def test_a_malformed_fencing_header_is_400_and_stores_nothing(runtime, journal, header):
    journal.commit("t1", "plan")
    answer = post(runtime.client, journal.lines[-1:], fencing=header)
    assert answer.status_code == 400 and answer.json()["error"] == "fencing_invalid", (header, answer.content)
    assert JournalRecord.objects.count() == 2


def test_the_header_parsers():
    assert fencing_parse(None) == {} and fencing_parse(" ") == {}
    assert fencing_parse("t1=3, t%2C2=4") == {"t1": 3, "t,2": 4}
    assert high_water_parse("0:-1, 2:17") == {0: -1, 2: 17}
    for bad in ("0", "0:", ":1", "-1:0", "0:-2", "0:1,0:2", "x:1", "0:1.5"):
        with pytest.raises(IngestError):
            high_water_parse(bad)


# --- LoopX-Expect ----------------------------------------------------------------------------------------


def test_a_batch_written_against_another_high_water_is_refused_naming_branch_expected_and_stored(runtime, journal):
    journal.commit("t1", "plan")
    before = stored()
    answer = post(runtime.client, journal.lines[-1:], expect="0:0")  # the store holds lsn 0 and 1
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert (body["error"], body["branch"], body["expected"], body["stored"]) == ("offset_mismatch", 0, 0, 1)
    assert stored() == before
    fresh = post(runtime.client, journal.lines[-1:], expect="0:1, 1:-1")  # branch 1 has nothing: -1 holds
    assert fresh.status_code == 200, fresh.content
    assert stored() == before + journal.lines[-1:]
    none = post(runtime.client, journal.lines[-1:], expect="3:4")
    assert none.status_code == 409 and (none.json()["branch"], none.json()["stored"]) == (3, -1)
    assert post(runtime.client, journal.lines[-1:], expect="0:x").json()["error"] == "expect_invalid"


def test_the_expectation_is_the_ack_cursor_not_the_highest_stored_lsn(runtime, journal):
    journal.commit("t1", "plan")
    journal.commit("t1", "envelope")
    assert post(runtime.client, journal.lines[-1:]).status_code == 200  # lsn 3 stored beyond a gap at 2
    assert post(runtime.client, journal.lines[-2:-1], expect="0:3").json()["error"] == "offset_mismatch"
    assert post(runtime.client, journal.lines[-2:-1], expect="0:1").status_code == 200


# --- the gate's ?expect ----------------------------------------------------------------------------------


def test_the_decision_with_a_differing_expected_high_water_holds_the_turn_with_offset_mismatch(runtime, journal):
    plain = runtime.client.get(T.format("t1") + "/decision").json()
    assert plain["state"] == "proceed" and plain["offset_mismatch"] is None
    same = runtime.client.get(T.format("t1") + "/decision", {"expect": "0:1"}).json()
    assert same["state"] == "proceed" and same["offset_mismatch"] is None
    other = runtime.client.get(T.format("t1") + "/decision", {"expect": "0:4"}).json()
    assert (other["state"], other["decision"], other["reason"]) == ("hold", "blocked", "offset_mismatch")
    assert other["planned"] == [] and other["engine"]["decision"] == "resume"  # the stored assessment's own
    mismatch = other["offset_mismatch"]
    assert (mismatch["branch"], mismatch["expected"], mismatch["stored"]) == (0, 4, 1)
    assert mismatch["detail"] == "expected high-water lsn 4 on branch 0, the journal holds 1"
    bad = runtime.client.get(T.format("t1") + "/decision", {"expect": "zero"})
    assert bad.status_code == 400 and bad.json()["error"] == "expect_invalid"


def test_the_gate_and_assess_journal_agree_on_the_mismatch(runtime, journal, tmp_path):
    """One comparison (the engine's offset_mismatches) behind both: the same words for the same facts."""
    from engine import assess

    result = assess(journal.lines, expect={0: 4})
    violation = next(v for v in result.violations if v.code == "offset_mismatch")
    gate = runtime.client.get(T.format("t2") + "/decision", {"expect": "0:4"}).json()
    assert gate["offset_mismatch"]["detail"] == violation.detail
