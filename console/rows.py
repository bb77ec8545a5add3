"""The rows of the console's long lists, composed in Python: the turns list, the held queue, a run's grid
of turns by phase and its event history.

A list page renders 25-100 rows, each with links, a badge, the operator decision and a small decision form;
Django's template engine spends most of such a page's time on exactly that loop (docs/perf keeps the
measurements), so these rows stay here. Every piece of markup goes through ``format_html`` (each value
escaped, quotes included: what the template's autoescape does), every attribute value is double-quoted, a pk
is ``int()``-ed, URLs come from ``console.links.url_former`` (what ``reverse()`` answers) and query strings
from ``urlencode``. Only fixed markup with no value in it is marked safe as it is.
tests/console/test_hostile_values.py renders hostile values through every function here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple
from urllib.parse import urlencode

from django.core.exceptions import ObjectDoesNotExist
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from recovery.assignments.services import assigned_to
from recovery.state import state_of

from . import vocabulary
from .links import UrlFormer, url_former
from .templatetags.console_tags import code_words, redacted_json, stated_time


def short(text: str | None, n: int) -> str:
    text = text or ""
    return text if len(text) <= n else text[: n - 1] + "…"


def reason_html(code: str) -> SafeString:
    """A held turn's reason: its words, with the code beside them (what a person reads, what a log says)."""
    return format_html(
        '<span class="reason-words">{}</span> <code class="reason">{}</code>', vocabulary.words_for(code), code
    )


def badge(decision: str | None, reason: str | None = None) -> SafeString:
    key = decision or "unassessed"
    html = format_html(
        '<span class="badge badge-{}"><span aria-hidden="true">{}</span> {}</span>',
        key,
        vocabulary.DECISION_ICONS.get(key, "…"),
        decision or "not assessed",
    )
    if reason and key == "blocked":
        return format_html("{} {}", html, reason_html(reason))
    return html


def state_label(state: Any) -> str:
    """The words of an effective state (recovery.state.StateValue, or None before the first assessment),
    with who decided when an operator did: "approved by olivia", "blocked by olivia"."""
    if state is None:
        return "not yet assessed"
    key = str(state.state)
    if key in ("approved", "blocked_operator") and state.actor_name:
        return ("approved by " if key == "approved" else "blocked by ") + str(state.actor_name)
    return str(state.label)


def state_badge(state: Any) -> SafeString:
    """Colour plus a glyph plus the words, never colour alone; a held state's reason code beside it."""
    key = str(state.state) if state is not None else "unassessed"
    html = format_html(
        '<span class="badge badge-{}" data-state="{}"><span aria-hidden="true">{}</span> {}</span>',
        key,
        key,
        vocabulary.STATE_ICONS.get(key, "…"),
        state_label(state),
    )
    if state is not None and state.gate == "hold" and state.reason:
        return format_html("{} {}", html, reason_html(str(state.reason)))
    return html


_NONE = mark_safe('<span class="muted">—</span>')  # fixed markup, no value in it


def local_time(value: datetime, with_year: bool = True) -> tuple[str, str]:
    """(ISO 8601, "Y-m-d H:i T" or "m-d H:i T") in the operator's zone: what the template's ``date`` filter
    shows, where "T" is the zone's abbreviation (tzname), without Django's date-format machinery."""
    local = timezone.localtime(value)
    shown = local.strftime("%Y-%m-%d %H:%M" if with_year else "%m-%d %H:%M")
    return local.isoformat(), f"{shown} {local.tzname() or ''}"


def _time(value: datetime, with_year: bool = True) -> SafeString:
    iso, shown = local_time(value, with_year)
    return format_html('<time datetime="{}">{}</time>', iso, shown)


def _state(t: Any) -> Any:
    """The row's effective state (recovery.state.StateValue), read from the joined TurnEffective."""
    try:
        effective = t.effective
    except ObjectDoesNotExist:
        return None
    return state_of(effective)


def _next_step(state: Any) -> SafeString | str:
    if state is None:
        return _NONE
    key = str(state.state)
    if key == "resuming" or (key == "approved" and state.resume_from):
        return format_html("from <strong>{}</strong>", state.resume_from or "")
    return vocabulary.NEXT_STEPS.get(key) or _NONE


