"""What the turn page's template reads: for the page, for its poll, and for a decision the service refused.

The page is one picture of the turn. Its header, state card, timeline, history and Decide panel are drawn
from the same TurnPage, and the poll answers them together: the state card, and the others as htmx
out-of-band swaps. The Decide panel's forms are never replaced by a poll: they carry the version of the
state the person saw (recovery.state.state_version). When the turn moves, a banner in the panel says what
it is now, and a decision sent from the page is refused by the service (409 `state_changed`): nobody
approves over a block they did not see.
"""

from __future__ import annotations

import json
import re

from django.http import HttpRequest
from django.urls import reverse

from recovery.imports.selectors import source_words
from recovery.state import DONE, state_change_words, state_version

from .context import review_context, role_context
from .timeline import turn_timeline
from .turn_detail import TurnPage

TURN_REGION = "turn-live"
FINISHED = "This turn is finished, so its state is not refreshed."
_VERSION = re.compile(r"[0-9a-f]{1,64}")


def seen_on_page(request: HttpRequest) -> str | None:
    """The version the polling page was drawn with (``seen``, sent by its poll), if it is one."""
    given = request.GET.get("seen", "")
    return given if _VERSION.fullmatch(given) else None


def turn_context(request: HttpRequest, page: TurnPage, *, seen: str | None = None) -> dict[str, object]:
    """The turn page's context, minus its forms. ``seen``: the version the page's forms carry (default: the
    state the page shows); the banner names the change when the turn has left it."""
    current = state_version(page.state)
    seen = seen or current
    return {
        "p": page,
        "turn": page.turn,
        # An imported run's own words for the turn and its intents (the header names the turn by them).
        "words": source_words(run_id=page.turn.run.run_id, turn=page.turn),
        "timeline": turn_timeline(page),
        "state_version": seen,
        "changed": state_change_words(page.state) if seen != current else "",
        # A finished turn's state is not polled: nothing a person or the gate does moves it on.
        "live_off": FINISHED if page.state and page.state.gate == DONE else "",
        "live_url": reverse("console:turn", args=[page.turn.pk]),
        "live_vals": json.dumps({"seen": seen}),  # the poll says which version the page's forms carry
        **review_context(request, page.turn),
        **role_context(request),
    }
