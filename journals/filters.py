"""Turn list filters: decision, reason, status, run and time (when the turn's picture last changed, or
when it was first stored)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any, ClassVar

import django_filters
from django.db.models import QuerySet
from rest_framework.exceptions import ValidationError

from journals.models import DECISIONS, TURN_STATUSES, Run, RunStatus, Turn, TurnState, run_status_q, run_status_rank


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 time, normalised to UTC before it reaches the database: PostgreSQL refuses offsets
    beyond +-15:59 that ISO 8601 allows (found by the schema fuzzing)."""

    def filter(self, qs: QuerySet[Any], value: datetime | None) -> QuerySet[Any]:
        if value is not None:
            try:
                value = value.astimezone(UTC)
            except (OverflowError, ValueError):
                # The stubs allow a None field_name; the filter set's metaclass names every declared filter.
                raise ValidationError({self.field_name: "time out of range"}) from None  # type: ignore[dict-item]
        return super().filter(qs, value)


class ShallowFilterSet(django_filters.FilterSet):
    _loopx_form_class: ClassVar[Any]  # set on each subclass by get_form_class
    """django-filter deep-copies every declared filter (with its choices) on each request; a shallow copy
    per filter is enough (a filter only gains its parent, model and form field on the copy), and the deep
    copy would cost every list page its choices' copies again (benchmarks/bench_reads.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The stubs type these mappings as OrderedDict, which django-filter happens to build; it only iterates
        # and indexes them. They also leave out the model and parent that django-filter sets on each filter, and
        # allow a None queryset, which __init__ has replaced with the model's default one by now.
        self.base_filters = {}  # type: ignore[assignment]  # the instance attribute: the deep copy in __init__ copies nothing
        super().__init__(*args, **kwargs)
        del self.base_filters
        self.filters = {name: copy.copy(f) for name, f in type(self).base_filters.items()}  # type: ignore[assignment]
        for filter_ in self.filters.values():
            filter_.model = self.queryset.model  # type: ignore[attr-defined, union-attr]
            filter_.parent = self  # type: ignore[attr-defined]

    def get_form_class(self) -> Any:
        # The form class depends only on the declared filters (static choices), not on the request; django-
        # filter builds it anew, labels and all, on every request. Built once per filter set class.
        cls = type(self)
        form_class = cls.__dict__.get("_loopx_form_class")
        if form_class is None:
            form_class = super().get_form_class()
            cls._loopx_form_class = form_class
        return form_class


class TurnFilter(ShallowFilterSet):
    decision = django_filters.ChoiceFilter(choices=[(d, d) for d in DECISIONS])
    state = django_filters.ChoiceFilter(
        field_name="effective__state", choices=TurnState.choices, help_text="The effective state (docs/state.md)."
    )
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


class RunOrderingFilter(django_filters.OrderingFilter):
    """``ordering`` of the runs list: its names, each with a leading ``-`` for the reverse order. ``status``
    sorts by the status a run shows (blocked, needs_attention, running, done). Ties fall to the latest change
    first, so that pages never overlap."""

    def filter(self, qs: QuerySet[Any], value: list[str] | None) -> QuerySet[Any]:
        if not value:
            return qs
        ordering = [self.get_ordering_value(param) for param in value]
        if any(field.lstrip("-") == "status_rank" for field in ordering):
            qs = qs.annotate(status_rank=run_status_rank())
        return qs.order_by(*ordering, "-changed_at", "-id")


class RunStatusFilter(django_filters.ChoiceFilter):
    """The runs that show a status (journals.models.run_status_q: a stored done with records past the
    assessed prefix shows running). A filter of its own, not a ``method``: ShallowFilterSet's copies keep
    no parent for a method to be found on."""

    def filter(self, qs: QuerySet[Any], value: str | None) -> QuerySet[Any]:
        return qs.filter(run_status_q(value)) if value else qs


class RunFilter(ShallowFilterSet):
    status = RunStatusFilter(choices=RunStatus.choices, help_text="The run's status (docs/state.md, a run's status).")
    ordering = RunOrderingFilter(
        fields=(("status_rank", "status"), ("changed_at", "updated"), ("run_id", "run"), ("record_count", "records")),
        help_text="Sort by status (blocked first), updated, run or records; a leading - reverses it.",
    )

    class Meta:
        model = Run
        fields = ["status"]
