"""The one door to a history import and to a run it wrote, for the console and the API (journals.doors says
the rule): an import any of whose runs is outside the caller's scope, or a runtime token's view of an
import it did not upload, answers as a missing one does, a 404."""

from __future__ import annotations

import uuid

from django.http import Http404

from journals.actors import Actor
from journals.doors import scope_of, token_of, writer_check
from recovery.imports.models import HistoryImport, ImportedRun
from recovery.imports.services import imports_visible

NO_IMPORT = "No such import."


def history_import_for_read(*, actor: Actor, pk: uuid.UUID) -> HistoryImport:
    """The import (with the one it superseded), if ``actor`` sees every run of it."""
    found = imports_visible(scope=scope_of(actor)).select_related("supersedes").filter(pk=pk)
    token = token_of(actor)
    if token is not None:
        found = found.filter(token_id=token.pk)
    upload = found.first()
    if upload is None:
        raise Http404(NO_IMPORT)
    return upload


def history_import_for_write(*, actor: Actor, pk: uuid.UUID) -> HistoryImport:
    """The import ``actor`` is about to act on (publish its conversion again): seen, and they may write."""
    upload = history_import_for_read(actor=actor, pk=pk)
    writer_check(actor=actor)
    return upload


def imported_run_for_read(*, actor: Actor, pk: int) -> ImportedRun:
    """A run an import wrote (with its import's effect map), if ``actor`` sees it and every run of its import."""
    scope = scope_of(actor)
    visible = ImportedRun.objects.filter(
        scope.q("run_ident"), history_import__in=imports_visible(scope=scope).values("pk")
    ).select_related("history_import__map_version__map")
    found = visible.filter(pk=pk).first()
    if found is None:
        raise Http404("No such imported run.")
    return found
