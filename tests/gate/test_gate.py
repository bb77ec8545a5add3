"""Status recovery (the gate): decisions from the committed prefix, claims and fencing, recovery audits
with planned vs actual, crash-loop parking, and the operator's approvals and blocks."""

from __future__ import annotations

import pytest
from django.test import override_settings

from journals.models import Run
from recovery.models import Assessment, OperatorEvidence, TurnClaim
from recovery.services import assessment_refresh
from tests.journal_builder import JournalBuilder
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db
T = "/api/v1/runs/run-1/turns/{}"


def ingest(client, b: JournalBuilder, lines: list[bytes] | None = None, fencing: str | None = None) -> None:
    headers = {"LoopX-Fencing": fencing} if fencing else {}
    answer = client.post(
        f"/api/v1/runs/{b.run}/records", b.body(lines), content_type="application/x-ndjson", headers=headers
    )
    assert answer.status_code == 200, answer.content


def gate(client, turn: str) -> dict:
    answer = client.get(T.format(turn) + "/decision")
    assert answer.status_code == 200, answer.content
    return answer.json()


def claim(client, turn: str, worker: str = "w1"):
    return client.post(T.format(turn) + "/claim", {"worker_id": worker}, format="json")


def open_recovery(client, turn: str, token: int):
    return client.post(T.format(turn) + "/recovery", {"fencing_token": token}, format="json")


def report(client, turn: str, audit: int, token: int, kind: str, target: str, **detail):
    return client.post(
        T.format(turn) + f"/recovery/{audit}/actions",
        {"fencing_token": token, "kind": kind, "target": target, "detail": detail},
        format="json",
    )


def close(client, turn: str, audit: int, token: int):
    return client.post(T.format(turn) + f"/recovery/{audit}/close", {"fencing_token": token}, format="json")


@pytest.fixture
def journal(runtime) -> JournalBuilder:
    b = JournalBuilder()
    b.full_turn("done")
    b.plan("mid")
    b.commit("mid", "plan", "envelope")
    b.dispatch("mid", "fetch", effect_class="safe")
    b.dispatch("mid", "mail", effect_class="idempotent", idempotency_key="k-1")
    b.plan("unsafe")
    b.commit("unsafe", "plan", "envelope")
    b.dispatch("unsafe", "charge", effect_class="unsafe")
    ingest(runtime.client, b)
    return b


def test_decisions_follow_the_committed_prefix(runtime, journal):
    done = gate(runtime.client, "done")
    assert (done["state"], done["decision"]) == ("done", "complete")
    mid = gate(runtime.client, "mid")
    assert (mid["state"], mid["decision"], mid["resume_from"]) == ("proceed", "resume", "dispatch")
    assert [(p["kind"], p["target"]) for p in mid["planned"]] == [
        ("phase", "dispatch"),
        ("phase", "execute"),
        ("phase", "readback"),
        ("phase", "writeback"),
        ("phase", "spend"),
        ("intent", "fetch"),
        ("intent", "mail"),
        ("terminal", "turn_terminal"),
    ]
    assert {p["target"]: p.get("resolution") for p in mid["planned"] if p["kind"] == "intent"} == {
        "fetch": "replay",
        "mail": "reissue",
    }
    unsafe = gate(runtime.client, "unsafe")
    assert (unsafe["state"], unsafe["reason"], unsafe["planned"]) == ("hold", "effect_indeterminate", [])
    # The gate's GET is a read: it folded the prefix for its answer; the worker's task stores it, once.
    assert Assessment.objects.count() == 0 and mid["pending"]
    assessment_refresh(run=Run.objects.get(run_id="run-1"))
    assert gate(runtime.client, "mid")["pending"] is False
    journal.commit("mid", "dispatch")
    ingest(runtime.client, journal, journal.lines[-1:])
    assert gate(runtime.client, "mid")["resume_from"] == "execute"
    assert Assessment.objects.count() == 1


