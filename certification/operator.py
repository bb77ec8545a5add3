"""The rig's operator: a person signed in to the console, deciding through the same services the console's
pages call (`turn_approve`, `turns_bulk_decide`), over the session-authenticated API with its CSRF token.

A runtime token may never approve; this is a user of the operator group, with a password, a session and
the team that sees every run, as a person at the console would be.
"""

from __future__ import annotations

import http.client
import http.cookiejar
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any


class Refused(Exception):
    """The service refused the decision: ``status`` and the API's ``code``."""

    def __init__(self, status: int, code: str, detail: str, *, repeated: bool = False) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.repeated = repeated  # an earlier attempt got no answer and may have been carried out


@dataclass
class BulkAnswer:
    done: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)  # turn -> the refusal's code


class ConsoleOperator:
    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base = base_url.rstrip("/")
        self.username = username
        self.password = password
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))
        self._signed_in = False

    def _csrf(self) -> str:
        return next((c.value or "" for c in self.cookies if c.name == "csrftoken"), "")

    def _open(self, request: urllib.request.Request) -> tuple[int, bytes, bool]:
        """One request; a web restart in progress is waited out. Returns (status, body, repeated): repeated
        when an earlier attempt got no answer, so that it may have been carried out (another seed's kill
        took the whole web down in the middle of it)."""
        repeated = False
        for attempt in range(40):
            try:
                with self.opener.open(request, timeout=60) as response:
                    return int(response.status), response.read(), repeated
            except urllib.error.HTTPError as error:
                return int(error.code), error.read(), repeated
            except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
                if attempt == 39:
                    raise
                reason = getattr(error, "reason", error)
                repeated = repeated or not isinstance(reason, ConnectionRefusedError)
                time.sleep(0.25)
        raise AssertionError("unreachable")

    def sign_in(self) -> None:
        status, page, _ = self._open(urllib.request.Request(f"{self.base}/accounts/login/"))
        match = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        if status != 200 or match is None:
            raise RuntimeError(f"the sign-in page answered {status}")
        form = urllib.parse.urlencode(
            {"username": self.username, "password": self.password, "csrfmiddlewaretoken": match.group(1).decode()}
        ).encode()
        request = urllib.request.Request(f"{self.base}/accounts/login/", data=form, method="POST")
        request.add_header("Referer", f"{self.base}/accounts/login/")
        status, _, _ = self._open(request)
        if not any(c.name == "sessionid" for c in self.cookies):
            raise RuntimeError(f"sign-in as {self.username} failed ({status})")
        self._signed_in = True

    def _post(self, path: str, payload: dict[str, Any]) -> Any:
        if not self._signed_in:
            self.sign_in()
        request = urllib.request.Request(f"{self.base}/api/v1{path}", data=json.dumps(payload).encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json")
        request.add_header("X-CSRFToken", self._csrf())
        request.add_header("Referer", f"{self.base}/")
        status, body, repeated = self._open(request)
        data = json.loads(body) if body else {}
        if status >= 400:
            raise Refused(status, str(data.get("error", "")), str(data.get("detail", "")), repeated=repeated)
        return data

    @staticmethod
    def _turn(run: str, turn: str) -> str:
        return f"/runs/{urllib.parse.quote(run, safe='')}/turns/{urllib.parse.quote(turn, safe='')}"

    def approve(
        self, *, run: str, turn: str, reason: str, evidence: dict[str, str], patience: float = 30.0
    ) -> dict[str, Any]:
        """``turn_approve`` with the operator's findings (intent -> happened / not_happened). An approval whose
        answer was lost and that the repeat finds done (``nothing_to_approve``) was the first attempt's. A
        "not happened" refused while a (dead or stalled) worker's lease still holds (``claim_live``) is given
        again once the lease may have run out, as a careful operator waits, for at most ``patience`` s."""
        deadline = time.monotonic() + patience
        while True:
            try:
                answer: dict[str, Any] = self._post(
                    f"{self._turn(run, turn)}/approve", {"reason": reason, "evidence": evidence}
                )
            except Refused as refused:
                if refused.repeated and refused.code == "nothing_to_approve":
                    return {}
                if refused.code == "claim_live" and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise
            return answer

    def bulk(self, *, run: str, action: str, reason: str) -> BulkAnswer:
        """``turns_bulk_decide`` over the run's held turns, as the console's bulk page does."""
        data = self._post("/turns/bulk", {"action": action, "reason": reason, "filter": {"run": run, "state": "held"}})
        return BulkAnswer(
            done=[row["turn"] for row in data["done"]], left={row["turn"]: row["error"] for row in data["left"]}
        )
