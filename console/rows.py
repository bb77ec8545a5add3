"""The rows of the turns table and of the blocked queue, composed in Python.

A list page renders 25-100 rows, each with links, a badge, the operator decision and a small decision form.
Django's template engine would spend most of a page's time on exactly that loop, and even ``format_html``
per cell is costly at several hundred cells a page (benchmarks/bench_pages.py measures the pages), so a
row is one f-string in which every value from the database goes through ``_esc`` (HTML-escaped, quotes
included: what the template's autoescape does), URLs are formed once per page, and times are formatted
without Django's date-format machinery. The markup is the same the template would produce.

The rules that keep it safe (tests/console/test_hostile_values.py renders hostile values through it): every
text goes through ``_esc`` (``html.escape`` with quotes: the same output as ``django.utils.html.escape``),
every attribute value is double-quoted, a pk is ``int()``-ed, URLs come from ``reverse()`` (``_pk_url``) and
query strings from ``urlencode`` (``_query``), and the fixed markup holds no value at all.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from typing import Any, NamedTuple
from urllib.parse import urlencode

from django.core.exceptions import ObjectDoesNotExist
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from recovery.assignments.services import assigned_to
from recovery.state import OFFER_APPROVE, OFFER_WITH_EVIDENCE, approval_offer, state_of

from . import vocabulary


def _esc(value: Any) -> str:
    return escape(str(value), quote=True)


def _short(text: str | None, n: int) -> str:
    text = text or ""
    return text if len(text) <= n else text[: n - 1] + "…"


def reason_html(code: str) -> str:
    """A held turn's reason: its words, with the code beside them (what a person reads, what a log says)."""
    words = _esc(vocabulary.words_for(code))
    return f'<span class="reason-words">{words}</span> <code class="reason">{_esc(code)}</code>'


def badge(decision: str | None, reason: str | None = None) -> SafeString:
    key = decision or "unassessed"
    icon = vocabulary.DECISION_ICONS.get(key, "…")
    word = decision or "not assessed"
    html = f'<span class="badge badge-{_esc(key)}"><span aria-hidden="true">{_esc(icon)}</span> {_esc(word)}</span>'
    if reason and key == "blocked":
        html += " " + reason_html(reason)
    return mark_safe(html)  # noqa: S308  every value is escaped by _esc


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
    icon = vocabulary.STATE_ICONS.get(key, "…")
    html = (
        f'<span class="badge badge-{_esc(key)}" data-state="{_esc(key)}"><span aria-hidden="true">{_esc(icon)}</span> '
        f"{_esc(state_label(state))}</span>"
    )
    if state is not None and state.gate == "hold" and state.reason:
        html += " " + reason_html(str(state.reason))
    return mark_safe(html)  # noqa: S308  every value is escaped by _esc


_NONE = '<span class="muted">—</span>'


def local_time(value: datetime, with_year: bool = True) -> tuple[str, str]:
    """(ISO 8601, "Y-m-d H:i T" or "m-d H:i T") in the operator's zone: what the template's ``date`` filter
    shows, where "T" is the zone's abbreviation (tzname), at a tenth of its cost."""
    local = timezone.localtime(value)
    shown = local.strftime("%Y-%m-%d %H:%M" if with_year else "%m-%d %H:%M")
    return local.isoformat(), f"{shown} {local.tzname() or ''}"


_PK = 987654321  # a pk no test or page has: reversed once, then split where the row's own pk goes


def _pk_url(name: str) -> tuple[str, str]:
    """The URL named ``name`` for any pk, as (before, after) the pk, escaped: reverse() once per page rather
    than per row, and whatever shape the URL pattern has."""
    before, after = reverse(name, args=[_PK]).split(str(_PK))
    return _esc(before), _esc(after)


def _query(**params: str) -> str:
    """A query string, URL-encoded and then escaped for an attribute ("&" as "&amp;")."""
    return _esc(urlencode(params))


