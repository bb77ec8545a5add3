"""The client's runtime safety without a server: write-ahead refused where it cannot be kept, the server's
limits kept (a record over the line limit is never written), the lease keeper, dropping a torn tail
(audited, and only a torn one), and the typed errors of the server's newer codes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import loopx_client
import pytest
from loopx_client import (
    Claim,
    Gate,
    Journal,
    JournalCorrupt,
    JournalError,
    LeaseKeeper,
    LeaseLost,
    LeaseTooShort,
    Limits,
    NothingToDrop,
    RecordTooLarge,
    WriteAheadRequired,
    drop_torn_tail,
    errors,
)
from loopx_client.repair import repairs_path

CLIENT = Path(__file__).resolve().parents[2] / "client"


# --- write-ahead ------------------------------------------------------------------------------------------


def test_an_unsafe_effect_on_a_bare_journal_is_refused_unless_local_write_ahead_is_chosen(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1") as journal:
        journal.plan("t1", "job")
        before = path.read_bytes()
        ran: list[str] = []
        with pytest.raises(WriteAheadRequired), journal.effect("t1", "send", "unsafe"):
            ran.append("send")
        with pytest.raises(WriteAheadRequired), journal.effect("t1", "save", "idempotent", idempotency_key="k",
                                                                write_ahead=True):
            ran.append("save")
        assert ran == [] and path.read_bytes() == before  # nothing ran, nothing written
        with journal.effect("t1", "save", "idempotent", idempotency_key="k"):  # a key: local write-ahead is enough
            ran.append("save")
        with journal.effect("t1", "send", "unsafe", local_write_ahead=True):
            ran.append("send")
        assert ran == ["save", "send"] and journal.readback("t1", "send") == "succeeded"


# --- limits -------------------------------------------------------------------------------------------------


def test_a_record_over_the_line_limit_is_refused_before_it_is_written(tmp_path):
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1") as journal:
        journal.plan("t1", "job")
        before = path.read_bytes()
        # The server's documented default: 256 KiB per line.
        with pytest.raises(RecordTooLarge) as refused:
            journal.commit("t1", "plan", output="x" * 262144)
        assert refused.value.limit == 262144 and refused.value.size > 262144
        assert isinstance(refused.value, errors.RecordRefused)
        assert path.read_bytes() == before and journal.high_water() == {0: 0}
        journal.commit("t1", "plan", output="x" * 1000)  # still usable: the next record takes lsn 1
        assert journal.high_water() == {0: 1}
    with Journal(path, run="r1", limits=Limits(max_line_bytes=300)) as journal:  # limits passed in
        with pytest.raises(RecordTooLarge):
            journal.commit("t1", "envelope", note="y" * 300)
        journal.commit("t1", "envelope")
    assert [json.loads(x)["lsn"] for x in path.read_bytes().splitlines()] == [0, 1, 2]


def test_the_gate_asks_the_limits_once_and_cuts_batches_to_them(tmp_path):
    calls: list[str] = []
    gate = Gate("http://127.0.0.1:9", "lxr_x")

    def answer(method: str, path: str, **_: Any) -> Any:
        calls.append(path)
        return {"max_line_bytes": 500, "max_batch_bytes": 700, "max_batch_records": 3, "claim_lease_seconds": 7}

    gate._request = answer  # type: ignore[method-assign]
    assert gate.limits() == Limits(500, 700, 3, 7.0)
    assert gate.limits() is gate.limits() and calls == ["/limits"]
    with Journal(tmp_path / "j.jsonl", run="r1") as journal:
        journal.plan("t1", "job")
        for n in range(6):
            journal.commit("t1", f"p{n}")
        entries = journal.entries
    assert len(gate._batch(entries)) == 3  # the server's record limit, below the Gate's own 1000
    gate._limits = Limits(max_batch_bytes=400, max_batch_records=100)
    batch = gate._batch(entries)
    assert 1 <= len(batch) < len(entries) and sum(len(e.line) + 1 for e in batch) <= 400

    def missing(method: str, path: str, **_: Any) -> Any:
        raise errors.NotFound(404, "not_found", "no such page", {})

    older = Gate("http://127.0.0.1:9", "lxr_x")
    older._request = missing  # type: ignore[method-assign]
    assert older.limits() == loopx_client.DEFAULT_LIMITS  # a server without the endpoint: the defaults


def test_limits_from_an_answer_keep_the_defaults_for_what_is_missing_or_wrong():
    limits = Limits.from_answer({"max_line_bytes": 1024, "max_batch_bytes": "x", "max_batch_records": -1})
    assert limits == Limits(max_line_bytes=1024)


# --- claims and the lease keeper ----------------------------------------------------------------------------


def claim(token: int = 1, lease: float = 10.0, *, run: str = "r", turn: str = "t") -> Claim:
    return Claim(run, turn, "w", token, datetime.now(UTC) + timedelta(seconds=lease), lease, time.monotonic() + lease)


def test_a_renewal_that_comes_back_with_another_token_is_never_sent_with_batches():
    gate = Gate("http://127.0.0.1:9", "lxr_x")
    tokens = [1, 1, 2]

    def answer(method: str, path: str, **_: Any) -> Any:
        return {"worker_id": "w", "fencing_token": tokens.pop(0), "expires_at": "2026-12-03T17:00:00Z",
                "lease_seconds": 5}

    gate._request = answer  # type: ignore[method-assign]
    first = gate.claim("r", "t", "w")
    assert gate.renew(first).fencing_token == 1 and gate.fencing_header("r", {"t"}) == "t=1"
    assert gate.renew(first).fencing_token == 2  # the lease had run out on the server: a new claim...
    assert gate.fencing_header("r", {"t"}) == "t=1"  # ...whose token this worker's batches do not carry


def test_a_claim_is_parsed_aware_with_a_deadline_counted_from_before_the_request():
    gate = Gate("http://127.0.0.1:9", "lxr_x")

    def answer(method: str, path: str, **_: Any) -> Any:
        time.sleep(0.2)  # the server takes its time: the lease started somewhere in here
        return {"worker_id": "w", "fencing_token": 4, "expires_at": "2026-12-03T17:00:00+00:00", "lease_seconds": 5}

    gate._request = answer  # type: ignore[method-assign]
    before = time.monotonic()
    got = gate.claim("r", "t", "w")
    after = time.monotonic()
    assert got.expires_at == datetime(2026, 12, 3, 17, 0, tzinfo=UTC) and got.expires_at.tzinfo is not None
    assert got.lease_seconds == 5.0 and before + 5 <= got.deadline <= after + 5 - 0.2
    assert gate.fencing_header("r", {"t"}) == "t=4"


class FakeGate:
    """What the keeper asks of a Gate: renew(claim), answered as the script says."""

    timeout = 1.0

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.renewals = 0

    def release(self, held: Claim) -> None:
        self.released = held.fencing_token

    def renew(self, held: Claim) -> Claim:
        self.renewals += 1
        answer = self.answers.pop(0) if self.answers else "same"
        if isinstance(answer, BaseException):
            raise answer
        if answer == "same":
            return claim(held.fencing_token, held.lease_seconds)
        return claim(int(answer), held.lease_seconds)


def test_the_keeper_refuses_an_effect_the_lease_left_cannot_cover():
    keeper = LeaseKeeper(FakeGate([]), claim(lease=10.0), clock_drift=0.01, lease_margin=1.0)  # type: ignore[arg-type]
    keeper.check("send", max_duration=5.0)  # 10 s left: enough for 5 + 1 at 1% drift
    with pytest.raises(LeaseTooShort) as short:
        keeper.check("send", max_duration=9.5)
    assert short.value.intent == "send" and short.value.needed == pytest.approx(10.5 / 0.99)
    assert short.value.remaining < 10.0
    over = LeaseKeeper(FakeGate([]), claim(lease=-0.1))  # type: ignore[arg-type]
    with pytest.raises(LeaseLost):  # the local deadline has passed: lost, whatever the server thinks
        over.check("send", max_duration=0.0)
    assert over.lost and "ran out" in over.lost


def test_a_refused_renewal_or_a_new_token_loses_the_lease_and_no_answer_does_not():
    held = errors.ClaimHeld(409, "claim_held", "another worker", {"holder": "b"})
    keeper = LeaseKeeper(FakeGate([held]), claim())  # type: ignore[arg-type]
    with pytest.raises(LeaseLost):
        keeper.renew()
    assert "claim_held" in (keeper.lost or "")
    with pytest.raises(LeaseLost):
        keeper.check("send", 0.0)

    fake = FakeGate([2])
    taken = LeaseKeeper(fake, claim(token=1))  # type: ignore[arg-type]
    with pytest.raises(LeaseLost):  # the lease ran out on the server meanwhile: another token
        taken.renew()
    assert fake.released == 2  # handed back

    flaky = LeaseKeeper(FakeGate([errors.TransportError("reset"), "same"]), claim())  # type: ignore[arg-type]
    with pytest.raises(errors.TransportError):
        flaky.renew()
    assert flaky.lost is None
    assert flaky.renew().fencing_token == 1 and flaky.lost is None


def test_the_keeper_renews_in_the_background_at_a_third_of_the_lease():
    gate = FakeGate([])
    keeper = LeaseKeeper(gate, claim(lease=0.6))  # type: ignore[arg-type]
    assert keeper.every == pytest.approx(0.2)
    keeper.start()
    try:
        time.sleep(1.5)  # more than twice the lease: held only because it was renewed
        assert keeper.lost is None and gate.renewals >= 4 and keeper.remaining() > 0
    finally:
        keeper.stop()
    assert not any(t.name.startswith("loopx-lease-") and t.is_alive() for t in threading.enumerate())

    refused = FakeGate([errors.Fenced(409, "fenced", "x", {"turn": "t", "token": 1, "current": 2})])
    lost = LeaseKeeper(refused, claim(lease=0.3)).start()  # type: ignore[arg-type]
    try:
        time.sleep(0.5)
        assert lost.lost is not None and "fenced" in lost.lost
    finally:
        lost.stop()


def test_wait_for_decision_polls_with_backoff_until_the_hold_ends_or_the_timeout():
    states = ["hold", "hold", "proceed"]
    slept: list[float] = []
    gate = Gate("http://127.0.0.1:9", "lxr_x", sleep=slept.append)

    def answer(method: str, path: str, **_: Any) -> Any:
        return {"state": states.pop(0) if len(states) > 1 else states[0], "decision": "resume", "reason": None}

    gate._request = answer  # type: ignore[method-assign]
    assert gate.wait_for_decision("r", "t", timeout=60, poll=0.5).state == "proceed"
    assert slept == [0.5, 1.0]
    states[:] = ["hold"]
    slept.clear()
    gate._sleep = lambda s: (slept.append(s), time.sleep(s))[1]  # type: ignore[assignment]
    assert gate.wait_for_decision("r", "t", timeout=0.3, poll=0.1).state == "hold"
    assert sum(slept) <= 0.31


# --- dropping a torn tail -----------------------------------------------------------------------------------


def torn_journal(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "j.jsonl"
    with Journal(path, run="r1") as journal:
        journal.plan("t1", "job")
        journal.commit("t1", "plan")
    whole = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(b'{"branch":0,"kind":"phase_comm')  # a write cut short by a crash
    return path, whole


def test_a_torn_tail_is_dropped_by_the_command_with_an_audit_entry(tmp_path):
    path, whole = torn_journal(tmp_path)
    with pytest.raises(JournalCorrupt) as corrupt:
        Journal(path, run="r1")
    assert corrupt.value.torn_tail
    env = {**os.environ, "PYTHONPATH": str(CLIENT)}
    proc = subprocess.run(
        [sys.executable, "-m", "loopx_client", "drop-torn-tail", str(path), "--reason", "crash during the write"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dropped_line"] == 3
    assert path.read_bytes() == whole
    (entry,) = [json.loads(x) for x in repairs_path(path).read_text().splitlines()]
    assert entry["reason"] == "crash during the write" and "@" in entry["who"] and entry["at"].endswith("Z")
    assert base64.b64decode(entry["removed_base64"]) == b'{"branch":0,"kind":"phase_comm'
    assert (entry["line"], entry["offset"]) == (3, len(whole))
    with Journal(path, run="r1") as journal:  # opens and continues
        journal.commit("t1", "envelope")
        assert journal.high_water() == {0: 2}


def test_only_a_torn_last_line_is_dropped(tmp_path):
    path, whole = torn_journal(tmp_path)
    complete = tmp_path / "complete.jsonl"
    complete.write_bytes(whole.rstrip(b"\n"))  # a complete last record without its newline
    with pytest.raises(NothingToDrop):
        drop_torn_tail(complete, reason="x")
    assert complete.read_bytes() == whole.rstrip(b"\n") and not repairs_path(complete).exists()
    ended = tmp_path / "ended.jsonl"
    ended.write_bytes(whole + b"garbage\n")  # damage that ends with a newline: not a cut-short write
    with pytest.raises(NothingToDrop):
        drop_torn_tail(ended, reason="x")
    above = tmp_path / "above.jsonl"
    above.write_bytes(b"garbage\n" + whole + b'{"torn')
    with pytest.raises(NothingToDrop):
        drop_torn_tail(above, reason="x")
    with pytest.raises(ValueError):
        drop_torn_tail(path, reason="  ")
    env = {**os.environ, "PYTHONPATH": str(CLIENT)}
    proc = subprocess.run([sys.executable, "-m", "loopx_client", "drop-torn-tail", str(complete), "--reason", "r"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 2 and "refused" in proc.stderr
    dropped = drop_torn_tail(path, reason="second try", who="ops-1")
    assert dropped.removed == b'{"branch":0,"kind":"phase_comm' and path.read_bytes() == whole
    assert json.loads(repairs_path(path).read_text())["who"] == "ops-1"


def test_a_journal_held_by_a_writer_is_not_cut(tmp_path):
    path, _ = torn_journal(tmp_path)
    drop_torn_tail(path, reason="first")
    with open(path, "ab") as handle:
        handle.write(b'{"torn')
    holder = tmp_path / "hold.py"
    holder.write_text(
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, str(holder), str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(JournalError):
            drop_torn_tail(path, reason="while written")
    finally:
        proc.kill()  # our own child, by its handle
        proc.wait()
    assert path.read_bytes().endswith(b'{"torn')


# --- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (409, "chain_mismatch", errors.ChainMismatch),
        (409, "claim_live", errors.ClaimLive),
        (409, "nothing_to_recover", errors.NothingToRecover),
        (503, "unavailable", errors.Unavailable),
        (401, "unauthenticated", errors.Unauthenticated),
        (401, "token_invalid", errors.TokenInvalid),
        (403, "run_forbidden", errors.RunForbidden),
        (403, "role_required", errors.RoleRequired),
        (405, "method_not_allowed", errors.MethodNotAllowed),
        (406, "not_acceptable", errors.NotAcceptable),
        (400, "parse_error", errors.ParseError),
        (415, "unsupported_media_type", errors.UnsupportedMediaType),
        (429, "throttled", errors.Throttled),
        (413, "batch_too_large", errors.BatchTooLarge),
    ],
)
def test_the_newer_codes_arrive_typed(status, code, cls):
    error = errors.error_for(status, {"error": code, "detail": "d", "line": None, "limit": 5}, retry_after=2.0)
    assert type(error) is cls and error.status == status and error.retry_after == 2.0


def test_fenced_names_the_turn_and_both_tokens():
    error = errors.error_for(409, {"error": "fenced", "detail": "d", "line": None, "turn": "t1", "token": 3,
                                   "current": 4})
    assert isinstance(error, errors.Fenced) and (error.turn, error.token, error.current) == ("t1", 3, 4)
    assert isinstance(errors.error_for(503, {}), errors.Unavailable)
    assert isinstance(errors.error_for(503, {}), errors.ServerError)


def test_every_error_class_is_exported_at_the_top_level():
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, loopx_client.LoopxError)]
    assert len(classes) > 100
    missing = sorted(c.__name__ for c in classes if getattr(loopx_client, c.__name__, None) is not c)
    assert not missing and set(c.__name__ for c in classes) <= set(loopx_client.__all__)


def test_an_outage_is_waited_out_as_long_as_retry_after_asks():
    slept: list[float] = []
    gate = Gate("http://127.0.0.1:9", "lxr_x", backoff=0.01, sleep=slept.append)
    answers: list[Any] = [errors.Unavailable(503, "unavailable", "database down", {}, retry_after=3.0),
                          errors.Throttled(429, "throttled", "slow down", {}, retry_after=1.5),
                          {"state": "proceed", "decision": "resume", "reason": None}]

    def answer(method: str, path: str, **_: Any) -> Any:
        item = answers.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    gate._request = answer  # type: ignore[method-assign]
    assert gate.decision("r", "t").state == "proceed"
    assert slept[0] >= 3.0 and slept[1] >= 1.5
    with pytest.raises(errors.Unavailable):  # never retried: a release changes the gate's state once
        gate._request = lambda *a, **k: (_ for _ in ()).throw(  # type: ignore[method-assign]
            errors.Unavailable(503, "unavailable", "down", {}, retry_after=1.0))
        gate.release(claim())


# --- the session's write-ahead, against a scripted ship ------------------------------------------------------


def scripted_session(tmp_path: Path, ship: Any, lease: float = 60.0) -> tuple[loopx_client.TurnSession, Journal]:
    """A claimed turn session whose Gate.ship is ``ship(journal)`` (no server): the write-ahead's own logic."""
    gate = Gate("http://127.0.0.1:9", "lxr_x")
    gate.ship = ship  # type: ignore[method-assign]
    journal = Journal(tmp_path / "j.jsonl", run="r")
    journal.plan("t1", "job")
    session = loopx_client.TurnSession(gate, journal, "t1", lineage="job", worker_id="w")
    session.keeper = LeaseKeeper(gate, claim(lease=lease, turn="t1"))
    return session, journal


