"""The one error type services raise for a refused request; views turn it into a typed JSON answer."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """A request the service refuses, with an HTTP status, a stable code and a one-line detail.

    ``detail`` never quotes record bytes, tokens or secret fields (contract section 8).
    """

    def __init__(self, status: int, code: str, detail: str, line: int | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.line = line
        self.extra = extra

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.code, "detail": self.detail, "line": self.line, **self.extra}
