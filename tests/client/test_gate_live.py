"""The client's Gate against a live server: shipping with the ack cursor (a repeat sends nothing, a lost
acknowledgement is redelivered and stored once), the decision with an expected high-water, claims with
fencing, recovery audits, and every refusal of the runtime's API arriving as its typed error."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest
from loopx_client import Claim, Gate, Journal, ShipDiverged, errors

from certification.server import LiveServer
from tests.client.conftest import operator_approves


@pytest.fixture
def server(live_server_for_client: LiveServer) -> LiveServer:
    return live_server_for_client


@pytest.fixture
def gate(server: LiveServer) -> Gate:
    return Gate(server.base_url, server.token, backoff=0.01)


def stored_records(server: LiveServer, run: str) -> list[tuple[int, int, str]]:
    """(branch, lsn, digest) of every stored record, in seq order, read over the API."""
    out: list[tuple[int, int, str]] = []
    url: str | None = f"{server.base_url}/api/v1/runs/{run}/records"
    while url:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {server.token}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            page = json.loads(answer.read())
        out += [(r["branch"], r["lsn"], r["digest"]) for r in page["results"]]
        url = page.get("next")
    return out


def test_ship_sends_what_is_not_acknowledged_and_a_repeat_sends_nothing(tmp_path, gate, server):
    with Journal(tmp_path / "j.jsonl", run="ship-1") as journal:
        journal.plan("t1", "job")
        journal.commit("t1", "plan")
        first = gate.ship(journal)
        assert (first.stored, first.duplicates, first.acknowledged) == (2, 0, {0: 1})
        assert gate.ship(journal).stored == 0  # nothing new: not even a request with records
        journal.commit("t1", "envelope")
        assert gate.ship(journal).stored == 1
    # A fresh client (a restarted runtime) asks the server where it is; the record at the cursor is sent
    # again so that the server compares its bytes: a duplicate, nothing stored twice.
    with Journal(tmp_path / "j.jsonl", run="ship-1") as journal:
        again = Gate(server.base_url, server.token).ship(journal)
        assert (again.stored, again.duplicates) == (0, 1)
    assert len(stored_records(server, "ship-1")) == 3


def test_a_lost_acknowledgement_is_redelivered_and_stored_exactly_once(tmp_path, gate, server, monkeypatch):
    journal = Journal(tmp_path / "j.jsonl", run="lost-ack-1")
    for turn in ("t1", "t2", "t3"):
        journal.plan(turn, "job")
        journal.commit(turn, "plan")
    real = Gate._request
    lost: list[str] = []

    def answer_lost(self: Gate, method: str, path: str, **kwargs: Any) -> Any:
        answer = real(self, method, path, **kwargs)  # the server stores the batch...
        if path.endswith("/records") and method == "POST" and not lost:
            lost.append(path)
            raise errors.TransportError("connection reset before the answer")  # ...the answer never arrives
        return answer

    monkeypatch.setattr(Gate, "_request", answer_lost)
    gate.batch_records = 4  # two batches: the first one's answer is lost
    result = gate.ship(journal)
    assert lost and result.acknowledged == {0: 5}
    rows = stored_records(server, "lost-ack-1")
    assert [(b, n) for b, n, _ in rows] == [(0, n) for n in range(6)]  # each record once, in order
    assert [d for _, _, d in rows] == [hashlib.sha256(x).hexdigest() for x in journal.lines]
    journal.close()


def test_a_server_that_holds_other_records_is_never_overwritten(tmp_path, gate, server):
    with Journal(tmp_path / "a.jsonl", run="diverged-1") as a:
        a.plan("t1", "job")
        a.commit("t1", "plan")
        gate.ship(a)
    with Journal(tmp_path / "b.jsonl", run="diverged-1") as b:
        b.plan("t1", "job")
        with pytest.raises(ShipDiverged):
            Gate(server.base_url, server.token).ship(b)  # the server holds lsn 1, this journal ends at 0
        b.commit("t1", "envelope")  # same place, other bytes
        with pytest.raises(errors.LsnConflict) as caught:
            Gate(server.base_url, server.token).ship(b)
        assert caught.value.body["lsn"] == 1


def test_decision_with_the_expected_high_water(tmp_path, gate):
    with Journal(tmp_path / "j.jsonl", run="expect-1") as journal:
        journal.plan("t1", "job")
        gate.ship(journal)
        assert gate.decision("expect-1", "t1", expect=journal.high_water()).state == "proceed"
        journal.commit("t1", "plan")  # written locally, not shipped: the server's prefix is shorter
        held = gate.decision("expect-1", "t1", expect=journal.high_water())
        assert (held.state, held.reason) == ("hold", "offset_mismatch")
        assert held.offset_mismatch is not None
        assert (held.offset_mismatch["expected"], held.offset_mismatch["stored"]) == (1, 0)


def test_fencing_a_worker_whose_turn_was_taken_over(tmp_path, server):
    a, b = Gate(server.base_url, server.token), Gate(server.base_url, server.token)
    path = tmp_path / "j.jsonl"
    with Journal(path, run="fence-1") as journal:
        journal.plan("t1", "job")
        a.ship(journal)
        first = a.claim("fence-1", "t1", "worker-a")
        with pytest.raises(errors.ClaimHeld) as held:
            b.claim("fence-1", "t1", "worker-b")
        assert held.value.body["holder"] == "worker-a"
        assert a.renew(first).fencing_token == first.fencing_token
        journal.commit("t1", "plan")
        a.ship(journal)  # the holder's batch carries its token
        a.release(first)
        second = b.claim("fence-1", "t1", "worker-b")
        assert second.fencing_token > first.fencing_token
        journal.commit("t1", "envelope")
        with pytest.raises(errors.Fenced) as fenced:
            a.ship(journal)  # worker a still believes it may write
        body = fenced.value.body
        assert (body["turn"], body["token"], body["current"]) == ("t1", first.fencing_token, second.fencing_token)
        untokened = Gate(server.base_url, server.token)
        with pytest.raises(errors.FencingRequired):
            untokened.ship(journal)
        assert b.ship(journal).stored == 1
        with pytest.raises(errors.StaleToken):
            a.release(first)


def test_recovery_audits_and_their_refusals(tmp_path, gate, server, monkeypatch):
    with Journal(tmp_path / "j.jsonl", run="audit-1") as journal:
        journal.plan("t1", "job")
        journal.commit("t1", "plan")
        journal.plan("t2", "job")
        journal.dispatch("t2", "charge", "unsafe")  # no readback: the gate holds t2
        journal.plan("t3", "job", phases=["only"])
        journal.commit("t3", "only")
        journal.terminal("t3")
        gate.ship(journal)
        claim = gate.claim("audit-1", "t1", "w")
        audit = gate.open_recovery(claim)
        assert ("phase", "envelope") in {(a["kind"], a["target"]) for a in audit.planned}
        gate.report(audit, "phase", "envelope")
        closed = gate.close_recovery(audit)
        assert closed["closed"] and closed["actual"][0]["target"] == "envelope"
        with pytest.raises(errors.AuditClosed):
            gate.close_recovery(audit)
        # The rest of its plan was never done: the gate holds the turn for review until an operator approves.
        assert gate.decision("audit-1", "t1").reason == "recovery_diverged"
        with pytest.raises(errors.TurnBlocked):
            gate.open_recovery(claim)
        operator_approves(server, "audit-1", "t1", {}, actor="olivia", reason="read the recovery audit")
        for _ in range(5):  # five recoveries after the approval, each as planned, without progress: the next parks
            again = gate.open_recovery(claim)
            for item in again.planned:
                gate.report(again, item["kind"], item["target"])
            gate.close_recovery(again)
        with pytest.raises(errors.RecoveryAttemptsExceeded):
            gate.open_recovery(claim)
        assert gate.decision("audit-1", "t1").reason == "recovery_attempts_exceeded"
        with pytest.raises(errors.TurnBlocked):
            gate.open_recovery(gate.claim("audit-1", "t2", "w"))
        with pytest.raises(errors.NothingToRecover):
            gate.open_recovery(gate.claim("audit-1", "t3", "w"))


def test_the_remaining_refusals_arrive_typed(tmp_path, gate, server, limited_token):
    run = "/runs/refusals-1/records"
    ndjson = "application/x-ndjson"
    with Journal(tmp_path / "j.jsonl", run="refusals-1") as journal:
        journal.plan("t1", "job")
        gate.ship(journal)
        line = journal.lines[0] + b"\n"
    cases: list[tuple[type[errors.ApiError], Any]] = [
        (errors.NotJson, lambda: gate._request("POST", run, body=b"{torn\n", content_type=ndjson)),
        (errors.EnvelopeInvalid, lambda: gate._request("POST", run, body=b'{"run":"refusals-1"}\n',
                                                        content_type=ndjson)),
        (errors.RunMismatch, lambda: gate._request("POST", "/runs/other/records", body=line, content_type=ndjson)),
        (errors.EmptyBatch, lambda: gate._request("POST", run, body=b"\n", content_type=ndjson)),
        (errors.FencingInvalid, lambda: gate._request("POST", run, body=line, content_type=ndjson,
                                                       headers={"LoopX-Fencing": "t1"})),
        (errors.ExpectInvalid, lambda: gate._request("POST", run, body=line, content_type=ndjson,
                                                      headers={"LoopX-Expect": "zero"})),
        (errors.OffsetMismatch, lambda: gate._request("POST", run, body=line, content_type=ndjson,
                                                       headers={"LoopX-Expect": "0:7"})),
        (errors.ExpectInvalid, lambda: gate._request("GET", "/runs/refusals-1/turns/t1/decision?expect=x")),
        (errors.InvalidRequest, lambda: gate.claim("refusals-1", "t1", "   ")),  # a blank worker id
        (errors.InvalidRequest, lambda: gate._request("POST", "/runs/refusals-1/turns/t1/release",
                                                       body=b'{"fencing_token": "x"}',
                                                       content_type="application/json")),
        (errors.UnsupportedMediaType, lambda: gate._request("POST", run, body=line, content_type="image/png")),
        (errors.NotFound, lambda: gate.decision("refusals-1", "no-such-turn")),
        (errors.TokenInvalid, lambda: Gate(server.base_url, "lxr_not-a-token").decision("refusals-1", "t1")),
        (errors.Unauthenticated, lambda: Gate(server.base_url, "")._request("GET", "/limits")),
        # A token outside its run prefix: the one typed refusal, whichever door it knocks on.
        (errors.RunForbidden, lambda: Gate(server.base_url, limited_token)._request(
            "POST", run, body=line, content_type=ndjson)),
    ]
    for cls, call in cases:
        with pytest.raises(cls) as caught:
            call()
        assert type(caught.value) is cls, (cls, caught.value)
        assert str(server.token) not in str(caught.value)


def test_no_answer_is_a_transport_error_after_the_retries(tmp_path):
    slept: list[float] = []
    gate = Gate("http://127.0.0.1:9", "lxr_x", retries=2, sleep=slept.append, timeout=2)
    with pytest.raises(errors.TransportError):
        gate.decision("r", "t")
    assert len(slept) == 2 and slept[0] <= slept[1] * 2  # backoff between the attempts
    with pytest.raises(errors.TransportError):
        gate.release(Claim("r", "t", "w", 1, datetime.now(UTC)))  # never retried
    assert len(slept) == 2
    assert "lxr_x" not in repr(gate)



def test_records_read_back_byte_identical_and_evidence_with_its_dispatch(tmp_path, gate, server):
    """A runtime that lost its local journal rebuilds it from the server: the bytes it wrote, in order."""
    with Journal(tmp_path / "j.jsonl", run="readback-1") as journal:
        journal.plan("t1", "job")
        journal.commit("t1", "plan")
        journal.dispatch("t1", "send", "unsafe")
        gate.ship(journal)
        written = [entry.line for entry in journal.entries]
    assert gate.records("readback-1") == written
    assert gate.records("never-stored") == []
    assert gate.evidence("readback-1", "t1") == []
    # The operator's finding, as the console records it (turn_approve with evidence).
    operator_approves(
        server, "readback-1", "t1", {"send": "not_happened"}, actor="readback-op",
        reason="the mail server has no such message",
    )
    (finding,) = gate.evidence("readback-1", "t1")
    assert (finding["intent"], finding["finding"], finding["dispatch"], finding["actor"]) == (
        "send", "not_happened", 1, "readback-op"
    )


def test_a_record_served_redacted_is_not_taken_for_the_journal(tmp_path, gate, monkeypatch):
    """Bytes whose digest is not the stored one (a field served redacted) are refused, typed."""
    page = {"results": [{"branch": 0, "lsn": 0, "record": {"kind": "turn_planned"}, "digest": "0" * 64}]}
    monkeypatch.setattr(gate, "_request", lambda method, path, **_: page)
    with pytest.raises(errors.RecordNotVerbatim) as refused:
        gate.records("any-run")
    assert (refused.value.branch, refused.value.lsn) == (0, 0)


def test_an_answer_cut_off_by_a_dying_server_is_a_transport_error(tmp_path):
    """A server killed while it sends its answer: the body ends short of its Content-Length. No answer came,
    so a read is retried and the error, when the retries run out, is typed."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    served = []

    def serve() -> None:
        for _ in range(3):
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8116\r\n\r\n{\"st")
            conn.close()  # dies mid-answer
            served.append(1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    slept: list[float] = []
    gate = Gate(f"http://127.0.0.1:{port}", "lxr_x", retries=2, sleep=slept.append, timeout=5)
    try:
        with pytest.raises(errors.TransportError) as cut:
            gate.decision("r", "t")
    finally:
        listener.close()
    assert "IncompleteRead" in str(cut.value) and len(served) == 3 and len(slept) == 2
