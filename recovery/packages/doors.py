"""The one door to a package upload, for the console and the API (journals.doors says the rule). A runtime
token sees only its own uploads; a person, their own and those of the runs they see. Any other upload
answers as a missing one does, a 404."""

from __future__ import annotations

import uuid

from django.http import Http404

from journals.actors import Actor
from journals.doors import token_of, writer_check
from recovery.packages.models import PackageUpload
from recovery.packages.selectors import package_uploads_visible

NO_UPLOAD = "No such package upload."


def package_upload_for_read(*, actor: Actor, pk: uuid.UUID) -> PackageUpload:
    """The upload, if ``actor`` may see it."""
    token = token_of(actor)
    if token is not None:
        found = PackageUpload.objects.filter(token_id=token.pk, pk=pk).first()
    else:
        found = package_uploads_visible(user=actor).filter(pk=pk).first()
    if found is None:
        raise Http404(NO_UPLOAD)
    return found


def package_upload_for_write(*, actor: Actor, pk: uuid.UUID) -> PackageUpload:
    """The upload ``actor`` is about to act on (queue it again): one they see, and they may write."""
    upload = package_upload_for_read(actor=actor, pk=pk)
    writer_check(actor=actor)
    return upload
