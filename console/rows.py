"""The rows of the console's long lists, composed in Python: the turns list, the held queue, a run's grid
of turns by phase and its event history.

A list page renders 25-100 rows, each with links, a badge, the operator decision and a small decision form;
Django's template engine spends most of such a page's time on exactly that loop, and so does a
``format_html`` call per cell (docs/perf keeps the measurements), so these rows stay here and each list is
one ``format_html`` call: ``_Markup`` gathers the fixed fragments (markup with ``{}`` where a value goes,
never a value) and the values that fill them, and ``format_html`` escapes every value, quotes included, as
the template's autoescape does. Every attribute value is double-quoted, a pk is ``int()``-ed, URLs come from
``console.links.url_former`` (what ``reverse()`` answers) and query strings from ``urlencode``.
tests/console/test_rows.py and test_hostile_values.py render hostile values through every function here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple
from urllib.parse import urlencode

from django.core.exceptions import ObjectDoesNotExist
from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from journals.models import RunStatus, TurnState
from recovery.assignments.services import assigned_to
from recovery.state import OFFER_APPROVE, OFFER_WITH_EVIDENCE, approval_offer, state_of, state_version

from . import vocabulary
from .links import HtmlUrlFormer, html_url_former
from .words import code_words, redacted_json, stated_time


class _Markup:
    """Fixed fragments and the values that fill their ``{}``, rendered by one ``format_html`` call."""

    __slots__ = ("fragments", "values")

    def __init__(self) -> None:
        self.fragments: list[str] = []
        self.values: list[object] = []

    def add(self, fragment: str, *values: object) -> None:
        self.fragments.append(fragment)
        self.values.extend(values)

    def number(self, n: int) -> None:
        """A number, written as ``int()`` writes it: digits and a sign carry no markup and no brace."""
        self.fragments.append(str(int(n)))

    def html(self) -> SafeString:
        if not self.values:  # format_html wants a value; a list of no rows has none
            return format_html("{}", "".join(self.fragments).replace("{{", "{").replace("}}", "}"))
        return format_html("".join(self.fragments), *self.values)


# The words of the console's own vocabulary (state keys and labels, glyphs, next steps, verbs), escaped once:
# most of a row's values are among them. Any other value is escaped where it is written.
_VOCABULARY: dict[str, SafeString] = {
    w: conditional_escape(w)
    for w in (
        "unassessed",
        "not yet assessed",
        *TurnState.values,
        *TurnState.labels,
        *vocabulary.STATE_ICONS.values(),
        *vocabulary.NEXT_STEPS.values(),
        "approved",
        "blocked",
        "parked",
        "…",
    )
}


def _known(word: str) -> SafeString | str:
    """``word`` escaped once for all when it is one of the vocabulary's, else as it is (format_html escapes it)."""
    return _VOCABULARY.get(word, word)


def short(text: str | None, n: int) -> str:
    text = text or ""
    return text if len(text) <= n else text[: n - 1] + "…"


def _reason(m: _Markup, code: str) -> None:
    """A held turn's reason: its words, with the code beside them (what a person reads, what a log says)."""
    m.add(' <span class="reason-words">{}</span> <code class="reason">{}</code>', vocabulary.words_for(code), code)


def badge(decision: str | None, reason: str | None = None) -> SafeString:
    key = decision or "unassessed"
    m = _Markup()
    m.add(
        '<span class="badge badge-{}"><span aria-hidden="true">{}</span> {}</span>',
        key,
        vocabulary.DECISION_ICONS.get(key, "…"),
        decision or "not assessed",
    )
    if reason and key == "blocked":
        _reason(m, reason)
    return m.html()


def run_status_badge(status: str) -> SafeString:
    """A run's status (journals.models.RunStatus) as a badge: a glyph and the words, its meaning as the title."""
    m = _Markup()
    m.add(
        '<span class="badge badge-run-{}" data-run-status="{}" title="{}"><span aria-hidden="true">{}</span> {}</span>',
        status,
        status,
        vocabulary.RUN_STATUSES.get(status, ""),
        vocabulary.RUN_STATUS_ICONS.get(status, "…"),
        RunStatus(status).label if status in RunStatus.values else status,
    )
    return m.html()


