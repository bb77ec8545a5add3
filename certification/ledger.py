"""The external side-effect ledger: the world the runtime acts on, in a SQLite file of its own.

It is outside the journal and outside the service on purpose: effect counts are measured here, never in
the journal (a journal can only say what the runtime *believed* it did). Every effect the receiver
accepts is one row of ``effects``. The receiver dedupes ``idempotent`` effects by key (that is what makes
them idempotent); ``unsafe`` effects are never deduped (a second call is a second effect); ``safe``
effects are reads and land in ``reads``, not in ``effects``.

A receiver may be *flaky*: it refuses the first attempt of a key (no effect row, answer ``failed``),
which is how the workload exercises a retry. Attempts are logged in the same transaction as the effect,
so the answer is a deterministic function of the ledger file even across SIGKILLs.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL, turn TEXT NOT NULL, intent TEXT NOT NULL,
    effect_class TEXT NOT NULL, idempotency_key TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS effects_idempotent_key
    ON effects(run, idempotency_key) WHERE effect_class = 'idempotent';
CREATE TABLE IF NOT EXISTS reads (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL, turn TEXT NOT NULL, intent TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL, turn TEXT NOT NULL, intent TEXT NOT NULL, answer TEXT NOT NULL
);
"""


class Ledger:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: explicit BEGIN IMMEDIATE, so one effect is one atomic transaction.
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    def receive(
        self, *, run: str, turn: str, intent: str, effect_class: str, key: str | None, flaky: bool = False
    ) -> str:
        """Apply one effect; returns the receiver's answer: ``succeeded`` or ``failed``."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            tried = db.execute(
                "SELECT COUNT(*) FROM attempts WHERE run=? AND turn=? AND intent=?", (run, turn, intent)
            ).fetchone()[0]
            if flaky and tried == 0:
                answer = "failed"  # a transient refusal: nothing happened
            elif effect_class == "safe":
                db.execute("INSERT INTO reads (run, turn, intent) VALUES (?, ?, ?)", (run, turn, intent))
                answer = "succeeded"
            elif effect_class == "idempotent":
                if key is None:
                    raise ValueError("an idempotent effect needs its key")
                db.execute(
                    "INSERT OR IGNORE INTO effects (run, turn, intent, effect_class, idempotency_key)"
                    " VALUES (?, ?, ?, 'idempotent', ?)",
                    (run, turn, intent, key),
                )
                answer = "succeeded"
            elif effect_class == "unsafe":
                db.execute(
                    "INSERT INTO effects (run, turn, intent, effect_class, idempotency_key)"
                    " VALUES (?, ?, ?, 'unsafe', NULL)",
                    (run, turn, intent),
                )
                answer = "succeeded"
            else:
                raise ValueError(f"unknown effect class {effect_class!r}")
            db.execute(
                "INSERT INTO attempts (run, turn, intent, answer) VALUES (?, ?, ?, ?)", (run, turn, intent, answer)
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return answer

    def effect_counts(self, run: str) -> dict[str, int]:
        """Effect rows per ``turn/intent``: what the world saw, the only count the rig trusts."""
        rows = self.db.execute(
            "SELECT turn, intent, COUNT(*) FROM effects WHERE run=? GROUP BY turn, intent ORDER BY turn, intent",
            (run,),
        )
        return {f"{turn}/{intent}": n for turn, intent, n in rows}

    def happened(self, *, run: str, turn: str, intent: str) -> bool:
        """The operator's readback: did the world see this effect? (what `turn_approve` evidence says)."""
        row = self.db.execute(
            "SELECT COUNT(*) FROM effects WHERE run=? AND turn=? AND intent=?", (run, turn, intent)
        ).fetchone()
        return bool(row[0])

    def snapshot(self) -> list[tuple[object, ...]]:
        """Every row of every table, for byte-for-byte before/after comparisons."""
        rows: list[tuple[object, ...]] = []
        for table in ("effects", "reads", "attempts"):
            rows.extend((table, *r) for r in self.db.execute(f"SELECT * FROM {table} ORDER BY id"))
        return rows
