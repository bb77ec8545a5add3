"""The turns table's rows, composed in Python.

A list page renders 25-100 rows, each with links, a badge, the operator decision and a small decision form.
Django's template engine spends most of a page's time on exactly that loop (benchmarks/bench_pages.py
measured ~4 ms per row), so the rows are built here with ``format_html`` (every value escaped) and URLs
formed once per page instead of once per row. The markup is the same the template would produce.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from . import vocabulary


def _short(text: str | None, n: int) -> str:
    text = text or ""
    return text if len(text) <= n else text[: n - 1] + "…"


def badge(decision: str | None, reason: str | None = None) -> SafeString:
    key = decision or "unassessed"
    icon = vocabulary.DECISION_ICONS.get(key, "…")
    word = decision or "not assessed"
    html = format_html('<span class="badge badge-{}"><span aria-hidden="true">{}</span> {}</span>', key, icon, word)
    if reason and key == "blocked":
        html = format_html('{} <code class="reason">{}</code>', html, reason)
    return html


_GATE = {
    "approve": ('<span aria-hidden="true">✓</span> approved', "approve"),
    "block": ('<span aria-hidden="true">✖</span> blocked', "block"),
    "park": ('<span aria-hidden="true">⏸</span> parked', "park"),
}


def turn_rows(
    rows: list[Any], *, full_path: str, can_operate: bool, csrf_token: str, run_level: frozenset[str]
) -> SafeString:
    turn_base = reverse("console:turn", args=[0])[:-2]  # "/turns/" : the pk is appended per row
    turns_url = reverse("console:turns")
    back = quote(full_path, safe="")
    out: list[str] = []
    for t in rows:
        pk = t.pk
        run_id = t.run.run_id
        if t.decision == "resume":
            step = format_html("from <strong>{}</strong>", t.resume_from or "")
        elif t.decision == "finalize":
            step = mark_safe("write terminal")
        elif t.decision == "blocked":
            step = mark_safe("needs a person")
        else:
            step = mark_safe('<span class="muted">—</span>')
        gate = _GATE.get(getattr(t, "gate_kind", None) or "")
        gate_html = (
            format_html('<span class="gate gate-{}">{}</span>', gate[1], mark_safe(gate[0]))
            if gate
            else mark_safe('<span class="muted">—</span>')
        )
        cells = [
            format_html('<td><a href="{}{}/?back={}">{}</a></td>', turn_base, pk, back, _short(t.turn_id, 40)),
            format_html(
                '<td class="mono small"><a href="{}?run={}&amp;sort=run">{}</a></td>',
                turns_url,
                quote(run_id, safe=""),
                _short(run_id, 30),
            ),
            format_html("<td>{}</td>", badge(t.decision, t.reason)),
            format_html('<td class="small">{}</td>', step),
            format_html('<td class="small">{}</td>', t.status),
            format_html("<td>{}</td>", gate_html),
            format_html('<td><time datetime="{}">{}</time></td>', t.updated_at.isoformat(), _local(t.updated_at)),
        ]
        if can_operate:
            decide = ""
            if t.decision not in ("complete", "discarded"):
                decide = _decide(t, turn_base, full_path, csrf_token, run_level)
            cells.append(format_html("<td>{}</td>", decide))
        out.append(format_html("<tr>{}</tr>", mark_safe("".join(cells))))
    return mark_safe("\n".join(out))


def _local(value: Any, fmt: str = "Y-m-d H:i T") -> str:
    return date_format(timezone.localtime(value), fmt)


def _time(value: Any, fmt: str) -> SafeString:
    """A <time> in the operator's zone, machine-readable and shown in ``fmt``."""
    local = timezone.localtime(value)
    return format_html('<time datetime="{}">{}</time>', local.isoformat(), date_format(local, fmt))


def queue_rows(queue: list[Any]) -> SafeString:
    """The blocked queue's rows (overview and its live refresh): built here for the same reason as the
    turns table's, with the markup the template had."""
    turn_base = reverse("console:turn", args=[0])[:-2]
    out: list[str] = []
    for t in queue:
        gate = getattr(t, "gate_kind", None)
        out.append(
            format_html(
                '<tr><td>{at} <span class="muted small">({since})</span></td>'
                '<td><a href="{base}{pk}/">{turn}</a></td>'
                '<td class="mono small">{run}</td>'
                '<td><span aria-hidden="true">✖</span> {reason}</td>'
                "<td>{gate}</td></tr>",
                at=_time(t.updated_at, "m-d H:i T"),
                since=timesince(t.updated_at),
                base=turn_base,
                pk=t.pk,
                turn=_short(t.turn_id, 32),
                run=_short(t.run.run_id, 28),
                reason=(t.reason or "").replace("_", " "),
                gate=(
                    format_html('<span class="gate gate-{}">{}</span>', gate, gate)
                    if gate
                    else mark_safe('<span class="muted">waiting</span>')
                ),
            )
        )
    return mark_safe("\n".join(out))


def _decide(t: Any, turn_base: str, full_path: str, csrf_token: str, run_level: frozenset[str]) -> SafeString:
    pk = t.pk
    approve = mark_safe("")
    if t.decision == "blocked" and t.reason != "effect_indeterminate" and t.reason not in run_level:
        approve = format_html(
            '<button type="submit" class="btn btn-small btn-approve" formaction="{}{}/approve/">'
            '<span aria-hidden="true">✓</span> Approve</button>',
            turn_base,
            pk,
        )
    elif t.decision == "blocked" and t.reason == "effect_indeterminate":
        approve = format_html('<a href="{}{}/#decide" class="small">Approve with evidence…</a>', turn_base, pk)
    return format_html(
        '<details class="rowdecide"><summary>Decide<span class="visually-hidden"> on {turn}</span></summary>'
        '<form method="post" action="{base}{pk}/block/" class="rowform">'
        '<input type="hidden" name="csrfmiddlewaretoken" value="{csrf}">'
        '<input type="hidden" name="next" value="{next}">'
        '<label for="reason-{pk}">Reason</label>'
        '<input type="text" id="reason-{pk}" name="reason" required minlength="3" maxlength="2000">'
        "{approve}"
        '<button type="submit" class="btn btn-small btn-block"><span aria-hidden="true">✖</span> Block</button>'
        "</form></details>",
        turn=t.turn_id,
        base=turn_base,
        pk=pk,
        csrf=csrf_token,
        next=full_path,
        approve=approve,
    )