def state_key_badge(key: str) -> SafeString:
    """The badge of a state by its key alone (a count's chip): the glyph and the state's words."""
    m = _Markup()
    m.add(
        '<span class="badge badge-{}" data-state="{}"><span aria-hidden="true">{}</span> {}</span>',
        _known(key),
        _known(key),
        _known(vocabulary.STATE_ICONS.get(key, "…")),
        _known(str(TurnState(key).label) if key in TurnState.values else "not yet assessed"),
    )
    return m.html()


def state_label(state: Any) -> str:
    """The words of an effective state (recovery.state.StateValue, or None before the first assessment),
    with who decided when an operator did: "approved by olivia", "blocked by olivia"."""
    if state is None:
        return "not yet assessed"
    key = str(state.state)
    if key in ("approved", "blocked_operator") and state.actor_name:
        return ("approved by " if key == "approved" else "blocked by ") + str(state.actor_name)
    return str(state.label)


def _state_badge(m: _Markup, state: Any) -> None:
    key = str(state.state) if state is not None else "unassessed"
    m.add(
        '<span class="badge badge-{}" data-state="{}"><span aria-hidden="true">{}</span> {}</span>',
        _known(key),
        _known(key),
        _known(vocabulary.STATE_ICONS.get(key, "…")),
        _known(state_label(state)),
    )
    if state is not None and state.gate == "hold" and state.reason:
        _reason(m, str(state.reason))


def state_badge(state: Any) -> SafeString:
    """Colour plus a glyph plus the words, never colour alone; a held state's reason code beside it."""
    m = _Markup()
    _state_badge(m, state)
    return m.html()


_NONE = '<span class="muted">—</span>'  # a fragment with no value in it


def local_time(value: datetime, with_year: bool = True) -> tuple[str, str]:
    """(ISO 8601, "Y-m-d H:i T" or "m-d H:i T") in the operator's zone: what the template's ``date`` filter
    shows, where "T" is the zone's abbreviation (tzname), without Django's date-format machinery."""
    local = timezone.localtime(value)
    shown = local.strftime("%Y-%m-%d %H:%M" if with_year else "%m-%d %H:%M")
    return local.isoformat(), f"{shown} {local.tzname() or ''}"


def _time(m: _Markup, value: datetime, with_year: bool = True) -> None:
    m.add('<time datetime="{}">{}</time>', *local_time(value, with_year))


def _state(t: Any) -> Any:
    """The row's effective state (recovery.state.StateValue), read from the joined TurnEffective."""
    try:
        effective = t.effective
    except ObjectDoesNotExist:
        return None
    return state_of(effective)


def _next_step(m: _Markup, state: Any) -> None:
    key = str(state.state) if state is not None else ""
    if key == "resuming" or (key == "approved" and state.resume_from):
        m.add("from <strong>{}</strong>", state.resume_from or "")
    elif state is not None and state.gate == "hold":
        m.add("{}", state.remedy_text)  # the whole remedy, in order (journals/remedies.py)
    elif step := vocabulary.NEXT_STEPS.get(key):
        m.add("{}", _known(step))
    else:
        m.add(_NONE)


_VERBS = {"approved": "approved", "blocked_operator": "blocked", "parked": "parked"}


def _decided(m: _Markup, state: Any) -> None:
    """Who decided on top of the engine, and when: the operator column."""
    verb = _VERBS.get(str(state.state)) if state is not None and state.actor_name and state.decided_at else None
    if verb is None:
        m.add(_NONE)
        return
    m.add('<span class="small">{} by {}<br>', _known(verb), short(state.actor_name, 24))
    _time(m, state.decided_at)
    m.add("</span>")


def _assignee(m: _Markup, t: Any) -> None:
    """The "Assigned to" cell: the turn's reviewer (recovery.assignment.assigned_to), not a worker's claim."""
    name = assigned_to(t)
    if name:
        m.add('<span class="small assignee">{}</span>', short(name, 24))
    else:
        m.add(_NONE)