def _time(value: datetime, with_year: bool = True) -> str:
    iso, shown = local_time(value, with_year)
    return f'<time datetime="{_esc(iso)}">{_esc(shown)}</time>'


def _state(t: Any) -> Any:
    """The row's effective state (recovery.state.StateValue), read from the joined TurnEffective."""
    try:
        effective = t.effective
    except ObjectDoesNotExist:
        return None
    return state_of(effective)


def _next_step(state: Any) -> str:
    if state is None:
        return _NONE
    key = str(state.state)
    if key == "resuming" or (key == "approved" and state.resume_from):
        return f"from <strong>{_esc(state.resume_from or '')}</strong>"
    step = vocabulary.NEXT_STEPS.get(key)
    return _esc(step) if step else _NONE


def _decided(state: Any) -> str:
    """Who decided on top of the engine, and when: the operator column."""
    if state is None or not state.actor_name or state.decided_at is None:
        return _NONE
    verb = {"approved": "approved", "blocked_operator": "blocked", "parked": "parked"}.get(str(state.state))
    if verb is None:
        return _NONE
    who = _esc(_short(state.actor_name, 24))
    return f'<span class="small">{_esc(verb)} by {who}<br>{_time(state.decided_at)}</span>'


def _assignee(t: Any) -> str:
    """The "Assigned to" cell: the turn's reviewer (recovery.assignment.assigned_to), not a worker's claim."""
    name = assigned_to(t)
    return f'<span class="small assignee">{_esc(_short(name, 24))}</span>' if name else _NONE


def turn_rows(rows: list[Any], *, full_path: str, can_operate: bool, csrf_token: str) -> SafeString:
    turn_url = _pk_url("console:turn")
    run_url = _pk_url("console:run")
    back = _query(back=full_path)
    decide_tail = _decide_tail(full_path, csrf_token) if can_operate else ""
    urls = _DecideUrls(turn_url, _pk_url("console:approve"), _pk_url("console:block"))
    out: list[str] = []
    for t in rows:
        pk = int(t.pk)
        run_id = t.run.run_id
        state = _state(t)
        row = (
            f'<tr><td><a href="{turn_url[0]}{pk}{turn_url[1]}?{back}">{_esc(_short(t.turn_id, 40))}</a></td>'
            f'<td class="mono small"><a href="{run_url[0]}{int(t.run_id)}{run_url[1]}">'
            f"{_esc(_short(run_id, 30))}</a></td>"
            f"<td>{state_badge(state)}</td>"
            f'<td class="small">{_next_step(state)}</td>'
            f'<td class="small">{_esc(t.status)}</td>'
            f"<td>{_decided(state)}</td>"
            f"<td>{_assignee(t)}</td>"
            f"<td>{_time(t.updated_at)}</td>"
        )
        if can_operate:
            decide = ""
            if state is None or state.gate != "done":
                decide = _decide(t, pk, state, urls, decide_tail)
            row += f"<td>{decide}</td>"
        out.append(row + "</tr>")
    return mark_safe("\n".join(out))  # noqa: S308  every value is escaped by _esc


def _decide_tail(full_path: str, csrf_token: str) -> str:
    """The hidden fields every row's form shares: formed once per page."""
    return (
        f'<input type="hidden" name="csrfmiddlewaretoken" value="{_esc(csrf_token)}">'
        f'<input type="hidden" name="next" value="{_esc(full_path)}">'
    )


class _DecideUrls(NamedTuple):
    turn: tuple[str, str]
    approve: tuple[str, str]
    block: tuple[str, str]