def _decided(state: Any) -> SafeString:
    """Who decided on top of the engine, and when: the operator column."""
    if state is None or not state.actor_name or state.decided_at is None:
        return _NONE
    verb = {"approved": "approved", "blocked_operator": "blocked", "parked": "parked"}.get(str(state.state))
    if verb is None:
        return _NONE
    return format_html(
        '<span class="small">{} by {}<br>{}</span>', verb, short(state.actor_name, 24), _time(state.decided_at)
    )


def _assignee(t: Any) -> SafeString:
    """The "Assigned to" cell: the turn's reviewer (recovery.assignment.assigned_to), not a worker's claim."""
    name = assigned_to(t)
    return format_html('<span class="small assignee">{}</span>', short(name, 24)) if name else _NONE


class _DecideForm(NamedTuple):
    """What every row's decision form shares on a page: its URLs' formers and its hidden fields."""

    turn: UrlFormer
    approve: UrlFormer
    block: UrlFormer
    hidden: SafeString


def turn_rows(rows: list[Any], *, full_path: str, can_operate: bool, csrf_token: str) -> SafeString:
    turn_url = url_former("console:turn")
    run_url = url_former("console:run")
    back = urlencode({"back": full_path})
    form = None
    if can_operate:
        hidden = format_html(
            '<input type="hidden" name="csrfmiddlewaretoken" value="{}"><input type="hidden" name="next" value="{}">',
            csrf_token,
            full_path,
        )
        form = _DecideForm(turn_url, url_former("console:approve"), url_former("console:block"), hidden)
    return format_html_join("\n", "{}", ((_turn_row(t, turn_url, run_url, back, form),) for t in rows))


def _turn_row(t: Any, turn_url: UrlFormer, run_url: UrlFormer, back: str, form: _DecideForm | None) -> SafeString:
    state = _state(t)
    row = format_html(
        '<tr><td><a href="{}?{}">{}</a></td><td class="mono small"><a href="{}">{}</a></td><td>{}</td>'
        '<td class="small">{}</td><td class="small">{}</td><td>{}</td><td>{}</td><td>{}</td>',
        turn_url(pk=t.pk),
        back,
        short(t.turn_id, 40),
        run_url(pk=t.run_id),
        short(t.run.run_id, 30),
        state_badge(state),
        _next_step(state),
        t.status,
        _decided(state),
        _assignee(t),
        _time(t.updated_at),
    )
    if form is None:
        return format_html("{}</tr>", row)
    decide = _decide(t, state, form) if state is None or state.gate != "done" else ""
    return format_html("{}<td>{}</td></tr>", row, decide)


_BLOCK_BUTTON = mark_safe(  # fixed markup, no value in it
    '<button type="submit" class="btn btn-small btn-block"><span aria-hidden="true">✖</span> Block</button>'
)


def _decide(t: Any, state: Any, form: _DecideForm) -> SafeString:
    """A row's decision form. The buttons only offer what the state suggests; the service decides (an
    approval of a turn that needs evidence is refused there whatever the button said)."""
    pk = int(t.pk)
    approve: SafeString | str = ""
    key = str(state.state) if state is not None else ""
    if key in ("held_review", "blocked_operator", "parked"):
        approve = format_html(
            '<button type="submit" class="btn btn-small btn-approve" formaction="{}">'
            '<span aria-hidden="true">✓</span> Approve</button>',
            form.approve(pk=pk),
        )
    elif key == "held_effect":
        approve = format_html('<a href="{}#decide" class="small">Approve with evidence…</a>', form.turn(pk=pk))
    return format_html(
        '<details class="rowdecide"><summary>Decide<span class="visually-hidden"> on {}</span></summary>'
        '<form method="post" action="{}" class="rowform">{}'
        '<label for="reason-{}">Reason</label>'
        '<input type="text" id="reason-{}" name="reason" required minlength="3" maxlength="2000">'
        "{}{}</form></details>",
        t.turn_id,
        form.block(pk=pk),
        form.hidden,
        pk,
        pk,
        approve,
        "" if key == "blocked_operator" else _BLOCK_BUTTON,
    )


