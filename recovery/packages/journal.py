"""The narrow journal check of docs/packages.md: ``journal_invalid`` only when the journal is not UTF-8,
holds no complete record, or a record names another run than the manifest.

Everything else (a torn tail, contract violations) is evidence for the assessment after import, not a reason
to refuse. The check is fed the journal's bytes as they are read, once, and holds at most one line.
"""

from __future__ import annotations

import codecs
import json
from typing import Any

from engine.canonical import parse_line


class JournalCheck:
    def __init__(self, max_line_bytes: int) -> None:
        self._max_line = max_line_bytes
        self._partial = bytearray()
        self._overlong: codecs.IncrementalDecoder | None = None  # set while inside a line too long to keep
        self.utf8 = True
        self.complete = 0
        self.overlong_lines = 0
        self._runs: set[tuple[str, str]] = set()  # at most two distinct values: two already prove a mismatch

    def feed(self, chunk: bytes) -> None:
        parts = chunk.split(b"\n")
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            if last:
                self._append(part)
            elif index == 0 and (self._partial or self._overlong is not None):
                self._append(part)
                self._end_line()
            else:
                self._line(part)

    def finish(self) -> None:
        """The last line counts even without a final newline."""
        if self._partial or self._overlong is not None:
            self._end_line()

    def _append(self, piece: bytes) -> None:
        if self._overlong is not None:
            self._decode_overlong(piece, final=False)
            return
        self._partial += piece
        if len(self._partial) > self._max_line:
            # Too long to parse within bounded memory: still check its UTF-8, then drop the bytes.
            self._overlong = codecs.getincrementaldecoder("utf-8")("strict")
            data = bytes(self._partial)
            self._partial.clear()
            self._decode_overlong(data, final=False)

    def _decode_overlong(self, piece: bytes, final: bool) -> None:
        assert self._overlong is not None
        try:
            self._overlong.decode(piece, final)
        except UnicodeDecodeError:
            self.utf8 = False
            self._overlong.reset()

    def _end_line(self) -> None:
        if self._overlong is not None:
            self._decode_overlong(b"", final=True)
            self._overlong = None
            self.overlong_lines += 1
            return
        line = bytes(self._partial)
        self._partial.clear()
        self._line(line)

    def _line(self, line: bytes) -> None:
        if len(line) > self._max_line:
            self._append(line)  # takes the overlong path
            self._end_line()
            return
        if not line:
            return
        parsed = parse_line(line)
        if parsed.obj is not None:
            self.complete += 1
            if "run" in parsed.obj and len(self._runs) < 2:
                self._runs.add(_run_key(parsed.obj["run"]))
            return
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            self.utf8 = False

    def problems(self, manifest_run: str | None) -> list[str]:
        out: list[str] = []
        if not self.utf8:
            out.append("the journal is not valid UTF-8")
        if self.overlong_lines:
            out.append(f"{self.overlong_lines} line(s) over {self._max_line} bytes, which cannot be verified")
        if self.complete == 0:
            out.append("the journal holds no complete record")
        if manifest_run is not None and any(key != ("str", manifest_run) for key in self._runs):
            out.append("a record names another run than the manifest")
        return out


def _run_key(value: Any) -> tuple[str, str]:
    if isinstance(value, str):
        return ("str", value)
    try:
        return ("json", json.dumps(value, sort_keys=True))
    except (TypeError, ValueError):
        return ("json", repr(value))
