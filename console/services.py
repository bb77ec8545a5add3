"""The console's one write of its own: an operator's annotations of a turn, recorded with the diff."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from journals.models import Turn, TurnEffective
from journals.storable import storable
from kernel.errors import ServiceError
from recovery.state import DONE
from trail.services import operator_action_record, reason_clean

from .models import TurnAnnotation

EDITABLE = ("lineage_repair", "notes")
MAX_TEXT = 4000


class AnnotationError(ServiceError):
    pass


def turn_annotate(*, turn: Turn, actor: Any, changes: dict[str, str], reason: str) -> TurnAnnotation:
    """Set some of a turn's annotations; the OperatorAction holds only the fields that changed (the diff).

    A finished or discarded turn is not annotated: nothing a person writes there decides anything. Notes
    hold nothing: holding a turn is a block (recovery.services.turn_block), which the gate reads.
    """
    reason = reason_clean(reason=reason)
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise AnnotationError(400, "field_not_editable", f"not editable: {', '.join(sorted(unknown))}")
    for name, value in changes.items():
        if not isinstance(value, str) or len(value) > MAX_TEXT:
            raise AnnotationError(400, "value_invalid", f"{name} must be text of at most {MAX_TEXT} characters")
    with transaction.atomic():
        locked = Turn.objects.select_for_update().select_related("run").get(pk=turn.pk)
        effective = TurnEffective.objects.filter(turn=locked).first()
        if effective is not None and effective.gate == DONE:
            raise AnnotationError(409, "turn_done", "a finished or discarded turn is not annotated")
        annotation, _ = TurnAnnotation.objects.select_for_update().get_or_create(turn=locked)
        before = {name: getattr(annotation, name) for name in EDITABLE}
        diff_before: dict[str, str] = {}
        diff_after: dict[str, str] = {}
        for name, value in changes.items():
            value = storable(value.strip())
            if before[name] != value:
                diff_before[name], diff_after[name] = before[name], value
                setattr(annotation, name, value)
        if not diff_after:
            return annotation
        annotation.updated_at = timezone.now()
        annotation.updated_by = actor if getattr(actor, "pk", None) else None
        annotation.save()
        operator_action_record(
            actor=actor,
            kind="turn_edit",
            run=locked.run,
            turn=locked,
            reason=storable(reason.strip()),
            before={"engine_lineage": locked.lineage, **diff_before},
            after={"engine_lineage": locked.lineage, **diff_after},
        )
    return annotation