def acknowledging(journal: Any) -> loopx_client.ShipResult:
    return loopx_client.ShipResult(acknowledged=journal.high_water())


def test_an_unsafe_body_runs_only_after_the_server_acknowledged_its_dispatch(tmp_path):
    seen: list[str] = []

    def ship(journal: Journal) -> loopx_client.ShipResult:
        seen.append(journal.entries[-1].kind)
        return acknowledging(journal)

    t, journal = scripted_session(tmp_path, ship)
    assert t.call("send", "unsafe", lambda: seen.append("body") or "sent", max_duration=1.0) == "sent"
    assert seen == ["intent_dispatched", "body", "effect_observed"]  # shipped before the body, then after
    seen.clear()
    t.call("save", "idempotent", lambda: seen.append("body"), key="k")
    assert seen == ["body", "effect_observed"]  # the local write-ahead: shipped after the body only
    assert t.call("save", "idempotent", lambda: seen.append("again"), key="k") is None  # done: skipped
    assert t.call("send", "unsafe", lambda: seen.append("again")) is None and "again" not in seen
    journal.close()


@pytest.mark.parametrize("failure", ["no-answer", "short-ack", "fenced", "lease-after-ack"])
def test_a_write_ahead_not_acknowledged_never_runs_the_body(tmp_path, failure):
    def ship(journal: Journal) -> loopx_client.ShipResult:
        if journal.entries[-1].kind != "intent_dispatched":
            return acknowledging(journal)  # the best-effort ship of the `failed` readback
        if failure == "no-answer":
            raise errors.TransportError("reset")
        if failure == "fenced":
            raise errors.Fenced(409, "fenced", "taken over", {"turn": "t1", "token": 1, "current": 2})
        if failure == "lease-after-ack":
            time.sleep(1.2)  # the ship took long: the lease left no longer covers the body
        high = journal.high_water()
        return loopx_client.ShipResult(acknowledged={0: high[0] - 1} if failure == "short-ack" else high)

    t, journal = scripted_session(tmp_path, ship, lease=2.0)
    ran: list[str] = []
    expected = {"no-answer": loopx_client.WriteAheadFailed, "short-ack": loopx_client.WriteAheadFailed,
                "fenced": errors.Fenced, "lease-after-ack": LeaseTooShort}[failure]
    assert t.keeper is not None
    t.keeper.lease_margin = 0.5  # 2 s of lease covers 0.5 s + 0.5 s before the ship, not after 1.2 s more
    with pytest.raises(expected) as refused:
        t.call("send", "unsafe", lambda: ran.append("sent"), max_duration=0.5)
    assert ran == []
    assert journal.readback("t1", "send") == "failed"  # the body never ran: a retry would be legal
    last = json.loads(journal.entries[-1].line)
    assert (last["kind"], last["outcome"], last["source"]) == ("effect_observed", "failed", "not_sent")
    if failure == "no-answer":
        assert isinstance(refused.value.cause, errors.TransportError)  # type: ignore[union-attr]
    if failure == "fenced":
        with pytest.raises(LeaseLost):  # the turn is another worker's now: nothing more of it runs
            t.call("save", "idempotent", lambda: ran.append("saved"), key="k")
        assert ran == []
    journal.close()
