"""The journal API's JSON renderer: DRF's JSON, written by orjson.

Every read renders a page of up to 50 turns, and the standard library's encoder is slow at it
(benchmarks/bench_reads.py). The bytes are the ones DRF's ``JSONRenderer`` writes (compact, UTF-8,
U+2028/U+2029 escaped, datetimes as DRF formats them); anything orjson does not take as is (an indented
answer, an integer beyond 64 bits in a stored record) goes through DRF's renderer unchanged.
"""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework.renderers import JSONRenderer

# Datetimes, dates and times go to DRF's encoder (its format, 'Z' for UTC); int keys become strings as
# the standard library writes them.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS


class FastJSONRenderer(JSONRenderer):
    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if data is None:
            return b""
        # The stubs want a str; DRF passes the negotiated type or None, and get_indent handles None.
        if self.get_indent(accepted_media_type, renderer_context or {}) is not None:  # type: ignore[arg-type]
            return super().render(data, accepted_media_type, renderer_context)
        try:
            out = orjson.dumps(data, default=self.encoder_class().default, option=_OPTIONS)
        except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
            return super().render(data, accepted_media_type, renderer_context)
        if b"\xe2\x80\xa8" in out or b"\xe2\x80\xa9" in out:
            # As DRF: JSON that is also a strict JavaScript subset.
            out = out.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        return out
