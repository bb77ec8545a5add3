"""The console's forms for a team's channels and rules (notifications.views). They check shapes only; the
services (notifications.services) hold every rule."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from journals.models import TurnState

from .models import CHANNEL_KINDS, RULE_MODES, TeamChannel
from .notices import HELD_STATES

KIND_LABELS = {"email": "email", "chat": "chat (Slack-compatible webhook)", "page": "paging (PagerDuty Events v2)"}
MODE_LABELS = {
    "immediate": "immediate (escalated past the threshold when it is not 0)",
    "escalate": "escalate once the threshold has passed",
    "digest": "daily digest",
}


class ChannelForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=[(k, KIND_LABELS[k]) for k in CHANNEL_KINDS])
    target = forms.CharField(
        max_length=2000,
        required=False,
        help_text="Email: addresses separated by commas. Chat: the incoming-webhook URL. Paging: the Events API "
        "URL (https://events.pagerduty.com/v2/enqueue). A saved chat or paging URL is not shown again (its path "
        "can be a credential): leave it blank to keep it.",
    )
    secret = forms.CharField(
        max_length=200,
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Paging: the routing key. Chat: signs each message (optional). Never shown again; leave it "
        "blank to keep the one saved.",
    )
    active = forms.BooleanField(required=False, initial=True)


class RuleForm(forms.Form):
    name = forms.CharField(max_length=100)
    mode = forms.ChoiceField(choices=[(m, MODE_LABELS[m]) for m in RULE_MODES])
    states = forms.MultipleChoiceField(
        choices=[(s, TurnState(s).label) for s in HELD_STATES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every held state.",
    )
    reasons = forms.CharField(
        max_length=1000, required=False, help_text="Reason codes separated by commas. Blank: any reason."
    )
    run_prefix = forms.CharField(max_length=200, required=False, help_text="Only runs starting with this.")
    threshold_minutes = forms.IntegerField(min_value=0, max_value=43200, initial=0)
    channels = forms.ModelMultipleChoiceField(
        queryset=TeamChannel.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every active channel of the team.",
    )
    active = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, team_id: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = cast("forms.ModelMultipleChoiceField[TeamChannel]", self.fields["channels"])
        field.queryset = TeamChannel.objects.filter(team_id=team_id)

    def reason_list(self) -> list[str]:
        return [r.strip() for r in str(self.cleaned_data.get("reasons") or "").split(",") if r.strip()]
