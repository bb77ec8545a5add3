"""The one door to a finding, for the console and the API (journals.doors says the rule): a finding of a
run outside the caller's scope answers as a missing one does, a 404."""

from __future__ import annotations

from django.http import Http404

from journals.actors import Actor
from journals.doors import scope_of, writer_check
from recovery.findings.models import Finding

NO_FINDING = "No such finding."


def finding_for_read(*, actor: Actor, pk: int) -> Finding:
    """The finding (its run and turn joined), if ``actor`` sees its run."""
    found = Finding.objects.select_related("run", "turn").filter(scope_of(actor).q("run__run_id"), pk=pk).first()
    if found is None:
        raise Http404(NO_FINDING)
    return found


def finding_for_write(*, actor: Actor, pk: int) -> Finding:
    """The finding ``actor`` is about to acknowledge or resolve: in their scope, and they may write."""
    finding = finding_for_read(actor=actor, pk=pk)
    writer_check(actor=actor)
    return finding
