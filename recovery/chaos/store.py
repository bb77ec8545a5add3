"""The runtime's side of the service: ingest, the recovery gate, claims and operator approvals.

The store's HTTP API (`POST /api/v1/runs/{run}/records`, `GET .../turns/{turn}/decision`,
`POST .../claim`, `turn_approve`) is not in the tree yet, so the runtime talks to this adapter, which has
the same calls with the same meaning over files in the run's directory, and derives every decision
from the engine exactly as the gate does. When the API lands, an HTTP implementation of `Gateway` goes
beside `FileGateway` and the rig selects it; nothing else changes.

Crash model: the runtime is SIGKILLed between transitions, never inside a write, and every append is
one ``write`` of whole lines followed by ``fsync``, so a stored batch is all or nothing (a torn tail
would be the engine's ``storage_corruption``, which the rig would report as unrecoverable).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from recovery.engine import Evidence, TurnDecision, assess
from recovery.engine.types import Assessment


@dataclass(frozen=True)
class EvidenceRow:
    id: int
    turn: str
    intent: str
    finding: str  # happened / not_happened
    actor: str
    reason: str


class Gateway(Protocol):
    def ingest(self, lines: list[bytes]) -> None: ...
    def lines(self) -> list[bytes]: ...
    def decision(self, turn: str) -> TurnDecision | None: ...
    def claim(self, turn: str, worker: str) -> int: ...
    def approve(self, *, turn: str, intent: str, actor: str, reason: str, evidence: str) -> EvidenceRow: ...
    def evidence_in_force(self) -> dict[tuple[str, str], EvidenceRow]: ...


def _append(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def cited_evidence(lines: list[bytes]) -> set[int]:
    """Evidence ids a readback in the journal already carries (see `FileGateway.evidence_in_force`)."""
    cited: set[int] = set()
    for line in lines:
        if b'"evidence_id"' in line:
            rec = json.loads(line)
            if rec.get("kind") == "effect_observed" and isinstance(rec.get("evidence_id"), int):
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
    def evidence_rows(self) -> list[EvidenceRow]:
        if not self.evidence_file.exists():
            return []
        return [EvidenceRow(**json.loads(line)) for line in self.evidence_file.read_bytes().splitlines()]

    def evidence_in_force(self) -> dict[tuple[str, str], EvidenceRow]:
        """The latest finding per intent that the journal has not yet absorbed.

        Why not simply the latest finding: evidence names an intent, not a dispatch, and the engine binds
        it to the intent's first dispatch without a definitive readback. Once the runtime has journaled
        the finding as a readback (citing the evidence id), a *later* dispatch of the same unsafe intent
        left without readback would otherwise inherit the old ``not_happened`` and be resolved ``replay``
        while the world may have seen it: a stale finding must never unblock a new dispatch.
        """
        cited = cited_evidence(self.lines())
        latest: dict[tuple[str, str], EvidenceRow] = {}
        for row in self.evidence_rows():
            latest[(row.turn, row.intent)] = row
        return {k: row for k, row in latest.items() if row.id not in cited}

    def assessment(self) -> Assessment:
        evidence = {k: Evidence(row.finding) for k, row in self.evidence_in_force().items()}
        return assess(self.lines(), evidence=evidence)

    def decision(self, turn: str) -> TurnDecision | None:
        for decision in self.assessment().turns:
            if decision.turn == turn:
                return decision
        return None

    def claim(self, turn: str, worker: str) -> int:
        """A claim with a fencing token that only grows per turn (a restarted worker supersedes)."""
        tokens = 0
        if self.claims_file.exists():
            tokens = sum(1 for line in self.claims_file.read_bytes().splitlines() if json.loads(line)["turn"] == turn)
        token = tokens + 1
        _append(self.claims_file, json.dumps({"turn": turn, "worker": worker, "token": token}).encode() + b"\n")
        return token

    # -- the operator --------------------------------------------------------------------------------
    def approve(self, *, turn: str, intent: str, actor: str, reason: str, evidence: str) -> EvidenceRow:
        """What the console's `turn_approve(turn=, actor=, reason=, evidence=)` records: a finding."""
        if evidence not in ("happened", "not_happened"):
            raise ValueError("evidence is happened or not_happened")
        row = EvidenceRow(len(self.evidence_rows()) + 1, turn, intent, evidence, actor, reason)
        payload: dict[str, Any] = asdict(row)
        _append(self.evidence_file, json.dumps(payload, sort_keys=True).encode() + b"\n")
        return row
