"""The runtime's side of the service: ingest, the recovery gate, claims and operator approvals.

``Gateway`` is what the runtime needs of the service. ``HttpGateway`` (http.py) is the live service through
the runtime client: the certification. ``FileGateway`` here has the same calls with the same meaning over
files in the run's directory, and derives every decision from the engine exactly as the gate does: no
service, fast, for checking the workload and the rig themselves (``--store file``).

Crash model: the runtime is SIGKILLed between transitions, never inside a write, and every append is
one ``write`` of whole lines followed by ``fsync``, so a stored batch is all or nothing (a torn tail
would be the engine's ``storage_corruption``, which the rig would report as unrecoverable).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from engine import Evidence, TurnDecision, assess
from engine.types import Assessment


@dataclass(frozen=True)
class GateAnswer:
    """What the recovery gate says a runtime may do with a turn now (the API's decision resource)."""

    state: str  # proceed / hold / done
    decision: str  # the engine's decision
    reason: str | None


@dataclass(frozen=True)
class EvidenceRow:
    id: str  # what a readback cites (`evidence_id`) once the runtime has journaled the finding
    turn: str
    intent: str
    finding: str  # happened / not_happened
    actor: str
    reason: str


class Gateway(Protocol):
    def ingest(self, lines: list[bytes]) -> None: ...
    def lines(self) -> list[bytes]: ...
    def decision(self, turn: str) -> GateAnswer | None: ...
    def claim(self, turn: str, worker: str) -> int: ...
    def claim_or_wait(self, turn: str, worker: str) -> tuple[int, bool]: ...
    def lease_deadline(self, turn: str) -> float | None: ...
    def lease_seconds(self, turn: str) -> float: ...
    def approve(self, *, turn: str, actor: str, reason: str, evidence: dict[str, str]) -> None: ...
    def evidence_rows(self, turn: str | None = None) -> list[EvidenceRow]: ...


def latest_evidence(rows: list[EvidenceRow]) -> dict[tuple[str, str], EvidenceRow]:
    latest: dict[tuple[str, str], EvidenceRow] = {}
    for row in rows:
        latest[(row.turn, row.intent)] = row
    return latest


def unabsorbed_evidence(gateway: Gateway, lines: list[bytes]) -> dict[tuple[str, str], EvidenceRow]:
    """The latest finding per intent that the journal has not yet absorbed.

    Why not simply the latest finding: evidence names an intent, not a dispatch, and the engine binds
    it to the intent's first dispatch without a definitive readback. Once the runtime has journaled
    the finding as a readback (citing the evidence id), a *later* dispatch of the same unsafe intent
    left without readback would otherwise inherit the old ``not_happened`` and be resolved ``replay``
    while the world may have seen it: a stale finding must never unblock a new dispatch.
    """
    cited = cited_evidence(lines)
    return {k: row for k, row in latest_evidence(gateway.evidence_rows()).items() if row.id not in cited}


def assessment_of(gateway: Gateway, lines: list[bytes] | None = None) -> Assessment:
    """The engine's assessment of the stored journal (``lines``, when just read) with the evidence in force
    (the rig's yardstick)."""
    if lines is None:
        lines = gateway.lines()
    evidence = {k: Evidence(row.finding) for k, row in unabsorbed_evidence(gateway, lines).items()}
    return assess(lines, evidence=evidence)


def _append(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def cited_evidence(lines: list[bytes]) -> set[str]:
    """Evidence ids a readback in the journal already carries (see `unabsorbed_evidence`)."""
    cited: set[str] = set()
    for line in lines:
        if b'"evidence_id"' in line:
            rec = json.loads(line)
            if rec.get("kind") == "effect_observed" and isinstance(rec.get("evidence_id"), str):
                cited.add(rec["evidence_id"])
    return cited


class FileGateway:
    """journal.jsonl (the stored records, append-only), evidence.jsonl, claims.jsonl in ``root``."""

    def __init__(self, root: Path | str, run: str) -> None:
        self.root = Path(root)
        self.run = run
        self.root.mkdir(parents=True, exist_ok=True)
        self.journal = self.root / "journal.jsonl"
        self.evidence_file = self.root / "evidence.jsonl"
        self.claims_file = self.root / "claims.jsonl"

    # -- ingest ------------------------------------------------------------------------------------
    def ingest(self, lines: list[bytes]) -> None:
        for line in lines:
            if b"\n" in line or not line:
                raise ValueError("a record is one non-empty line")
        _append(self.journal, b"".join(line + b"\n" for line in lines))

    def lines(self) -> list[bytes]:
        if not self.journal.exists():
            return []
        data = self.journal.read_bytes()
        return data.split(b"\n")[:-1] if data else []

    # -- the recovery gate ---------------------------------------------------------------------------
    def evidence_rows(self, turn: str | None = None) -> list[EvidenceRow]:
        if not self.evidence_file.exists():
            return []
        rows = [EvidenceRow(**json.loads(line)) for line in self.evidence_file.read_bytes().splitlines()]
        return [r for r in rows if turn is None or r.turn == turn]

    def assessment(self) -> Assessment:
        return assessment_of(self)

    def decision(self, turn: str) -> GateAnswer | None:
        for d in self.assessment().turns:
            if d.turn == turn:
                return _answer(d)
        return None

    def claim(self, turn: str, worker: str) -> int:
        """A claim with a fencing token that only grows per turn (a restarted worker supersedes)."""
        tokens = 0
        if self.claims_file.exists():
            tokens = sum(1 for line in self.claims_file.read_bytes().splitlines() if json.loads(line)["turn"] == turn)
        token = tokens + 1
        _append(self.claims_file, json.dumps({"turn": turn, "worker": worker, "token": token}).encode() + b"\n")
        return token

    def claim_or_wait(self, turn: str, worker: str) -> tuple[int, bool]:
        """A claim here never waits: the files keep no leases (the token alone fences)."""
        return self.claim(turn, worker), False

    def lease_deadline(self, turn: str) -> float | None:
        """None: the files keep no leases."""
        return None

    def lease_seconds(self, turn: str) -> float:
        return 0.0

    # -- the operator --------------------------------------------------------------------------------
    def approve(self, *, turn: str, actor: str, reason: str, evidence: dict[str, str]) -> None:
        """What the console's `turn_approve(turn=, actor=, reason=, evidence=)` records: findings."""
        count = len(self.evidence_rows())
        for intent, finding in sorted(evidence.items()):
            if finding not in ("happened", "not_happened"):
                raise ValueError("evidence is happened or not_happened")
            count += 1
            row = EvidenceRow(str(count), turn, intent, finding, actor, reason)
            _append(self.evidence_file, json.dumps(asdict(row), sort_keys=True).encode() + b"\n")


def _answer(d: TurnDecision) -> GateAnswer:
    value = d.decision.value
    state = "hold" if value in ("blocked", "discarded") else "done" if value == "complete" else "proceed"
    return GateAnswer(state, value, d.reason)
