"""Forms of the console: list filters (GET, kept in the URL) and the operator's decisions (POST)."""

from __future__ import annotations

import zoneinfo
from typing import Any

from django import forms

from journals.models import RUN_STATUS_ORDER
from recovery.state import FILTER_CHOICES, FILTER_NAMES, UNASSESSED

from .vocabulary import words_for

# The filter's choices are recovery.state's, so that a list, a bulk decision and the bulk API accept the
# same values under the same names.
DECISION_CHOICES = [("", "any decision"), *FILTER_CHOICES["decision"]]
STATE_CHOICES = [("", "any state"), *FILTER_CHOICES["state"]]
# A reason's option reads as its words with the code in brackets (console.vocabulary).
REASON_CHOICES = [("", "any reason")] + [(code, f"{words_for(code)} ({code})") for code, _ in FILTER_CHOICES["reason"]]
STATUS_CHOICES = [("", "any status"), *FILTER_CHOICES["status"]]
AGE_CHOICES = [("", "any age"), *FILTER_CHOICES["age"]]
TURN_SORTS = {
    "-updated": ("-updated_at", "-id"),
    "updated": ("updated_at", "id"),
    "-created": ("-created_at", "-id"),
    "created": ("created_at", "id"),
    "turn": ("turn_id", "id"),
    "run": ("run__run_id", "first_seq", "id"),
    "decision": ("effective__decision", "-updated_at", "-id"),
    "state": ("effective__state", "-updated_at", "-id"),
}
TURN_SORT_CHOICES = [
    ("-updated", "latest change first"),
    ("updated", "oldest change first"),
    ("-created", "newest turn first"),
    ("created", "oldest turn first"),
    ("turn", "turn id"),
    ("run", "run, then journal order"),
    ("decision", "decision"),
    ("state", "state"),
]
# A run's latest change (journals/changes.py): its records, and people's acts on it and its turns.
# ``status_rank``: the position of the status a run shows (journals.models.run_status_rank), annotated by
# console.selectors.runs_filtered for this sort only.
RUN_SORTS = {
    "-updated": ("-changed_at", "-id"),
    "updated": ("changed_at", "id"),
    "run": ("run_id",),
    "-records": ("-record_count", "-id"),
    "status": ("status_rank", "-changed_at", "-id"),
}
RUN_SORT_CHOICES = [
    ("-updated", "latest change first"),
    ("updated", "oldest change first"),
    ("run", "run id"),
    ("-records", "most records first"),
    ("status", "status, blocked first"),
]
RUN_STATUS_CHOICES = [("", "any status")] + [(str(s), str(s.label)) for s in RUN_STATUS_ORDER]
# The journal's soundness: whether a fault of the journal itself blocks the run.
RUN_STATE_CHOICES = [
    ("", "any journal"),
    ("blocked", "at fault (blocks the run)"),
    ("clear", "sound"),
    (UNASSESSED, "not yet assessed"),
]
PAGE_SIZES = (25, 50, 100)
DEFAULT_PAGE_SIZE = 50
# The default size is the empty choice, so that an unchanged form leaves no `per_page` in the URL.
PAGE_CHOICES = [("", str(DEFAULT_PAGE_SIZE))] + [(n, str(n)) for n in PAGE_SIZES if n != DEFAULT_PAGE_SIZE]


class _GetForm(forms.Form):
    """A filter form: every field optional, an invalid value is dropped rather than failing the page."""

    def cleaned(self) -> dict[str, Any]:
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return {k: v for k, v in data.items() if v not in (None, "")}


class TurnFilterForm(_GetForm):
    q = forms.CharField(required=False, max_length=200, label="Search", help_text="Turn, run or lineage contains")
    state = forms.ChoiceField(required=False, choices=STATE_CHOICES)
    decision = forms.ChoiceField(required=False, choices=DECISION_CHOICES)
    reason = forms.ChoiceField(required=False, choices=REASON_CHOICES)
    status = forms.ChoiceField(required=False, choices=STATUS_CHOICES)
    run = forms.CharField(required=False, max_length=200, label="Run id")
    age = forms.ChoiceField(required=False, choices=AGE_CHOICES)
    sort = forms.ChoiceField(required=False, choices=TURN_SORT_CHOICES)
    assignee = forms.RegexField(
        required=False,
        max_length=150,
        regex=r"^[\w.@+-]+$",
        label="Assigned to",
        help_text="me, none, or a user name",
    )
    per_page = forms.TypedChoiceField(required=False, choices=PAGE_CHOICES, coerce=int, empty_value=None, label="Rows")

    FILTER_FIELDS = (*FILTER_NAMES, "assignee")


