"""An imported run's words in the console's templates: the turn page's note on where each imported intent's
class came from (``{% load import_tags %}{% intent_class_sources turn %}``; nothing for a turn that was not
imported), and an intent's name in the source's words (``{{ intent_id|intent_label:words }}``)."""

from __future__ import annotations

from typing import Any

from django import template

from recovery.imports.selectors import SourceWords, TurnWords, turn_import_note

register = template.Library()


@register.inclusion_tag("console/_intent_class_source.html", takes_context=True)
def intent_class_sources(context: Any, turn: Any) -> dict[str, Any]:
    # The page read the turn's source words already (console.views.turn_detail): the note is made from them.
    words = context.get("words") if "words" in context else None
    note = turn_import_note(turn=turn, words=words) if words is not None or "words" not in context else None
    return {
        "note": note,
        "words": words,
        "can_operate": context.get("can_operate", False),
        "csrf_token": context.get("csrf_token"),
    }


@register.filter
def intent_label(intent: str, words: SourceWords | None) -> str:
    """``ChargeCard (activity:1)`` for an imported run's intent, the intent's id otherwise."""
    return words.intent_label(intent) if isinstance(words, SourceWords) else intent


@register.filter
def turn_name(turn: str, words: SourceWords | None) -> str:
    """The turn's name in its source's words (an imported run's), else ""."""
    return words.turn_name(turn) if isinstance(words, SourceWords) else ""


@register.filter
def turn_words(words: SourceWords | None, turn: str) -> TurnWords | None:
    """The turn's name and source ids (an imported run's), else None."""
    return words.turns.get(turn) if isinstance(words, SourceWords) else None
