"""Structured JSON logs with secrets scrubbed.

One JSON object per line on stderr: ``time``, ``level``, ``logger``, ``message`` (and ``event`` when the
caller names one), ``run``, ``turn``, ``request_id``, ``task_id``, any other ``extra`` fields, and ``exc``
for a traceback. settings.LOGGING installs :class:`JsonFormatter` with :class:`RedactingFilter` on the
console handler, so every logger that propagates to the root (Django's, Celery's, ours) is covered.

Redaction (docs/contract.md section 8 applies to log lines too):

- an ``extra`` field whose name is secret (``is_secret_field``: token, password, ``*_key``...) is replaced
  by ``"[redacted]"``; dict and list values are redacted at any depth with the engine's ``redact``;
- text (the message, string extras, tracebacks) is scrubbed of ``Authorization``/``Bearer`` values,
  anything shaped like an API token (``lxr_...``), and ``name=value`` / ``"name": "value"`` pairs whose
  name is secret.

The formatter scrubs again on its own, so a handler that forgot the filter still never prints a token.
"""

from __future__ import annotations

import json
import logging
import re
import traceback
from datetime import UTC, datetime
from typing import Any

from engine.secrets import REDACTED, is_secret_field, redact
from kernel import context

# The store's token format (journals.services.TOKEN_PREFIX + token_urlsafe): matched wherever it appears.
_API_TOKEN_RE = re.compile(r"lxr_[A-Za-z0-9_\-]{8,}")
_BEARER_RE = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{6,}")
_AUTH_HEADER_RE = re.compile(r"(?i)((?:http_)?authorization['\"]?\s*[:=]\s*)(['\"]?)[^'\"\n,}]*\2")
# name=value, name: value, "name": "value", 'name': 'value' where the name is secret (checked in _sub_pair).
# A quote may be escaped (JSON inside a JSON string, a repr of it): `\"token\": \"...\"` is a pair too.
# The value sits in a lookahead so that a non-secret pair never swallows a secret one after it
# ("loaded: secret=..."): only name and separator are consumed, _scrub_pairs skips past redacted values.
_PAIR_RE = re.compile(
    r"""(?P<q>\\*["']|)(?P<name>[A-Za-z][A-Za-z0-9_\-]*)(?P=q)(?P<sep>\s*[:=]\s*)"""
    r"""(?=(?P<value>\\+(?P<eq>["']).*?\\+(?P=eq)|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;&}\])]+))"""
)
_QUOTE_RE = re.compile(r"""^\\*["']""")

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_CONTEXT_FIELDS = ("run", "turn", "request_id", "task_id")


def _scrub_pairs(text: str) -> str:
    out: list[str] = []
    pos = 0
    for match in _PAIR_RE.finditer(text):
        if match.start() < pos:
            continue  # inside a value already redacted
        value = match.group("value")
        if not is_secret_field(match.group("name").replace("-", "_")) or value.lstrip("\\\"'").startswith("[redacted"):
            continue  # not a secret name, or already redacted by an earlier rule
        opening = _QUOTE_RE.match(value)
        quote = opening.group(0) if opening else ""
        out.append(text[pos : match.end()])
        out.append(f"{quote}{REDACTED}{quote}")
        pos = match.end() + len(value)
    out.append(text[pos:])
    return "".join(out)


# SQL debug lines (django.db.backends) inline every parameter, and a parameter's column name is not next
# to its value: a secret there cannot be recognised by name. Those lines keep the statement's shape and
# timing, with every string literal replaced.
_SQL_LITERAL_RE = re.compile(r"(?:[EeBbXx])?'(?:[^']|'')*'")


def sql_shape(sql: str) -> str:
    return _SQL_LITERAL_RE.sub("'?'", sql)


def scrub(text: str) -> str:
    """Text with every token-like value and secret-named pair replaced by ``[redacted]``."""
    if not text:
        return text
    text = _AUTH_HEADER_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}{m.group(2)}", text)
    text = _BEARER_RE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _API_TOKEN_RE.sub(REDACTED, text)
    return _scrub_pairs(text)


def scrub_value(value: Any) -> Any:
    """A JSON-ready copy of an ``extra`` value: secret fields redacted at any depth, strings scrubbed."""
    if isinstance(value, dict):
        return {str(k): scrub_value(v) for k, v in redact(value).items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [scrub_value(v) for v in redact(list(value))]
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, bytes):
        # Bytes in a log line are never quoted (they may be an unparsable record line).
        return f"<{len(value)} bytes>"
    return scrub(str(value))


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


class RedactingFilter(logging.Filter):
    """Rewrites a record in place so that no handler downstream can print a secret. Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        sql = getattr(record, "sql", None)
        if record.name.startswith("django.db.backends") and isinstance(sql, str):
            shape = sql_shape(sql)
            record.sql = shape
            record.params = "[omitted]"
            duration = getattr(record, "duration", None)
            record.msg = f"({duration:.3f}) {shape}" if isinstance(duration, float) else shape
            record.args = None
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not lose the line: keep the template alone
            message = str(record.msg)
        record.msg = scrub(message)
        record.args = None
        for key, value in _extras(record).items():
            if is_secret_field(key):
                setattr(record, key, REDACTED)
            elif isinstance(value, str | dict | list | tuple | bytes):
                setattr(record, key, scrub_value(value))
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line. Context (run, turn, request id, task id) comes from ``extra`` or, when
    absent there, from :mod:`kernel.context`."""

    def format(self, record: logging.LogRecord) -> str:
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": scrub(message),
        }
        ctx = context.current()
        extras = _extras(record)
        request = extras.pop("request", None)
        if request is not None:
            # django.request / django.server pass the HttpRequest (or a socket): log what it was, not its
            # repr, and take its request id (those lines are written after the middleware has returned).
            if extras.get("request_id") is None and getattr(request, "request_id", None):
                extras["request_id"] = request.request_id
            method, path = getattr(request, "method", None), getattr(request, "path", None)
            if isinstance(path, str):
                extras.setdefault("method", method)
                extras.setdefault("path", path)
        for name in _CONTEXT_FIELDS:
            value = extras.pop(name, None)
            out[name] = scrub_value(value if value is not None else ctx[name])
        for key, value in extras.items():
            out[key] = REDACTED if is_secret_field(key) else scrub_value(value)
        exc_text = record.exc_text
        if record.exc_info and not exc_text:
            exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if exc_text:
            out["exc"] = scrub(exc_text)
        if record.stack_info:
            out["stack"] = scrub(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str, separators=(",", ":"))
