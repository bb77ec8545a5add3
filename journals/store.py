"""The journal store: the one seam between the journal's services and selectors and the database's dialect.

A store ingests a split batch and answers the three reads every API request makes (a token's lookup, a
turn list's page, a turn's detail). Two stores keep the same contract: journals/orm.py (the ORM, on any
database) and journals/postgres.py (COPY and written statements, on PostgreSQL). ``journal_store`` picks one
by the default connection's vendor (kernel.dialect.on_postgresql), once per process; neither store imports
the other, and the steps both take live in journals/intake.py. tests/store/test_seam.py plays the same
batches and reads through both.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from journals.access import EVERY_RUN, RunScope
from journals.intake import IngestResult
from journals.models import ApiToken
from journals.orm import OrmStore
from journals.postgres import PostgresStore
from kernel.dialect import on_postgresql


class TurnRows(Protocol):
    """A turn list's rows (dicts, journals.orm.turn_rows' keys) as DRF's CursorPagination pages them: ordered
    by the list's ordering or its reverse, kept past a cursor's position (``updated_at__lt`` or ``__gt``),
    sliced. A QuerySet is one; journals.postgres.TurnPageStatement is one written statement that does just
    this."""

    def order_by(self, *fields: str) -> TurnRows: ...

    def filter(self, **position: Any) -> TurnRows: ...

    def __getitem__(self, page: slice) -> Iterable[Mapping[str, Any]]: ...


@runtime_checkable
class JournalStore(Protocol):
    def records_ingest(
        self, *, run_id: str, lines: list[bytes], fencing: Mapping[str, int], expect: Mapping[int, int]
    ) -> IngestResult:
        """Store the batch ``lines`` (split by journals.intake.split_batch, not parsed) of ``run_id``
        atomically under the run's lock, ``fencing`` and ``expect`` checked there; IngestError, nothing
        stored, on refusal."""
        ...

    def api_token_find(self, *, raw: str) -> ApiToken | None:
        """The active token with this value (looked up by its hash), or None."""
        ...

    def turn_page_rows(
        self, *, scope: RunScope = EVERY_RUN, run_id: str | None = None, exact: Mapping[str, str]
    ) -> TurnRows:
        """A turn list's rows in ``scope`` (of one run when ``run_id``), filtered by exact values (a
        decision, a status, a state), for CursorPagination."""
        ...

    def turn_detail(self, *, run_id: str, turn_id: str) -> dict[str, Any] | None:
        """The API's answer for one turn (journals.serializers.TurnDetailSerializer's shape), or None."""
        ...


@functools.cache
def journal_store() -> JournalStore:
    """The store for the default connection's database. A process talks to one database: asked once."""
    orm = OrmStore()
    if on_postgresql():
        return PostgresStore(general=orm.records_ingest)
    return orm