def record_items(rows: list[Any], turn_pks: dict[str, int]) -> SafeString:
    """The event history's records (console.runs.RecordRow), each an <li> with its fields folded, built the
    same way: fifty a page, each with a link, a code in words, a time and its redacted fields."""
    turn_url = url_former("console:turn")
    return format_html_join("\n  ", "{}", ((_record_item(r, turn_pks, turn_url),) for r in rows))


def _record_item(r: Any, turn_pks: dict[str, int], turn_url: UrlFormer) -> SafeString:
    turn: SafeString | str = ""
    if r.turn:
        name = short(r.turn, 30)
        pk = turn_pks.get(r.turn)
        if pk is None:
            ref = format_html('<span class="mono">{}</span>', name)
        else:
            ref = format_html('<a href="{}" class="mono">{}</a>', turn_url(pk=pk), name)
        turn = format_html(' <span class="turnref">turn {}</span>', ref)
    at = format_html(' <span class="small muted">{}</span>', stated_time(r.at)) if r.at else ""
    discarded = (" discarded-row", mark_safe(' <span class="small">(discarded)</span>')) if r.discarded else ("", "")
    summary = format_html(
        '<span class="seq muted">#{}</span> <a href="{}" class="where">branch {} · lsn {}</a> '
        '<span class="kind">{}</span>{} <span class="gist small">{}</span>{}{}',
        int(r.seq),
        r.url,
        int(r.branch),
        int(r.lsn),
        code_words(r.kind),
        turn,
        short(r.summary, 80),
        discarded[1],
        at,
    )
    return format_html(
        '<li id="r{}" class="record{}">\n    <details>\n      <summary>{}</summary>\n'
        '      <pre class="fields">{}</pre>\n    </details>\n  </li>',
        int(r.seq),
        discarded[0],
        summary,
        redacted_json(r.fields),
    )


def queue_rows(queue: list[Any]) -> SafeString:
    """The held queue's rows (overview and its live refresh), built the same way: longest held first."""
    turn_url = url_former("console:turn")
    return format_html_join("\n", "{}", ((_queue_row(t, turn_url),) for t in queue))


def _queue_row(t: Any, turn_url: UrlFormer) -> SafeString:
    state = _state(t)
    since = state.since if state is not None and state.since else t.updated_at
    return format_html(
        '<tr><td>{} <span class="muted small">({})</span></td><td><a href="{}">{}</a></td>'
        '<td class="mono small">{}</td><td>{}</td><td class="small">{}</td><td>{}</td></tr>',
        _time(since, with_year=False),
        timesince(since),
        turn_url(pk=t.pk),
        short(t.turn_id, 32),
        short(t.run.run_id, 28),
        state_badge(state),
        _next_step(state),
        _assignee(t),
    )


_MARKS = {"committed": "✓", "resume": "▶", "blocked": "✖", "missing": "·"}


def grid_cell(cell: Any) -> SafeString:
    """A grid cell's <td> (console.runs.GridCell): a mark a phase, its words as the title and label."""
    mark = _MARKS.get(cell.state)
    inner: SafeString | str = ""
    if mark is not None and cell.url:
        inner = format_html('<a href="{}" aria-label="{}">{}</a>', cell.url, cell.words, mark)
    elif mark is not None:
        inner = format_html('<span aria-label="{}">{}</span>', cell.words, mark)
    return format_html('<td class="cell cell-{}" title="{}">{}</td>', cell.state, cell.words, inner)


def grid_rows(rows: list[Any]) -> SafeString:
    """A run's grid of turns by phase (console.runs.GridRow): the turn, its state and a cell a phase."""
    turn_url = url_former("console:turn")
    return format_html_join(
        "\n",
        '<tr><th scope="row" class="sticky"><a href="{}">{}</a></th>\n        <td>{}</td>\n        {}\n      </tr>',
        ((turn_url(pk=r.turn.pk), short(r.turn.turn_id, 28), state_badge(r.shown), _cells(r.cells)) for r in rows),
    )


def _cells(cells: list[Any]) -> SafeString:
    return format_html_join("", "{}", ((grid_cell(c),) for c in cells))