def test_claim_is_exclusive_and_tokens_only_grow(runtime, journal, settings):
    first = claim(runtime.client, "mid", "w1")
    assert first.status_code == 200
    token = first.json()["fencing_token"]
    taken = claim(runtime.client, "mid", "w2")
    assert taken.status_code == 409 and taken.json()["error"] == "claim_held" and taken.json()["holder"] == "w1"
    assert claim(runtime.client, "mid", "w1").json()["fencing_token"] == token  # the holder renews
    assert gate(runtime.client, "mid")["claim"]["worker_id"] == "w1"
    assert "fencing_token" not in str(gate(runtime.client, "mid")["claim"])
    released = runtime.client.post(T.format("mid") + "/release", {"fencing_token": token}, format="json")
    assert released.status_code == 200
    second = claim(runtime.client, "mid", "w2").json()["fencing_token"]
    assert second > token
    # An expired lease is free again, with a larger token.
    TurnClaim.objects.filter(fencing_token=second).update(expires_at="2000-01-01T00:00:00Z")
    third = claim(runtime.client, "mid", "w3").json()["fencing_token"]
    assert third > second
    stale = open_recovery(runtime.client, "mid", second)
    assert stale.status_code == 409 and stale.json()["error"] == "stale_token"


def test_recovery_audit_planned_versus_actual(runtime, journal, viewer_client):
    token = claim(runtime.client, "mid").json()["fencing_token"]
    opened = open_recovery(runtime.client, "mid", token)
    assert opened.status_code == 201, opened.content
    audit = opened.json()
    assert audit["attempt"] == 1 and audit["decision"] == "resume" and not audit["closed"]
    aid = audit["id"]
    for kind, target in [("phase", "dispatch"), ("intent", "mail"), ("intent", "mail"), ("intent", "surprise")]:
        assert report(runtime.client, "mid", aid, token, kind, target).status_code == 201
    assert report(runtime.client, "mid", aid, token + 1, "phase", "execute").status_code == 409
    assert close(runtime.client, "mid", aid, token).status_code == 200
    assert close(runtime.client, "mid", aid, token).json()["error"] == "audit_closed"
    assert report(runtime.client, "mid", aid, token, "phase", "execute").json()["error"] == "audit_closed"
    shown = viewer_client.get(T.format("mid") + f"/recovery/{aid}").json()
    assert shown["closed"] and [a["target"] for a in shown["actual"]] == ["dispatch", "mail", "mail", "surprise"]
    assert {p["target"]: p["reported"] for p in shown["planned"]}["dispatch"] is True
    codes = sorted((d["code"], d["target"]) for d in shown["divergences"])
    assert ("unplanned_action", "surprise") in codes and ("repeated_action", "mail") in codes
    missing = {t for c, t in codes if c == "planned_action_missing"}
    assert missing == {"execute", "readback", "writeback", "spend", "fetch", "turn_terminal"}
    listed = viewer_client.get("/api/v1/audits?run=run-1&turn=mid").json()
    assert listed["count"] == 1 and listed["results"][0]["id"] == aid


def test_recovery_refused_while_held_or_done(runtime, journal):
    token = claim(runtime.client, "unsafe").json()["fencing_token"]
    held = open_recovery(runtime.client, "unsafe", token)
    assert (held.status_code, held.json()["error"], held.json()["reason"]) == (
        409,
        "turn_blocked",
        "effect_indeterminate",
    )
    # A finished turn hands out no lease, even before the worker stored the assessment that says so...
    refused = claim(runtime.client, "done")
    assert (refused.status_code, refused.json()["error"]) == (409, "nothing_to_recover")
    # ... and a lease taken before the turn finished opens no recovery once it has.
    token = claim(runtime.client, "mid").json()["fencing_token"]
    start = len(journal.lines)
    journal.commit("mid", "dispatch", "execute", "readback", "writeback", "spend")
    journal.observe("mid", "fetch")
    journal.observe("mid", "mail")
    journal.terminal("mid")
    ingest(runtime.client, journal, journal.lines[start:], fencing=f"mid={token}")
    finished = open_recovery(runtime.client, "mid", token).json()
    assert (finished["error"], finished["decision"]) == ("nothing_to_recover", "complete")


