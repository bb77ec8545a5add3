"""The console's writes of its own: an operator's annotations of a turn, recorded with the diff, and a
person's saved views of a list."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.http import QueryDict
from django.utils import timezone

from journals import access
from journals.actors import Actor, person_of
from journals.models import Turn, TurnEffective
from journals.storable import storable
from kernel.errors import ServiceError
from recovery.state import DONE
from trail.services import operator_action_record, reason_clean

from .forms import RunFilterForm, TurnFilterForm
from .models import SavedView, TurnAnnotation

EDITABLE = ("lineage_repair", "notes")
MAX_TEXT = 4000


class AnnotationError(ServiceError):
    pass


def turn_annotate(*, turn: Turn, actor: Actor, changes: dict[str, str], reason: str) -> TurnAnnotation:
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
        annotation.updated_by = person_of(actor)
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


# --- Saved views -------------------------------------------------------------------------------------------

# The lists a view may be saved of, each with the filter form that reads its address.
SAVED_VIEW_PAGES: dict[str, type[TurnFilterForm] | type[RunFilterForm]] = {
    "turns": TurnFilterForm,
    "runs": RunFilterForm,
}
SAVED_VIEWS_MAX = 50  # per person and list: a list page shows them all
NAME_MAX = 80
QUERY_MAX = 2000


class SavedViewError(ServiceError):
    pass


def saved_view_query(*, page: str, query: str) -> str:
    """``query`` as the list's own filter form accepts it, its filters in the form's order. A key the form
    does not know, a filter given twice or a value it refuses is refused with what is wrong: a list page
    drops such values silently, a saved view must not keep them."""
    form_class = SAVED_VIEW_PAGES.get(page)
    if form_class is None:
        raise SavedViewError(400, "page_unknown", "Views are saved of the turns list and the runs list only.")
    if len(query) > QUERY_MAX:
        raise SavedViewError(400, "query_too_long", f"The filter is longer than {QUERY_MAX} characters.")
    data = QueryDict(query)
    unknown = sorted(set(data) - set(form_class.base_fields))
    if unknown:
        raise SavedViewError(400, "filter_unknown", f"Not a filter of the {page} list: {', '.join(unknown)}.")
    repeated = sorted(key for key in data if len(data.getlist(key)) > 1)
    if repeated:
        raise SavedViewError(400, "filter_repeated", f"Each filter is given once: {', '.join(repeated)}.")
    form = form_class(data)
    if not form.is_valid():
        wrong = "; ".join(f"{name}: {' '.join(str(e) for e in errors)}" for name, errors in form.errors.items())
        raise SavedViewError(400, "filter_invalid", f"The list refuses a value of the filter ({wrong}).")
    kept = QueryDict(mutable=True)
    for name in form_class.base_fields:
        if data.get(name, "") != "":
            kept[name] = data[name]
    if not kept:
        raise SavedViewError(400, "filter_empty", "There is no filter to save: choose one and apply it first.")
    return kept.urlencode()


def saved_view_create(*, user: Any, page: str, name: str, query: str) -> SavedView:
    """Save ``query`` (validated by saved_view_query) under ``name`` for ``user`` on ``page``: the one writer of
    SavedView. A name is unique per person and list; the existing view is kept, never replaced."""
    if not access.can_view(user):
        raise SavedViewError(403, "role_required", "Saving a view needs the viewer role.")
    name = " ".join(name.split())
    if not name:
        raise SavedViewError(400, "name_required", "Give the view a name.")
    if len(name) > NAME_MAX or not name.isprintable():
        raise SavedViewError(400, "name_invalid", f"A name is printable text of at most {NAME_MAX} characters.")
    query = saved_view_query(page=page, query=query)
    if SavedView.objects.filter(user=user, page=page).count() >= SAVED_VIEWS_MAX:
        raise SavedViewError(409, "too_many", f"You have {SAVED_VIEWS_MAX} saved views of this list: delete one.")
    try:
        with transaction.atomic():
            return SavedView.objects.create(user=user, page=page, name=name, query=query)
    except IntegrityError:
        raise SavedViewError(409, "name_taken", f"You already have a view named “{name}”.") from None


def saved_view_delete(*, view: SavedView, actor: Actor) -> None:
    """Delete a saved view: only its owner may, anyone else is told it does not exist."""
    if view.user_id != getattr(actor, "pk", None):
        raise SavedViewError(404, "not_found", "No such saved view.")
    view.delete()
