"""Turn list filters: decision, reason, status, run and time (when the turn's picture last changed, or
when it was first stored)."""

from __future__ import annotations

import django_filters

from journals.models import DECISIONS, TURN_STATUSES, Turn


class TurnFilter(django_filters.FilterSet):
    decision = django_filters.ChoiceFilter(choices=[(d, d) for d in DECISIONS])
    reason = django_filters.CharFilter(max_length=64)
    status = django_filters.ChoiceFilter(choices=[(s, s) for s in TURN_STATUSES])
    run = django_filters.CharFilter(field_name="run__run_id", max_length=200)
    updated_after = django_filters.IsoDateTimeFilter(field_name="updated_at", lookup_expr="gte")
    updated_before = django_filters.IsoDateTimeFilter(field_name="updated_at", lookup_expr="lt")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Turn
        fields = ["decision", "reason", "status", "run"]
