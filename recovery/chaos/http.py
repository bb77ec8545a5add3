"""The runtime's gateway over HTTP: the store's ingest API and recovery gate on a live server.

Standard library only (urllib), so the runtime child process starts fast and imports no Django. The
operator's side (`approve`) is the service call the console makes (`recovery.services.turn_approve`),
run in a short Django process against the server's database (recovery/chaos/operator.py): a runtime token
may never approve, by design of the API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from engine import canonical_bytes, digest

from .store import EvidenceRow, GateAnswer


class HttpError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


class HttpGateway:
    def __init__(self, base_url: str, token: str, run: str, *, operator_env: dict[str, str] | None = None) -> None:
        self.base = base_url.rstrip("/") + "/api/v1"
        self.token = token
        self.run = run
        self.operator_env = operator_env
        self._run_path = f"/runs/{urllib.parse.quote(run, safe='')}"
        # The fencing tokens of the turns this runtime claimed: a claimed turn takes records only from a
        # batch that carries its current token (LoopX-Fencing, docs/api.md).
        self.fencing: dict[str, int] = {}

    def _call(
        self, method: str, path: str, body: bytes | None = None, ctype: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        url = path if path.startswith("http") else self.base + path
        request = urllib.request.Request(url, data=body, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if ctype:
            request.add_header("Content-Type", ctype)
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise HttpError(error.code, error.read().decode("utf-8", "replace")) from None

    def _turn(self, turn: str) -> str:
        return f"{self._run_path}/turns/{urllib.parse.quote(turn, safe='')}"

    # -- ingest --------------------------------------------------------------------------------------
    def ingest(self, lines: list[bytes]) -> None:
        turns = {json.loads(line).get("turn") for line in lines}
        held = sorted((t, self.fencing[t]) for t in turns if isinstance(t, str) and t in self.fencing)
        headers = {"LoopX-Fencing": ", ".join(f"{urllib.parse.quote(t, safe='')}={n}" for t, n in held)} if held else {}
        self._call(
            "POST", f"{self._run_path}/records", b"".join(x + b"\n" for x in lines), "application/x-ndjson", headers
        )

    def lines(self) -> list[bytes]:
        """The stored records, in ingest order. The API serves them parsed (redacted for display): the
        runtime writes canonical bytes, so the canonical form must give back the stored digest; when it does
        not (a redacted field), fail closed rather than resume from bytes that are not the journal's."""
        out: list[bytes] = []
        url: str | None = f"{self._run_path}/records"
        while url is not None:
            try:
                page = self._call("GET", url)
            except HttpError as error:
                if error.status == 404 and not out:
                    return []  # the run does not exist yet
                raise
            for item in page["results"]:
                line = canonical_bytes(item["record"])
                if digest(item["record"]) != item["digest"]:
                    raise RuntimeError(f"record {item['branch']}:{item['lsn']} is not served byte-identical")
                out.append(line)
            url = page.get("next")
        return out

    # -- the gate ------------------------------------------------------------------------------------
    def decision(self, turn: str) -> GateAnswer | None:
        try:
            body = self._call("GET", f"{self._turn(turn)}/decision")
        except HttpError as error:
            if error.status == 404:
                return None
            raise
        return GateAnswer(body["state"], body["engine"]["decision"], body["reason"] or body["engine"]["reason"])

    def claim(self, turn: str, worker: str) -> int:
        body = self._call(
            "POST", f"{self._turn(turn)}/claim", json.dumps({"worker_id": worker}).encode(), "application/json"
        )
        self.fencing[turn] = int(body["fencing_token"])
        return self.fencing[turn]

    def evidence_rows(self, turn: str | None = None) -> list[EvidenceRow]:
        turns = [turn] if turn is not None else self._turns()
        rows: list[EvidenceRow] = []
        for t in turns:
            url: str | None = f"{self._turn(t)}/evidence"
            found: list[dict[str, Any]] = []
            while url is not None:
                try:
                    page = self._call("GET", url)
                except HttpError as error:
                    if error.status == 404:
                        break  # the turn is not stored yet: no evidence for it
                    raise
                items = page["results"] if isinstance(page, dict) else page
                found.extend(items)
                url = page.get("next") if isinstance(page, dict) else None
            # The API lists the newest first; the one in force is the latest. Its identity for citing is its
            # time and content (the API does not expose a row id).
            for item in sorted(found, key=lambda i: i["created_at"]):
                rid = f"{item['created_at']}/{item['intent']}/{item['finding']}"
                rows.append(EvidenceRow(rid, t, item["intent"], item["finding"], item["actor"], item["reason"]))
        return rows

    def _turns(self) -> list[str]:
        seen: list[str] = []
        for line in self.lines():
            record = json.loads(line)
            if record["kind"] == "turn_planned" and record["turn"] not in seen:
                seen.append(record["turn"])
        return seen

    # -- the operator --------------------------------------------------------------------------------
    def approve(self, *, turn: str, actor: str, reason: str, evidence: dict[str, str]) -> None:
        if self.operator_env is None:
            raise RuntimeError("this gateway has no operator: pass operator_env (the server's settings)")
        args = [sys.executable, "-m", "recovery.chaos.operator", "--run", self.run, "--turn", turn,
                "--actor", actor, "--reason", reason]
        for intent, finding in sorted(evidence.items()):
            args += ["--evidence", f"{intent}={finding}"]
        proc = subprocess.run(
            args, env=self.operator_env, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
            timeout=120, check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"turn_approve refused: {(proc.stdout + proc.stderr).strip()[-400:]}")


def gateway_from_env(run: str) -> HttpGateway:
    """The runtime's HTTP gateway: LOOPX_CHAOS_URL and LOOPX_CHAOS_TOKEN (a token never goes on argv)."""
    return HttpGateway(os.environ["LOOPX_CHAOS_URL"], os.environ["LOOPX_CHAOS_TOKEN"], run)
