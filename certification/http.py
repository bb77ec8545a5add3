"""The runtime's gateway over HTTP: the runtime client (``loopx_client.Gate``, the client/ package) against
a live LoopX service, exactly as a runtime of a team's own would use it.

Records are shipped with ``Gate.ship`` (ack cursors, ``LoopX-Expect``, the fencing tokens of claimed turns,
a batch whose answer was lost sent again), the gate and claims are the client's, and a runtime that lost
its memory reads the journal back with ``Gate.records``. The client retries what is safe to repeat, so a
web process killed in the middle of a batch is, to the runtime, a pause.

The operator's side is a person signed in to the console (certification/operator.py), never a runtime
token: a runtime token may never approve, by design of the API.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from loopx_client import Entry, Gate
from loopx_client.errors import ClaimHeld, NotFound

from .store import EvidenceRow, GateAnswer


class _Shipped:
    """The run's records in the order the runtime wrote them (the client's ``Shippable``)."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.entries: list[Entry] = []
        self._high: dict[int, int] = {}

    def add(self, line: bytes) -> None:
        record = json.loads(line)
        turn = record.get("turn")
        self.entries.append(
            Entry(record["branch"], record["lsn"], record["kind"], turn if isinstance(turn, str) else None, line)
        )
        self._high[record["branch"]] = record["lsn"]

    def high_water(self) -> dict[int, int]:
        return dict(self._high)


def evidence_id(item: dict[str, Any]) -> str:
    """What a readback cites for a finding: its time, intent and finding (the API shows no row id)."""
    return f"{item['created_at']}/{item['intent']}/{item['finding']}"


class HttpGateway:
    def __init__(self, base_url: str, token: str, run: str, *, retries: int = 8, batch_records: int = 1000) -> None:
        # Enough retries to ride out a web restart (a killed service is back within a few seconds).
        self.gate = Gate(base_url, token, retries=retries, backoff=0.1, max_backoff=1.0, batch_records=batch_records)
        self.base_url = base_url
        self.run = run
        self._shipped: _Shipped | None = None
        self._turn_ids: list[str] = []  # the planned turns of the journal as last read (they only grow)
        # turn -> (local monotonic deadline, lease seconds) of this worker's last claim
        self._leases: dict[str, tuple[float, float]] = {}

    # -- ingest --------------------------------------------------------------------------------------
    def lines(self) -> list[bytes]:
        """The stored records, read back through the client (checked against their stored digests)."""
        lines = self.gate.records(self.run)
        for line in lines:
            if b'"turn_planned"' in line:
                record = json.loads(line)
                if record["kind"] == "turn_planned" and record["turn"] not in self._turn_ids:
                    self._turn_ids.append(record["turn"])
        return lines

    def ingest(self, lines: list[bytes]) -> None:
        if self._shipped is None:
            self._shipped = _Shipped(self.run)
            for line in self.lines():
                self._shipped.add(line)
        for line in lines:
            self._shipped.add(line)
        self.gate.ship(self._shipped)

    # -- the gate ------------------------------------------------------------------------------------
    def decision(self, turn: str) -> GateAnswer | None:
        try:
            answer = self.gate.decision(self.run, turn)
        except NotFound:
            return None
        engine = answer.body["engine"]
        return GateAnswer(answer.state, engine["decision"], answer.reason or engine["reason"])

    def claim(self, turn: str, worker: str) -> int:
        # The deadline starts before the request is sent: the service's lease can only end later than that.
        sent = time.monotonic()
        claim = self.gate.claim(self.run, turn, worker)
        seconds = lease_seconds(claim)
        self._leases[turn] = (sent + seconds, seconds)
        token = claim["fencing_token"] if isinstance(claim, dict) else claim.fencing_token
        return int(token)

    def lease_deadline(self, turn: str) -> float | None:
        held = self._leases.get(turn)
        return held[0] if held is not None else None

    def lease_seconds(self, turn: str) -> float:
        held = self._leases.get(turn)
        return held[1] if held is not None else configured_lease()

    def claim_or_wait(self, turn: str, worker: str, *, patience: float = 30.0) -> tuple[int, bool]:
        """Claim the turn; while another worker's lease holds (a dead worker's, after a takeover), wait for
        it to run out and claim again. Returns (fencing token, whether a lease had to be waited out)."""
        waited = False
        deadline = time.monotonic() + patience
        while True:
            try:
                return self.claim(turn, worker), waited
            except ClaimHeld:
                if time.monotonic() > deadline:
                    raise
                waited = True
                time.sleep(0.25)

    def evidence_rows(self, turn: str | None = None) -> list[EvidenceRow]:
        turns = [turn] if turn is not None else self._turns()
        rows: list[EvidenceRow] = []
        for t in turns:
            for item in self.gate.evidence(self.run, t):
                rows.append(EvidenceRow(evidence_id(item), t, item["intent"], item["finding"], item["actor"],
                                        item["reason"]))
        return rows

    def _turns(self) -> list[str]:
        """The planned turns: as the journal was last read here, else read now."""
        if not self._turn_ids:
            self.lines()
        return list(self._turn_ids)

    def approve(self, *, turn: str, actor: str, reason: str, evidence: dict[str, str]) -> None:
        raise RuntimeError("a runtime may never approve: the operator signs in to the console (operator.py)")


def configured_lease() -> float:
    """The service's lease as the rig configured it ($LOOPX_CHAOS_LEASE_SECONDS)."""
    return float(os.environ.get("LOOPX_CHAOS_LEASE_SECONDS", "1"))


def lease_seconds(claim: object) -> float:
    """The lease the service granted: the claim answer's ``lease_seconds`` (a dict answer or a ``Claim``
    that carries it), else the configured one."""
    value = claim.get("lease_seconds") if isinstance(claim, dict) else getattr(claim, "lease_seconds", None)
    return float(value) if isinstance(value, int | float) and value > 0 else configured_lease()


def stale_write(base_url: str, token: str, run: str, line: bytes, turn: str, fencing_token: int) -> int:
    """A dead worker's late write: one record naming ``turn``, sent with the token that worker held. Returns
    the HTTP status (409 ``fenced`` when the fencing holds); the client is not used, because a client that
    lost its claim would know better than to send it."""
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/api/v1/runs/{urllib.parse.quote(run, safe='')}/records",
        data=line + b"\n",
        method="POST",
    )
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/x-ndjson")
    request.add_header("LoopX-Fencing", f"{urllib.parse.quote(turn, safe='')}={fencing_token}")
    for _ in range(40):  # another seed's kill may have the web down for a moment
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            body = error.read()
            if error.code == 409 and b'"fenced"' not in body:
                return 4090  # refused, but not by the fence: the rig reports it
            return int(error.code)
        except (urllib.error.URLError, OSError, http.client.HTTPException):
            time.sleep(0.25)
    raise RuntimeError("the service did not answer the late write")


def gateway_from_env(run: str) -> HttpGateway:
    """The runtime's HTTP gateway: LOOPX_CHAOS_URL and LOOPX_CHAOS_TOKEN (a token never goes on argv)."""
    return HttpGateway(os.environ["LOOPX_CHAOS_URL"], os.environ["LOOPX_CHAOS_TOKEN"], run)