def _decide(t: Any, pk: int, state: Any, urls: _DecideUrls, hidden: str) -> str:
    """A row's decision form. The buttons only offer what the state suggests; the service decides (an
    approval of a turn that needs evidence is refused there whatever the button said)."""
    approve = ""
    key = str(state.state) if state is not None else ""
    offer = approval_offer(key)  # recovery.state: which states an approval may lift
    if offer == OFFER_APPROVE:
        approve = (
            '<button type="submit" class="btn btn-small btn-approve" '
            f'formaction="{urls.approve[0]}{pk}{urls.approve[1]}"><span aria-hidden="true">✓</span> Approve</button>'
        )
    elif offer == OFFER_WITH_EVIDENCE:
        approve = f'<a href="{urls.turn[0]}{pk}{urls.turn[1]}#decide" class="small">Approve with evidence…</a>'
    block = (
        ""
        if key == "blocked_operator"
        else '<button type="submit" class="btn btn-small btn-block"><span aria-hidden="true">✖</span> Block</button>'
    )
    return (
        '<details class="rowdecide"><summary>Decide'
        f'<span class="visually-hidden"> on {_esc(t.turn_id)}</span></summary>'
        f'<form method="post" action="{urls.block[0]}{pk}{urls.block[1]}" class="rowform">{hidden}'
        f'<label for="reason-{pk}">Reason</label>'
        f'<input type="text" id="reason-{pk}" name="reason" required minlength="3" maxlength="2000">'
        f"{approve}{block}"
        "</form></details>"
    )


def record_items(rows: list[Any], turn_pks: dict[str, int]) -> SafeString:
    """The event history's records (console.runs.RecordRow), each an <li> with its fields folded, built the
    same way: fifty a page, each with a link, a code in words, a time and its redacted fields."""
    from .templatetags.console_tags import code_words, redacted_json, stated_time

    turn_url = _pk_url("console:turn")
    out: list[str] = []
    for r in rows:
        turn = ""
        if r.turn:
            name = _esc(_short(r.turn, 30))
            pk = turn_pks.get(r.turn)
            ref = f'<span class="mono">{name}</span>'
            if pk is not None:
                ref = f'<a href="{turn_url[0]}{int(pk)}{turn_url[1]}" class="mono">{name}</a>'
            turn = f' <span class="turnref">turn {ref}</span>'
        at = f' <span class="small muted">{_esc(stated_time(r.at))}</span>' if r.at else ""
        discarded = (" discarded-row", ' <span class="small">(discarded)</span>') if r.discarded else ("", "")
        summary = (
            f'<span class="seq muted">#{int(r.seq)}</span> <a href="{_esc(r.url)}" class="where">branch '
            f'{int(r.branch)} · lsn {int(r.lsn)}</a> <span class="kind">{code_words(r.kind)}</span>{turn} '
            f'<span class="gist small">{_esc(_short(r.summary, 80))}</span>{discarded[1]}{at}'
        )
        out.append(
            f'<li id="r{int(r.seq)}" class="record{discarded[0]}">\n    <details>\n      <summary>{summary}</summary>\n'
            f'      <pre class="fields">{_esc(redacted_json(r.fields))}</pre>\n    </details>\n  </li>'
        )
    return mark_safe("\n  ".join(out))  # noqa: S308  every value is escaped by _esc


def queue_rows(queue: list[Any]) -> SafeString:
    """The held queue's rows (overview and its live refresh), built the same way: longest held first."""
    turn_url = _pk_url("console:turn")
    out: list[str] = []
    for t in queue:
        state = _state(t)
        since = state.since if state is not None and state.since else t.updated_at
        out.append(
            f'<tr><td>{_time(since, with_year=False)} <span class="muted small">'
            f"({_esc(timesince(since))})</span></td>"
            f'<td><a href="{turn_url[0]}{int(t.pk)}{turn_url[1]}">{_esc(_short(t.turn_id, 32))}</a></td>'
            f'<td class="mono small">{_esc(_short(t.run.run_id, 28))}</td>'
            f"<td>{state_badge(state)}</td>"
            f'<td class="small">{_next_step(state)}</td>'
            f"<td>{_assignee(t)}</td></tr>"
        )
    return mark_safe("\n".join(out))  # noqa: S308  every value is escaped by _esc