class _DecideForm(NamedTuple):
    """What every row's decision form shares on a page: its URLs' formers and its hidden fields' values."""

    turn: HtmlUrlFormer
    approve: HtmlUrlFormer
    block: HtmlUrlFormer
    csrf_token: SafeString
    next: SafeString


def turn_rows(rows: list[Any], *, full_path: str, can_operate: bool, csrf_token: str) -> SafeString:
    turn_url = html_url_former("console:turn")
    run_url = html_url_former("console:run")
    # The values every row repeats are escaped once a page.
    back = conditional_escape(urlencode({"back": full_path}))
    form = None
    if can_operate:
        hidden = conditional_escape(csrf_token), conditional_escape(full_path)
        form = _DecideForm(turn_url, html_url_former("console:approve"), html_url_former("console:block"), *hidden)
    m = _Markup()
    for i, t in enumerate(rows):
        state = _state(t)
        m.add("\n" if i else "")
        m.add(
            '<tr><td data-label="Turn"><a href="{}?{}">{}</a></td>'
            '<td class="mono small" data-label="Run"><a href="{}">{}</a></td><td data-label="State">',
            turn_url(pk=t.pk),
            back,
            short(t.turn_id, 40),
            run_url(pk=t.run_id),
            short(t.run.run_id, 30),
        )
        _state_badge(m, state)
        m.add('</td><td class="small wrap next-step" data-label="Next step">')
        _next_step(m, state)
        m.add('</td><td class="small" data-label="Status">{}</td><td data-label="Operator">', t.status)
        _decided(m, state)
        m.add('</td><td data-label="Assigned to">')
        _assignee(m, t)
        m.add('</td><td data-label="Last change">')
        _time(m, t.updated_at)
        m.add("</td>")
        if form is not None:
            m.add('<td data-label="Decide">')
            if state is None or state.gate != "done":
                _decide(m, t, state, form)
            m.add("</td>")
        m.add("</tr>")
    return m.html()


def _decide(m: _Markup, t: Any, state: Any, form: _DecideForm) -> None:
    """A row's decision form. The buttons only offer what the state suggests; the service decides (an
    approval of a turn that needs evidence is refused there whatever the button said)."""
    pk = int(t.pk)
    m.add(
        '<details class="rowdecide"><summary>Decide<span class="visually-hidden"> on {}</span></summary>'
        '<form method="post" action="{}" class="rowform">'
        '<input type="hidden" name="csrfmiddlewaretoken" value="{}"><input type="hidden" name="next" value="{}">'
        # The version of the state this row shows: the decision is refused if the turn moved since.
        '<input type="hidden" name="state_version" value="{}"><label for="reason-',
        t.turn_id,
        form.block(pk=pk),
        form.csrf_token,
        form.next,
        state_version(state),
    )
    m.number(pk)
    m.add('">Reason</label><input type="text" id="reason-')
    m.number(pk)
    m.add('" name="reason" required minlength="3" maxlength="2000">')
    key = str(state.state) if state is not None else ""
    offer = approval_offer(key)  # recovery.state: which states an approval may lift
    if offer == OFFER_APPROVE:
        m.add(
            '<button type="submit" class="btn btn-small btn-approve" formaction="{}">'
            '<span aria-hidden="true">✓</span> Approve</button>',
            form.approve(pk=pk),
        )
    elif offer == OFFER_WITH_EVIDENCE:
        m.add('<a href="{}#decide" class="small">Approve with evidence…</a>', form.turn(pk=pk))
    if key != "blocked_operator":
        m.add('<button type="submit" class="btn btn-small btn-block"><span aria-hidden="true">✖</span> Block</button>')
    m.add("</form></details>")


