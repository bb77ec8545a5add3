"""Every refusal code the server can answer has its typed error in the client, under its status."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from loopx_client import errors

ROOT = Path(__file__).resolve().parents[2]
# A service refusal: `SomeError(409, "code", ...)`; a view's own answer: `{"error": "code", ...}, status=...`.
_RAISED = re.compile(r"Error\(\s*(\d{3}),\s*\"([a-z_]+)\"")
_ANSWERED = re.compile(r"Response\(\s*\{\"error\": \"([a-z_]+)\"")


def server_codes() -> dict[str, int]:
    codes: dict[str, int] = {}
    for package in ("journals", "trail", "recovery", "audits", "loopx_site", "notifications"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            for status, code in _RAISED.findall(text):
                codes[code] = int(status)
            for code in _ANSWERED.findall(text):
                codes.setdefault(code, 0)
    codes["invalid_request"] = 400  # journals/api.py: a body that fails validation
    return codes


def test_every_code_the_server_raises_has_its_class_with_its_status():
    codes = server_codes()
    assert {"fenced", "fencing_required", "offset_mismatch", "lsn_conflict", "claim_held"} <= codes.keys()
    missing = sorted(set(codes) - set(errors.BY_CODE))
    assert not missing, f"codes without a typed error in loopx_client.errors: {missing}"
    for code, status in codes.items():
        cls = errors.BY_CODE[code]
        if status:
            assert cls.status_family == status, (code, status, cls)
        error = errors.error_for(cls.status_family, {"error": code, "detail": "d", "line": 3})
        assert type(error) is cls and error.code == code and error.line == 3


@pytest.mark.parametrize(
    ("status", "body", "cls", "code"),
    [
        (401, {"detail": "Authentication credentials were not provided."}, errors.Unauthorized, "not_authenticated"),
        (403, {"detail": "You do not have permission."}, errors.PermissionDenied, "permission_denied"),
        (404, {"detail": "No such run."}, errors.NotFound, "not_found"),
        (415, {"detail": "Unsupported media type"}, errors.UnsupportedMediaType, "unsupported_media_type"),
        (429, {"detail": "Request was throttled."}, errors.Throttled, "throttled"),
        (502, "not json", errors.ServerError, "server_error"),
        (409, {"error": "a_code_from_a_newer_server", "detail": "x"}, errors.Conflict, "a_code_from_a_newer_server"),
    ],
)
def test_answers_without_a_known_code_get_their_status_family(status, body, cls, code):
    error = errors.error_for(status, body)
    assert type(error) is cls and error.code == code and error.status == status
