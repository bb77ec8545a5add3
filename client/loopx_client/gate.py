"""The server's side over HTTP: ship a journal, ask the recovery gate, claim turns, report recoveries.

Standard library only (urllib). Every refusal raises the typed error of its code (loopx_client.errors).

Retries, with exponential backoff and jitter, only where repeating a request cannot do anything twice:

- reads (the decision, the branches' ack cursors);
- shipping records: ingest stores a record once whatever the number of deliveries (a record already
  stored with the same bytes is a duplicate), so a batch whose answer was lost is sent again;
- a claim: the holder claiming again renews its lease and keeps its token.

Never retried: release, opening a recovery, reporting an action and closing an audit. Each changes the
gate's state once (a second open counts a second attempt; a second report is a ``repeated_action``
divergence), so a lost answer is the caller's to look into (``recoveries``), not this client's to repeat.
"""

from __future__ import annotations

import http.client
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .canonical import canonical_bytes, digest
from .errors import (
    ApiError,
    NotFound,
    OffsetMismatch,
    RecordNotVerbatim,
    ServerError,
    ShipDiverged,
    Throttled,
    TransportError,
    error_for,
)
from .journal import Entry, Journal

USER_AGENT = "loopx-client/0.1"


class Shippable(Protocol):
    """What ``Gate.ship`` sends: a run's records in file order (a :class:`Journal` is one)."""

    @property
    def run(self) -> str: ...

    @property
    def entries(self) -> list[Entry]: ...

    def high_water(self) -> dict[int, int]: ...


@dataclass(frozen=True)
class Claim:
    """A lease on a turn and its fencing token (the token only grows per turn)."""

    run: str
    turn: str
    worker_id: str
    fencing_token: int
    expires_at: str


@dataclass(frozen=True)
class Decision:
    """The gate's answer for a turn. ``state``: ``proceed`` (recover as ``planned`` says), ``hold`` (blocked:
    ``reason``) or ``done`` (nothing may run). ``body`` is the whole answer."""

    state: str
    decision: str
    reason: str | None
    resume_from: str | None
    planned: list[dict[str, Any]]
    intents: list[dict[str, Any]]
    offset_mismatch: dict[str, Any] | None
    body: dict[str, Any]

    def intent(self, intent: str) -> dict[str, Any] | None:
        return next((i for i in self.intents if i.get("intent") == intent), None)


@dataclass(frozen=True)
class RecoveryAudit:
    """An open recovery of a turn, under the claim it was opened with; ``planned`` is the gate's plan."""

    id: int
    run: str
    turn: str
    fencing_token: int
    planned: list[dict[str, Any]]
    body: dict[str, Any]


@dataclass
class ShipResult:
    stored: int = 0
    duplicates: int = 0
    batches: int = 0
    # branch -> the server's ack cursor after shipping (every lsn 0..n of the branch is stored).
    acknowledged: dict[int, int] = field(default_factory=dict)