@override_settings(LOOPX_MAX_RECOVERY_ATTEMPTS=3)
def test_crash_loop_is_parked_until_an_operator_approves(runtime, journal, operator_client):
    token = claim(runtime.client, "mid").json()["fencing_token"]
    for attempt in (1, 2, 3):
        opened = open_recovery(runtime.client, "mid", token)
        assert opened.status_code == 201 and opened.json()["attempt"] == attempt
    assert gate(runtime.client, "mid")["recovery"] == {"attempts": 3, "max_attempts": 3, "parked": False}
    refused = open_recovery(runtime.client, "mid", token)
    assert refused.status_code == 409 and refused.json()["error"] == "recovery_attempts_exceeded"
    parked = gate(runtime.client, "mid")
    assert (parked["state"], parked["reason"], parked["recovery"]["parked"]) == (
        "hold",
        "recovery_attempts_exceeded",
        True,
    )
    assert open_recovery(runtime.client, "mid", token).json()["error"] == "turn_blocked"
    assert OperatorAction.objects.filter(kind="turn_park", actor__isnull=True).count() == 1
    approved = operator_client.post(T.format("mid") + "/approve", {"reason": "fixed the worker"}, format="json")
    assert approved.status_code == 200 and approved.json()["state"] == "proceed"
    assert approved.json()["recovery"]["attempts"] == 0
    assert open_recovery(runtime.client, "mid", token).status_code == 201


@override_settings(LOOPX_MAX_RECOVERY_ATTEMPTS=2)
def test_progress_resets_the_attempt_count(runtime, journal):
    token = claim(runtime.client, "mid").json()["fencing_token"]
    for _ in range(2):
        assert open_recovery(runtime.client, "mid", token).status_code == 201
    journal.commit("mid", "dispatch")
    ingest(runtime.client, journal, journal.lines[-1:], fencing=f"mid={token}")  # the holder writes the claimed turn
    assert gate(runtime.client, "mid")["recovery"]["attempts"] == 0
    assert open_recovery(runtime.client, "mid", token).json()["attempt"] == 1


def test_indeterminate_effect_needs_evidence_which_the_engine_reads(runtime, journal, operator_client, operator):
    url = T.format("unsafe") + "/approve"
    bare = operator_client.post(url, {"reason": "looks fine"}, format="json")
    assert bare.status_code == 409 and bare.json()["error"] == "evidence_required"
    assert bare.json()["intents"] == ["charge"]
    assert not OperatorEvidence.objects.exists()  # refused as a whole
    unknown = operator_client.post(url, {"reason": "r", "evidence": {"nope": "happened"}}, format="json")
    assert unknown.status_code == 400
    answer = operator_client.post(
        url, {"reason": "the provider shows no charge", "evidence": {"charge": "not_happened"}}, format="json"
    )
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert (data["state"], data["decision"], data["resume_from"]) == ("proceed", "resume", "dispatch")
    assert data["operator"]["kind"] == "approve" and data["operator"]["actor"] == operator.username
    assert {p["target"]: p.get("resolution") for p in data["planned"]}["charge"] == "replay"
    evidence = operator_client.get(T.format("unsafe") + "/evidence").json()
    assert evidence == [
        {
            "intent": "charge",
            "finding": "not_happened",
            "dispatch": 1,  # the finding is about the first dispatch, the one the operator looked at
            "actor": operator.username,
            "reason": "the provider shows no charge",
            "created_at": evidence[0]["created_at"],
        }
    ]
    action = OperatorAction.objects.get(kind="turn_approve")
    assert action.actor == operator and action.before["state"] == "hold" and action.after["state"] == "proceed"
    assert action.after["evidence"] == {"charge": "not_happened"}


def test_happened_evidence_settles_the_intent(runtime, journal, operator_client):
    answer = operator_client.post(
        T.format("unsafe") + "/approve", {"reason": "charged", "evidence": {"charge": "happened"}}, format="json"
    )
    data = answer.json()
    assert data["state"] == "proceed" and "charge" not in {p["target"] for p in data["planned"]}
    assert {i["intent"]: i["resolution"] for i in data["intents"]} == {"charge": "settled"}


