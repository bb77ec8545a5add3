"""The turn page's note on where each imported intent's class came from (one line in its template:
``{% load import_tags %}{% intent_class_sources turn %}``); nothing for a turn that was not imported."""

from __future__ import annotations

from typing import Any

from django import template

from recovery.imports.selectors import turn_import_note

register = template.Library()


@register.inclusion_tag("console/_intent_class_source.html", takes_context=True)
def intent_class_sources(context: dict[str, Any], turn: Any) -> dict[str, Any]:
    return {
        "note": turn_import_note(turn=turn),
        "can_operate": context.get("can_operate", False),
        "csrf_token": context.get("csrf_token"),
    }
