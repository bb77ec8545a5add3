"""Small presentation helpers: decision badges with icon and word, URLs that keep the filter, local times."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import template
from django.http import QueryDict
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from console import rows, vocabulary, words
from console.changes import field_changes
from console.selectors import STATE_LABELS
from recovery.packages.report import remedy

register = template.Library()
register.filter("stated_time", words.stated_time)
register.filter("redacted_json", words.redacted_json)
register.filter("code_words", words.code_words)


@register.simple_tag
def decision_badge(decision: str | None, reason: str | None = None) -> str:
    """Colour plus a glyph plus the word, never colour alone; a blocked one's reason in words and code (the
    same markup the list rows use)."""
    return rows.badge(decision, reason)


@register.simple_tag
def run_status_badge(status: str) -> str:
    """A run's status badge (journals.models.RunStatus), the same markup on every page."""
    return rows.run_status_badge(status)


@register.filter
def run_status_words(status: str) -> str:
    """What a run's status means for the run (console.vocabulary.RUN_STATUSES)."""
    return vocabulary.RUN_STATUSES.get(status, "")


@register.simple_tag
def state_key_badge(key: str) -> str:
    """A state's badge by its key (a count's chip), the same markup the list rows use."""
    return rows.state_key_badge(key)


@register.simple_tag
def state_badge(state: Any) -> str:
    """The effective state's badge (recovery.state.StateValue), the same markup the list rows use."""
    return rows.state_badge(state)


@register.filter
def state_label(state: Any) -> str:
    return rows.state_label(state)


@register.filter
def state_name(key: str | None) -> str:
    """The words of a state's key ("held_effect" -> "held: effect unconfirmed")."""
    return STATE_LABELS.get(key or "unassessed", (key or "").replace("_", " "))


@register.filter
def state_words(state: Any) -> str:
    if state is None:
        return vocabulary.state_words(None)
    return vocabulary.state_words(str(state.state), state.reason)


@register.filter
def reason_words(code: str | None) -> str:
    return vocabulary.reason_words(code)


@register.filter
def resolution_words(resolution: str | None) -> str:
    return vocabulary.RESOLUTIONS.get(resolution or "", "")


@register.filter
def spaced(code: str | None) -> str:
    return (code or "").replace("_", " ")


@register.simple_tag(takes_context=True)
def url_with(context: dict[str, Any], **changes: Any) -> str:
    """The current query string with some parameters changed (None or "" drops one): shareable filters."""
    params: QueryDict = context["request"].GET.copy()
    for key, value in changes.items():
        if value in (None, ""):
            params.pop(key, None)
        else:
            params[key] = str(value)
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.simple_tag
def query_string(params: dict[str, Any]) -> str:
    return urlencode({k: v for k, v in params.items() if v not in (None, "")})


@register.filter
def pct(share: float) -> str:
    return f"{max(0.0, min(1.0, float(share))) * 100:.1f}"


@register.simple_tag
def select_field(bound: Any) -> str:
    """A labelled <select> for a filter: the same markup as the form widget, without its template
    rendering: a list page has a dozen of them, and each widget renders its own templates."""
    value = bound.value()
    current = "" if value in (None, "") else str(value)
    options = format_html_join(
        "",
        '<option value="{}"{}>{}</option>',
        ((str(v), mark_safe(" selected") if str(v) == current else "", label) for v, label in bound.field.choices),
    )
    return format_html(
        '<div class="field"><label for="{id}">{label}</label><select name="{name}" id="{id}">{options}</select></div>',
        id=bound.id_for_label,
        label=bound.label,
        name=bound.html_name,
        options=options,
    )


@register.filter
def changes(action: Any) -> list[Any]:
    """An operator action's changed fields (console.changes): what its before and after differ in."""
    return field_changes(getattr(action, "before", None), getattr(action, "after", None))


@register.filter
def code_label(code: str | None) -> str:
    """Plain words with the code in brackets, where no markup may go (a select's option)."""
    if not code:
        return ""
    words = vocabulary.words_for(code)
    return code if words == code else f"{words} ({code})"


@register.filter
def package_remedy(code: str | None) -> str:
    """What the maker of a refused package can do about a finding."""
    return remedy(code or "")