def test_block_and_approve_are_audited(runtime, journal, operator_client, operator):
    blocked = operator_client.post(T.format("mid") + "/block", {"reason": "investigating"}, format="json")
    assert blocked.status_code == 200
    assert (blocked.json()["state"], blocked.json()["reason"]) == ("hold", "operator_blocked")
    token = claim(runtime.client, "mid").json()["fencing_token"]
    assert open_recovery(runtime.client, "mid", token).json()["reason"] == "operator_blocked"
    assert operator_client.post(T.format("mid") + "/approve", {"reason": ""}, format="json").status_code == 400
    approved = operator_client.post(T.format("mid") + "/approve", {"reason": "done checking"}, format="json")
    assert approved.json()["state"] == "proceed"
    again = operator_client.post(T.format("mid") + "/approve", {"reason": "twice"}, format="json")
    assert again.status_code == 409 and again.json()["error"] == "nothing_to_approve"
    actions = operator_client.get("/api/v1/operator-actions?turn=mid").json()["results"]
    assert [(a["kind"], a["actor"], a["reason"]) for a in actions] == [
        ("turn_approve", operator.username, "done checking"),
        ("turn_block", operator.username, "investigating"),
    ]
    assert actions[1]["before"]["state"] == "proceed" and actions[1]["after"]["state"] == "hold"
    decisions = operator_client.get(T.format("mid") + "/gate-decisions").json()
    assert [d["kind"] for d in decisions] == ["approve", "block"]


def test_turn_level_violation_is_approvable_for_that_fact_only(runtime, operator_client):
    b = JournalBuilder()
    b.plan("t1")
    b.commit("t1", "plan", "dispatch")  # skips envelope: phase_prefix_violation
    ingest(runtime.client, b)
    held = gate(runtime.client, "t1")
    assert (held["state"], held["reason"]) == ("hold", "phase_prefix_violation")
    approved = operator_client.post(T.format("t1") + "/approve", {"reason": "accepted"}, format="json").json()
    assert (approved["state"], approved["decision"], approved["resume_from"], approved["approved"]) == (
        "proceed",
        "resume",
        "envelope",
        True,
    )
    b.dispatch("t1", "pay", effect_class="unsafe")
    b.dispatch("t1", "pay", effect_class="unsafe")  # unsafe_redispatch: another fact, not approved
    ingest(runtime.client, b, b.lines[-2:])
    after = gate(runtime.client, "t1")
    assert after["state"] == "hold"


def test_run_level_violations_and_discarded_turns_are_not_approvable(runtime, operator_client):
    b = JournalBuilder()
    b.plan("t1")
    b.raw(b'{"branch":0,"kind":"phase_committed","lsn":1,"phase":"plan","run":"run-1","turn":"t1","v":7}')
    ingest(runtime.client, b)
    refused = operator_client.post(T.format("t1") + "/approve", {"reason": "please"}, format="json")
    assert refused.status_code == 409 and refused.json()["error"] == "run_level_violation"

    d = JournalBuilder("run-2")
    d.plan("keep")
    d.plan("gone")
    d.fork(from_lsn=0)
    ingest(runtime.client, d)
    gone = runtime.client.get("/api/v1/runs/run-2/turns/gone/decision").json()
    assert (gone["state"], gone["decision"]) == ("done", "discarded")


def test_only_people_with_the_operator_role_decide(runtime, journal, viewer_client, outsider_client):
    body = {"reason": "r"}
    assert runtime.client.post(T.format("mid") + "/block", body, format="json").status_code == 403
    assert viewer_client.post(T.format("mid") + "/block", body, format="json").status_code == 403
    assert outsider_client.get(T.format("mid") + "/decision").status_code == 403
    assert viewer_client.post(T.format("mid") + "/claim", {"worker_id": "w"}, format="json").status_code == 403
    assert viewer_client.get(T.format("mid") + "/decision").status_code == 200