class RunFilterForm(_GetForm):
    q = forms.CharField(required=False, max_length=200, label="Search", help_text="Run id contains")
    status = forms.ChoiceField(required=False, choices=RUN_STATUS_CHOICES)
    state = forms.ChoiceField(required=False, choices=RUN_STATE_CHOICES, label="Journal")
    reason = forms.ChoiceField(required=False, choices=REASON_CHOICES)
    age = forms.ChoiceField(required=False, choices=AGE_CHOICES)
    sort = forms.ChoiceField(required=False, choices=RUN_SORT_CHOICES)
    per_page = forms.TypedChoiceField(required=False, choices=PAGE_CHOICES, coerce=int, empty_value=None, label="Rows")


KIND_CHOICES = [("", "any kind")] + [
    (k, k.replace("_", " "))
    for k in (
        "turn_planned",
        "phase_committed",
        "intent_dispatched",
        "effect_observed",
        "turn_terminal",
        "fork",
        "checkpoint",
    )
]


class RecordFilterForm(_GetForm):
    """The event history's filters: a record's kind, the turn it names, its branch."""

    kind = forms.ChoiceField(required=False, choices=KIND_CHOICES, label="Kind")
    turn = forms.CharField(required=False, max_length=200, label="Turn id")
    branch = forms.IntegerField(required=False, min_value=0, label="Branch")


REASON_MAX = 2000


class ReasonForm(forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Why: recorded with your name in the turn's history.",
    )

    def clean_reason(self) -> str:
        reason: str = self.cleaned_data["reason"].strip()
        if len(reason) < 3:
            raise forms.ValidationError("Say why in a few words.")
        return reason


EVIDENCE_CHOICES = [("happened", "it happened"), ("not_happened", "it did not happen")]


class DecisionForm(ReasonForm):
    """A decision on one turn: its reason, and the version of the turn's state the page showed
    (recovery.state.state_version), which the service compares with the current one."""

    state_version = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)

    def seen(self) -> str | None:
        """The version the person decided on; None from a form that carried none."""
        return self.cleaned_data.get("state_version") or None


class ApproveForm(DecisionForm):
    """An approval; one evidence field per indeterminate intent (named ``evidence__<intent id>``)."""

    def __init__(
        self,
        *args: Any,
        indeterminate: list[str] | None = None,
        names: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """``names``: an imported run's intents in its source's words (``ChargeCard (activity:1)``), for the
        questions' labels; the fields stay keyed by position and the intents by their ids."""
        super().__init__(*args, **kwargs)
        self.indeterminate = list(indeterminate or [])
        for index, intent in enumerate(self.indeterminate):
            self.fields[f"evidence_{index}"] = forms.ChoiceField(
                choices=EVIDENCE_CHOICES,
                widget=forms.RadioSelect,
                label=intent,
                help_text="Required: an unsafe effect with no readback cannot be approved without your finding.",
            )
        self.name_intents(names or {})

    def name_intents(self, names: dict[str, str]) -> None:
        """Ask about each intent by its name in the source's words, where ``names`` has one."""
        for index, intent in enumerate(self.indeterminate):
            label = names.get(intent, intent)
            self.fields[f"evidence_{index}"].label = label
            self[f"evidence_{index}"].label = label  # a bound form has made its fields already

    def evidence(self) -> dict[str, str]:
        return {intent: self.cleaned_data[f"evidence_{i}"] for i, intent in enumerate(self.indeterminate)}

    def evidence_fields(self) -> list[forms.BoundField]:
        return [self[f"evidence_{i}"] for i in range(len(self.indeterminate))]


BULK_ACTIONS = (("approve", "Approve"), ("block", "Block"))


class BulkForm(ReasonForm):
    action = forms.ChoiceField(choices=BULK_ACTIONS)
    # The count the operator confirmed: if the filter now matches another number, ask again.
    expected = forms.IntegerField(min_value=0)


# The zones a list offers (type any other IANA name): a handful per region, not all ~600 of the database.
COMMON_ZONES = (
    "UTC",
    "America/Los_Angeles",
    "America/Denver",
    "America/Chicago",
    "America/New_York",
    "America/Sao_Paulo",
    "Europe/London",
    "Europe/Dublin",
    "Europe/Lisbon",
    "Europe/Paris",
    "Europe/Berlin",
    "Europe/Warsaw",
    "Europe/Helsinki",
    "Europe/Moscow",
    "Africa/Lagos",
    "Africa/Johannesburg",
    "Asia/Dubai",
    "Asia/Kolkata",
    "Asia/Singapore",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Pacific/Auckland",
)


def _known_zone(value: str) -> str:
    if value not in zoneinfo.available_timezones():
        raise forms.ValidationError("Not a time zone name: type one like Europe/Berlin or pick one from the list.")
    return value


class TimezoneForm(forms.Form):
    zone = forms.CharField(
        label="Time zone",
        max_length=64,
        validators=[_known_zone],  # type: ignore[list-item]  # Django ignores what a validator returns; the stubs want None
        widget=forms.TextInput(attrs={"list": "zone-list", "autocomplete": "off", "spellcheck": "false"}),
        help_text="Type to search, e.g. Berlin or Tokyo; any IANA zone name works.",
    )
