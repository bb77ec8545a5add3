"""Words the console shows for codes, record times and record fields: plain functions that the row builders
(console/rows.py) call and the templates' filters (console/templatetags/console_tags.py) register."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html

from console import vocabulary
from engine import redact


def stated_time(value: str | None) -> str:
    """A record's RFC 3339 `at` shown in the operator's zone; as written when it does not parse."""
    if not value:
        return ""
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        return value
    if timezone.is_naive(parsed):
        return value
    return date_format(timezone.localtime(parsed), "Y-m-d H:i:s T")


def redacted_json(value: Any) -> str:
    """JSON for display, secret fields replaced (contract section 8), whatever the source."""
    return json.dumps(redact(value), indent=1, sort_keys=True, ensure_ascii=False, default=str)


def code_words(code: str | None) -> str:
    """Plain words with the code beside it: "hash chain broken (chain_broken)"."""
    if not code:
        return ""
    words = vocabulary.words_for(code)
    if words == code:
        return format_html('<code class="code">{}</code>', code)
    return format_html('{} <code class="code">{}</code>', words, code)
