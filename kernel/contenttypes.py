"""Moving a model between apps without touching its table: its content type must follow it, or the
permissions granted on it (and the role groups holding them) would stay behind under the old app."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def content_types_relabel(source: str, target: str, models: tuple[str, ...]) -> Callable[[Any, Any], None]:
    """A migration step that moves the content types of ``models`` from app ``source`` to app ``target``.
    Nothing to move on a new database (content types are created after migrate)."""

    def relabel(apps: Any, schema_editor: Any) -> None:
        content_type = apps.get_model("contenttypes", "ContentType")
        content_type.objects.using(schema_editor.connection.alias).filter(app_label=source, model__in=models).update(
            app_label=target
        )

    return relabel