def record_items(rows: list[Any], turn_pks: dict[str, int]) -> SafeString:
    """The event history's records (console.runs.RecordRow), each an <li> with its fields folded, built the
    same way: fifty a page, each with a link, a code in words, a time and its redacted fields."""
    turn_url = html_url_former("console:turn")
    m = _Markup()
    for i, r in enumerate(rows):
        m.add("\n  " if i else "")
        m.add(
            '<li id="r{}" class="record{}">\n    <details>\n      <summary><span class="seq muted">#{}</span> '
            '<a href="{}" class="where">branch {} · lsn {}</a> <span class="kind">{}</span>',
            int(r.seq),
            " discarded-row" if r.discarded else "",
            int(r.seq),
            r.url,
            int(r.branch),
            int(r.lsn),
            code_words(r.kind),
        )
        if r.turn:
            pk = turn_pks.get(r.turn)
            if pk is None:
                m.add(' <span class="turnref">turn <span class="mono">{}</span></span>', short(r.turn, 30))
            else:
                m.add(
                    ' <span class="turnref">turn <a href="{}" class="mono">{}</a></span>',
                    turn_url(pk=pk),
                    short(r.turn, 30),
                )
        m.add(' <span class="gist small">{}</span>', short(r.summary, 80))
        if r.discarded:
            m.add(' <span class="small">(discarded)</span>')
        if r.at:
            m.add(' <span class="small muted">{}</span>', stated_time(r.at))
        m.add(
            '</summary>\n      <pre class="fields">{}</pre>\n    </details>\n  </li>',
            redacted_json(r.fields),
        )
    return m.html()


def queue_rows(queue: list[Any], *, admin: bool = False) -> SafeString:
    """The held queue's rows (overview and its live refresh), built the same way: longest held first. For an
    admin each row ends with the turn's change page in the admin (its annotations and block), one click from
    the queue; nobody else is shown that column."""
    turn_url = html_url_former("console:turn")
    admin_url = html_url_former("admin:journals_turn_change") if admin else None
    m = _Markup()
    for i, t in enumerate(queue):
        state = _state(t)
        since = state.since if state is not None and state.since else t.updated_at
        m.add('\n<tr><td data-label="Held since">' if i else '<tr><td data-label="Held since">')
        _time(m, since, with_year=False)
        m.add(
            ' <span class="muted small">({})</span></td><td data-label="Turn"><a href="{}">{}</a></td>'
            '<td class="mono small" data-label="Run">{}</td><td data-label="State">',
            timesince(since),
            turn_url(pk=t.pk),
            short(t.turn_id, 32),
            short(t.run.run_id, 28),
        )
        _state_badge(m, state)
        m.add('</td><td class="small wrap next-step" data-label="Next step">')
        _next_step(m, state)
        m.add('</td><td data-label="Assigned to">')
        _assignee(m, t)
        if admin_url is not None:
            m.add(
                '</td><td data-label="Admin"><a href="{}" aria-label="Edit turn {} in the admin">Edit in admin</a>',
                admin_url(object_id=t.pk),
                short(t.turn_id, 32),
            )
        m.add("</td></tr>")
    return m.html()


_MARKS = {"committed": "✓", "resume": "▶", "blocked": "✖", "missing": "·"}


def grid_rows(rows: list[Any], *, names: dict[str, str] | None = None) -> SafeString:
    """A run's grid of turns by phase (console.runs.GridRow): the turn, its state and a cell a phase, each
    cell's words as its title and label. ``names``: an imported run's turns in its source's words, shown
    under the turn's id."""
    turn_url = html_url_former("console:turn")
    m = _Markup()
    for i, r in enumerate(rows):
        m.add("\n" if i else "")
        m.add(
            '<tr><th scope="row" class="sticky"><a href="{}">{}</a>',
            turn_url(pk=r.turn.pk),
            short(r.turn.turn_id, 28),
        )
        name = (names or {}).get(r.turn.turn_id)
        if name:
            m.add(' <span class="small muted turn-name">{}</span>', short(name, 28))
        m.add("</th>\n        <td>")
        _state_badge(m, r.shown)
        m.add("</td>\n        ")
        for c in r.cells:
            words = c.words
            m.add('<td class="cell cell-{}" title="{}">', c.state, words)
            mark = _MARKS.get(c.state)
            if mark is not None and c.url:
                m.add('<a href="{}" aria-label="{}">{}</a>', c.url, words, mark)
            elif mark is not None:
                m.add('<span aria-label="{}">{}</span>', words, mark)
            m.add("</td>")
        m.add("\n      </tr>")
    return m.html()
