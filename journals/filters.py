"""Turn list filters: decision, reason, status, run and time (when the turn's picture last changed, or
when it was first stored)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django_filters
from django.db.models import QuerySet
from rest_framework.exceptions import ValidationError

from journals.models import DECISIONS, TURN_STATUSES, Turn


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 time, normalised to UTC before it reaches the database: PostgreSQL refuses offsets
    beyond +-15:59 that ISO 8601 allows (found by the schema fuzzing)."""

    def filter(self, qs: QuerySet[Any], value: datetime | None) -> QuerySet[Any]:
        if value is not None:
            try:
                value = value.astimezone(UTC)
            except (OverflowError, ValueError):
                raise ValidationError({self.field_name: "time out of range"}) from None
        return super().filter(qs, value)


class TurnFilter(django_filters.FilterSet):
    decision = django_filters.ChoiceFilter(choices=[(d, d) for d in DECISIONS])
    reason = django_filters.CharFilter(max_length=64)
    status = django_filters.ChoiceFilter(choices=[(s, s) for s in TURN_STATUSES])
    run = django_filters.CharFilter(field_name="run__run_id", max_length=200)
    updated_after = UtcDateTimeFilter(field_name="updated_at", lookup_expr="gte")
    updated_before = UtcDateTimeFilter(field_name="updated_at", lookup_expr="lt")
    created_after = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Turn
        fields = ["decision", "reason", "status", "run"]
