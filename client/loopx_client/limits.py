"""The server's ingest limits, which the client keeps to so that nothing it writes is refused for its size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limits:
    """What the server accepts (``GET /api/v1/limits``): a record's line (``max_line_bytes``, without its
    newline), a batch (``max_batch_bytes``, newlines included; ``max_batch_records``), and the claim
    lease it grants (``claim_lease_seconds``)."""

    max_line_bytes: int = 262144
    max_batch_bytes: int = 8388608
    max_batch_records: int = 10000
    claim_lease_seconds: float = 300.0

    @classmethod
    def from_answer(cls, body: Any) -> Limits:
        """The limits of a ``/limits`` answer; a field missing or not a positive number keeps its default."""
        data = body if isinstance(body, dict) else {}
        defaults = cls()

        def positive(name: str, default: float) -> Any:
            value = data.get(name)
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
            return value if ok else default

        return cls(
            max_line_bytes=int(positive("max_line_bytes", defaults.max_line_bytes)),
            max_batch_bytes=int(positive("max_batch_bytes", defaults.max_batch_bytes)),
            max_batch_records=int(positive("max_batch_records", defaults.max_batch_records)),
            claim_lease_seconds=float(positive("claim_lease_seconds", defaults.claim_lease_seconds)),
        )


# The server's documented defaults: what a journal with no gate keeps to.
DEFAULT_LIMITS = Limits()