class Gate:
    """The LoopX API for a runtime: ``Gate("https://loopx.example", token)``.

    ``token`` is a runtime API token (``manage.py create_api_token``); it is sent as a bearer token and
    never logged. Claimed turns' fencing tokens are kept here and sent (``LoopX-Fencing``) with every batch
    that names those turns, so that a worker whose claim was taken over can no longer write to them.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        batch_records: int = 1000,
        batch_bytes: int = 4 * 1024 * 1024,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base = base_url.rstrip("/") + "/api/v1"
        self._token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.batch_records = batch_records
        self.batch_bytes = batch_bytes
        self._sleep = sleep
        self._fencing: dict[tuple[str, str], int] = {}
        # run -> branch -> the ack cursor of the server's last answer (None: ask the server first).
        self._acked: dict[str, dict[int, int]] = {}

    def __repr__(self) -> str:
        return f"Gate({self.base!r})"  # never the token

    # -- HTTP ------------------------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """One request; the typed error of a refusal, TransportError when no answer came."""
        url = path if path.startswith("http") else self.base + path
        request = urllib.request.Request(url, data=body, method=method)  # noqa: S310  the configured server's http(s) URL
        request.add_header("Authorization", f"Bearer {self._token}")
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        if content_type:
            request.add_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310  the configured server's http(s) URL
                raw = response.read()
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                data = json.loads(raw) if raw else {}
            except ValueError:
                data = {}
            raise error_for(error.code, data) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            # Refused, reset, timed out, or cut off in the middle of the answer (a server that died while
            # sending it): no answer, and the request may or may not have been carried out.
            raise TransportError(f"{method} {url}: no answer ({error!r})") from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise TransportError(f"{method} {url}: an answer that is not JSON") from None

    def _retrying(self, call: Callable[[], Any]) -> Any:
        """``call`` again after a lost answer, a throttle or a server error, with backoff; for requests that
        are safe to repeat only."""
        attempt = 0
        while True:
            try:
                return call()
            except (TransportError, ServerError, Throttled):
                if attempt >= self.retries:
                    raise
            delay = min(self.max_backoff, self.backoff * 2**attempt)
            self._sleep(delay * (0.5 + random.random() / 2))  # noqa: S311  jitter of a retry's wait, not a secret
            attempt += 1

    def _get_retrying(self, path: str) -> Any:
        return self._retrying(lambda: self._request("GET", path))

    @staticmethod
    def _q(value: str) -> str:
        return urllib.parse.quote(value, safe="")

    def _turn_path(self, run: str, turn: str) -> str:
        return f"/runs/{self._q(run)}/turns/{self._q(turn)}"

    # -- shipping --------------------------------------------------------------------------------------
    def acknowledged(self, run: str) -> dict[int, int]:
        """branch -> the server's ack cursor (every lsn 0..n stored), asked of the server now."""
        try:
            rows = self._retrying(lambda: self._request("GET", f"/runs/{self._q(run)}/branches"))
        except NotFound:
            return {}  # the run does not exist yet: nothing stored
        cursors = {int(row["branch"]): int(row["committed_lsn"]) for row in rows if int(row["committed_lsn"]) >= 0}
        self._acked[run] = dict(cursors)
        return cursors

    def ship(self, journal: Shippable) -> ShipResult:
        """Send the server every record of ``journal`` it has not acknowledged, in file order.

        Safe to repeat at any time, also after a crash: the server's ack cursors say where to resume, and a
        record delivered twice is stored once. Each batch carries ``LoopX-Expect`` (the cursors it is sent
        against) and ``LoopX-Fencing`` (the tokens of claimed turns it names). After a lost answer the
        cursors are asked again; a resumed delivery starts with the record at each cursor again, so that
        the server compares its bytes (``LsnConflict`` when the two journals differ, never overwritten).
        ``ShipDiverged``: the server holds records the local journal does not have."""
        result = ShipResult()
        entries = journal.entries
        local = journal.high_water()
        cursors = self._acked.get(journal.run)
        probe = cursors is None
        if cursors is None:
            cursors = self.acknowledged(journal.run)
        mismatches = failures = 0
        while True:
            for branch, lsn in cursors.items():
                if lsn > local.get(branch, -1):
                    raise ShipDiverged(branch, lsn, local.get(branch, -1))
            pending = [
                e for e in entries if e.lsn > cursors.get(e.branch, -1) or (probe and e.lsn == cursors.get(e.branch))
            ]
            if not pending:
                result.acknowledged = dict(cursors)
                self._acked[journal.run] = dict(cursors)
                return result
            batch = self._batch(pending)
            try:
                answer = self._post_batch(journal.run, batch, cursors)
            except (TransportError, ServerError, Throttled):
                # The batch may have been stored: ask where the server is, and resume from there.
                self._acked.pop(journal.run, None)
                failures += 1
                if failures > self.retries:
                    raise
                self._pause(failures)
                cursors, probe = self._acknowledged_retrying(journal.run), True
                continue
            except OffsetMismatch:
                # Another delivery moved the cursor (ours, whose answer was lost): ask again, once or twice.
                mismatches += 1
                if mismatches > 2:
                    raise
                cursors, probe = self.acknowledged(journal.run), True
                continue
            result.batches += 1
            result.stored += int(answer["stored"])
            result.duplicates += int(answer["duplicates"])
            for row in answer["branches"]:
                if int(row["committed_lsn"]) >= 0:
                    cursors[int(row["branch"])] = int(row["committed_lsn"])
            self._acked[journal.run] = dict(cursors)
            probe = False
            failures = 0

    def reclaim(self, journal: Journal, worker_id: str) -> dict[str, Claim]:
        """After a restart: claim again every turn named by a record the server has not acknowledged (the
        same ``worker_id`` gets its token back while its lease holds), so that ``ship`` can send them with
        their fencing tokens. A turn the server does not know yet is skipped (never claimed, nothing to
        fence); ``ClaimHeld`` when another worker has taken a turn over: this worker must not write it."""
        cursors = self.acknowledged(journal.run)
        turns: list[str] = []
        for entry in journal.entries:
            if entry.turn is not None and entry.lsn > cursors.get(entry.branch, -1) and entry.turn not in turns:
                turns.append(entry.turn)
        claims: dict[str, Claim] = {}
        for turn in turns:
            try:
                claims[turn] = self.claim(journal.run, turn, worker_id)
            except NotFound:
                continue
        return claims

    def _acknowledged_retrying(self, run: str) -> dict[int, int]:
        attempt = 0
        while True:
            try:
                return self.acknowledged(run)
            except (TransportError, ServerError, Throttled):
                attempt += 1
                if attempt > self.retries:
                    raise
                self._pause(attempt)

    def _pause(self, attempt: int) -> None:
        delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        self._sleep(delay * (0.5 + random.random() / 2))  # noqa: S311  jitter of a retry's wait, not a secret

    def _batch(self, pending: list[Entry]) -> list[Entry]:
        batch: list[Entry] = []
        size = 0
        for entry in pending:
            if batch and (len(batch) >= self.batch_records or size + len(entry.line) + 1 > self.batch_bytes):
                break
            batch.append(entry)
            size += len(entry.line) + 1
        return batch

    def _post_batch(self, run: str, batch: list[Entry], cursors: Mapping[int, int]) -> Any:
        branches = sorted({e.branch for e in batch})
        expect = ", ".join(f"{b}:{cursors.get(b, -1)}" for b in branches)
        headers = {"LoopX-Expect": expect}
        fencing = self.fencing_header(run, {e.turn for e in batch if e.turn is not None})
        if fencing:
            headers["LoopX-Fencing"] = fencing
        body = b"".join(e.line + b"\n" for e in batch)
        return self._request(
            "POST", f"/runs/{self._q(run)}/records", body=body, content_type="application/x-ndjson", headers=headers
        )

    def fencing_header(self, run: str, turns: set[str]) -> str:
        """``LoopX-Fencing`` for the claimed ones of ``turns`` (turn ids percent-encoded)."""
        held = sorted((turn, self._fencing[(run, turn)]) for turn in turns if (run, turn) in self._fencing)
        return ", ".join(f"{self._q(turn)}={token}" for turn, token in held)

    # -- reading back ------------------------------------------------------------------------------------
    def records(self, run: str) -> list[bytes]:
        """Every stored record of ``run`` in the order the server stored them, as canonical bytes: what a
        runtime that lost its local journal rebuilds it from. Each record's bytes are checked against the
        digest the server stored; ``RecordNotVerbatim`` when they differ (the API serves some fields
        redacted), so that nobody resumes from bytes that are not the journal's. A run not stored yet: []."""
        out: list[bytes] = []
        url: str | None = f"/runs/{self._q(run)}/records"
        while url is not None:
            try:
                page = self._get_retrying(url)
            except NotFound:
                if out:
                    raise
                return []
            for item in page["results"]:
                if digest(item["record"]) != item["digest"]:
                    raise RecordNotVerbatim(int(item["branch"]), int(item["lsn"]))
                out.append(canonical_bytes(item["record"]))
            url = page.get("next")
        return out

    def evidence(self, run: str, turn: str) -> list[dict[str, Any]]:
        """The operators' findings on the turn's intents, oldest first (``intent``, ``finding``: happened /
        not_happened, ``dispatch``: the dispatch they are about, ``actor``, ``reason``, ``created_at``). A
        runtime journals a finding as the readback it stands for. A turn not stored yet: []."""
        found: list[dict[str, Any]] = []
        url: str | None = self._turn_path(run, turn) + "/evidence"
        while url is not None:
            try:
                page = self._get_retrying(url)
            except NotFound:
                if found:
                    raise
                return []
            items = page["results"] if isinstance(page, dict) else page
            found.extend(items)
            url = page.get("next") if isinstance(page, dict) else None
        return sorted(found, key=lambda item: str(item["created_at"]))

    # -- the gate --------------------------------------------------------------------------------------
    def decision(self, run: str, turn: str, *, expect: Mapping[int, int] | None = None) -> Decision:
        """The gate's decision for the turn under the committed prefix. ``expect`` (branch -> the last lsn
        the runtime believes committed, e.g. ``journal.high_water()`` after a ship): a stored prefix that
        differs answers ``hold`` with reason ``offset_mismatch`` and ``offset_mismatch`` naming the branch."""
        path = self._turn_path(run, turn) + "/decision"
        if expect:
            text = ",".join(f"{b}:{lsn}" for b, lsn in sorted(expect.items()))
            path += "?" + urllib.parse.urlencode({"expect": text})
        body = self._retrying(lambda: self._request("GET", path))
        return Decision(
            state=body["state"],
            decision=body["decision"],
            reason=body.get("reason"),
            resume_from=body.get("resume_from"),
            planned=list(body.get("planned") or []),
            intents=list(body.get("intents") or []),
            offset_mismatch=body.get("offset_mismatch"),
            body=body,
        )

    def claim(self, run: str, turn: str, worker_id: str) -> Claim:
        """A lease on the turn and its fencing token; ``ClaimHeld`` while another worker's lease holds.
        Claiming again as the holder renews the lease and keeps the token (so this is retried)."""
        payload = json.dumps({"worker_id": worker_id}).encode()
        body = self._retrying(
            lambda: self._request(
                "POST", self._turn_path(run, turn) + "/claim", body=payload, content_type="application/json"
            )
        )
        claim = Claim(run, turn, body["worker_id"], int(body["fencing_token"]), body["expires_at"])
        self._fencing[(run, turn)] = claim.fencing_token
        return claim

    def renew(self, claim: Claim) -> Claim:
        """Renew the lease (the holder's claim again): the same token, a later ``expires_at``; ``Fenced`` or
        ``ClaimHeld`` when another worker holds it now. A lease that had run out with nobody taking the turn
        comes back as a new claim with a higher token."""
        return self.claim(claim.run, claim.turn, claim.worker_id)

    def release(self, claim: Claim) -> None:
        """End the lease. The token stays this worker's for writing until another worker claims the turn."""
        payload = json.dumps({"fencing_token": claim.fencing_token}).encode()
        self._request("POST", self._turn_path(claim.run, claim.turn) + "/release", body=payload,
                      content_type="application/json")

    def forget(self, run: str, turn: str) -> None:
        """Stop sending the turn's fencing token (its records then go without one)."""
        self._fencing.pop((run, turn), None)

    # -- recovery audits -------------------------------------------------------------------------------
    def open_recovery(self, claim: Claim) -> RecoveryAudit:
        """Open a recovery of the claimed turn: its plan is the gate's ``planned``. ``TurnBlocked``,
        ``NothingToRecover``, ``StaleToken``, ``RecoveryAttemptsExceeded`` (the gate parked the turn)."""
        payload = json.dumps({"fencing_token": claim.fencing_token}).encode()
        body = self._request(
            "POST", self._turn_path(claim.run, claim.turn) + "/recovery", body=payload, content_type="application/json"
        )
        return RecoveryAudit(int(body["id"]), claim.run, claim.turn, claim.fencing_token,
                             list(body.get("planned") or []), body)

    def report(
        self, audit: RecoveryAudit, kind: str, target: str, detail: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Report an action the recovery actually took (``kind``: ``phase``, ``intent`` or ``terminal``)."""
        payload = json.dumps(
            {"fencing_token": audit.fencing_token, "kind": kind, "target": target, "detail": dict(detail or {})}
        ).encode()
        path = self._turn_path(audit.run, audit.turn) + f"/recovery/{audit.id}/actions"
        answer: dict[str, Any] = self._request("POST", path, body=payload, content_type="application/json")
        return answer

    def close_recovery(self, audit: RecoveryAudit, note: str = "") -> dict[str, Any]:
        """Close the audit: planned actions never reported become ``planned_action_missing`` divergences."""
        payload = json.dumps({"fencing_token": audit.fencing_token, "note": note}).encode()
        path = self._turn_path(audit.run, audit.turn) + f"/recovery/{audit.id}/close"
        answer: dict[str, Any] = self._request("POST", path, body=payload, content_type="application/json")
        return answer


__all__ = ["ApiError", "Claim", "Decision", "Gate", "RecoveryAudit", "Shippable", "ShipResult"]
