"""The recovery engine: plain Python, no Django (tests/engine/test_purity.py enforces it).

Records in, typed dataclasses out. Public API (docs/engine.md):

- ``parse_line(bytes) -> ParsedLine``; ``canonical_bytes(obj)``; ``digest(obj)``; ``is_int(value)``
- ``assess(source, *, expect=None, evidence=None) -> Assessment`` where ``source`` is a re-iterable of
  lines (bytes, without newline) or a path; ``assess_path(path, ...)``
- ``fold_state(source, branch, through_lsn) -> dict``: the canonical fold of a timeline (checkpoints)
- ``ENGINE_VERSION`` (decisions) and ``PROJECTION_VERSION`` (the canonical fold's shape)
- ``redact(obj)``: section 8's public-safety projection
- ``assess_incremental(snapshot, new_lines, *, evidence=None, expect=None, changed_only=False,
  rewind_window=REWIND_WINDOW) -> (Assessment, FoldSnapshot)``; ``snapshot_load(manifest, parts) -> FoldSnapshot``;
  ``SnapshotUnusable`` (its ``reason``: fold from the start); ``forget_warm_folds()`` (the folds kept in
  memory, engine/warm.py)
"""

# First: a compiled module built from another source than the one beside it must not run (engine/compiled.py).
from . import compiled  # noqa: F401
from .canonical import ParsedLine, canonical_bytes, digest, is_int, parse_line
from .secrets import REDACTED, is_secret_field, redact
from .types import (
    DEFAULT_PHASES,
    EFFECT_INDETERMINATE,
    RUN_LEVEL,
    Assessment,
    BranchView,
    Code,
    Decision,
    EffectClass,
    Evidence,
    IntentView,
    Resolution,
    TurnDecision,
    Violation,
)

__all__ = [
    "DEFAULT_PHASES",
    "EFFECT_INDETERMINATE",
    "REDACTED",
    "RUN_LEVEL",
    "Assessment",
    "BranchView",
    "Code",
    "Decision",
    "EffectClass",
    "Evidence",
    "IntentView",
    "ParsedLine",
    "Resolution",
    "TurnDecision",
    "Violation",
    "canonical_bytes",
    "digest",
    "is_int",
    "is_secret_field",
    "parse_line",
    "redact",
]

from .assess import (
    ENGINE_VERSION,
    PROJECTION_VERSION,
    JournalUnreadable,
    OffsetMismatch,
    assess,
    assess_path,
    fold_state,
    offset_mismatches,
    proven_canonical,
    rebuild_state,
    state_digest,
)
from .assess import parse_batch as parse_canonical_batch  # ingest proves a batch canonical the same way
from .incremental import (
    REWIND_WINDOW,
    SNAPSHOT_REASONS,
    FoldSnapshot,
    KeptFold,
    SnapshotUnusable,
    assess_incremental,
    assess_kept,
    snapshot_load,
)
from .warm import forget_warm_folds

__all__ += [
    "ENGINE_VERSION",
    "PROJECTION_VERSION",
    "JournalUnreadable",
    "OffsetMismatch",
    "assess",
    "assess_path",
    "fold_state",
    "offset_mismatches",
    "parse_canonical_batch",
    "proven_canonical",
    "rebuild_state",
    "state_digest",
    "REWIND_WINDOW",
    "SNAPSHOT_REASONS",
    "FoldSnapshot",
    "KeptFold",
    "SnapshotUnusable",
    "assess_incremental",
    "assess_kept",
    "forget_warm_folds",
    "snapshot_load",
]
