"""A turn as a runtime lives it: claimed, its lease kept, its unsafe effects written ahead at the server.

``Gate.turn(journal, turn, lineage=..., worker_id=...)`` returns a :class:`TurnSession`. Entering it plans the
turn (when the journal has not), ships, asks the gate (``TurnHeld`` on ``hold``), claims the turn and keeps
its lease with a :class:`LeaseKeeper`. After a crash, the same code resumes: it journals an operator's
finding about an unsafe effect as that effect's readback, opens a recovery audit, and ``call``/``commit``
skip what the journal says is done.

Write-ahead at the authority: an unsafe effect (or one with ``write_ahead=True``) runs only after its
``intent_dispatched`` record is acknowledged by the server under the turn's fencing token. The lease is
checked before the dispatch is written and again once it is acknowledged: the remaining lease, by the
local monotonic clock, must cover the effect's declared ``max_duration`` plus a margin. The margin assumes
bounded clock drift between this machine and the server (a rate within ``clock_drift``, 1% by default,
plus ``lease_margin`` seconds, 1 s by default), as leases always do: a worker that stalls for longer than it
declared inside the body itself is outside what any lease can protect against.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import (
    ApiError,
    Fenced,
    LeaseLost,
    LeaseTooShort,
    LoopxError,
    NothingToRecover,
    ServerError,
    Throttled,
    TransportError,
    TurnHeld,
    WriteAheadFailed,
)
from .journal import DEFAULT_PHASES, Effect, EffectClass, Journal

if TYPE_CHECKING:
    from .gate import Claim, Decision, Gate, RecoveryAudit

T = TypeVar("T")


class LeaseKeeper:
    """Keeps a claim's lease: renews it every ``every`` seconds (a third of the lease by default) in a
    daemon thread once ``start()``-ed, or when ``renew()`` is called.

    A renewal refused by the server (another worker holds the turn, or the lease had run out and came back
    with another token), or a lease whose local deadline passed before a renewal got through, marks it
    ``lost``; every later ``check`` raises ``LeaseLost``. A renewal with no answer is tried again at the
    next tick: the local deadline alone decides whether the lease is still held."""

    def __init__(
        self,
        gate: Gate,
        claim: Claim,
        *,
        every: float | None = None,
        clock_drift: float = 0.01,
        lease_margin: float = 1.0,
    ) -> None:
        if not 0 <= clock_drift < 1:
            raise ValueError("clock_drift is a rate between 0 and 1")
        self.gate = gate
        self.every = every if every is not None else max(claim.lease_seconds / 3.0, 0.05)
        self.clock_drift = clock_drift
        self.lease_margin = lease_margin
        self._claim = claim
        self._lost: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def claim(self) -> Claim:
        with self._lock:
            return self._claim

    @property
    def lost(self) -> str | None:
        """Why the lease is lost, or None while it is held."""
        with self._lock:
            if self._lost is None and self._claim.remaining() <= 0:
                self._lost = "the lease ran out before it was renewed"
            return self._lost

    def remaining(self) -> float:
        return self.claim.remaining()

    def mark_lost(self, reason: str) -> None:
        with self._lock:
            if self._lost is None:
                self._lost = reason

    def renew(self) -> Claim:
        """Renew now; ``LeaseLost`` when the lease is lost (then or before)."""
        held = self.claim
        # `lost` also says whether the local deadline passed: a lease that ran out is never renewed (the
        # server would hand out a new claim, and another worker may have acted meanwhile).
        if self.lost is not None:
            raise LeaseLost(held.turn, self.lost or "")
        try:
            renewed = self.gate.renew(held)
        except ApiError as error:
            if isinstance(error, ServerError | Throttled):
                raise  # no decision by the server: the local deadline keeps counting
            self.mark_lost(f"the renewal was refused: {error.code}")
            raise LeaseLost(held.turn, self.lost or "") from error
        if renewed.fencing_token != held.fencing_token:
            # The lease had run out on the server: this worker may have acted while nobody held it. The new
            # token is not this session's to write with (Gate.renew never sends it): handed back.
            self.mark_lost("the lease had run out on the server (the renewal came back with another token)")
            with contextlib.suppress(LoopxError):
                self.gate.release(renewed)
            raise LeaseLost(held.turn, self.lost or "")
        with self._lock:
            self._claim = renewed
        return renewed

    def check(self, intent: str, max_duration: float) -> None:
        """Refuse (``LeaseLost``, ``LeaseTooShort``) unless the lease left covers ``max_duration`` seconds:
        ``remaining * (1 - clock_drift) >= max_duration + lease_margin``."""
        held = self.claim
        if self.lost is not None:
            raise LeaseLost(held.turn, self.lost or "")
        needed = (max_duration + self.lease_margin) / (1.0 - self.clock_drift)
        remaining = held.remaining()
        if remaining < needed:
            raise LeaseTooShort(held.turn, intent, remaining, needed)

    # -- the background renewal ------------------------------------------------------------------------
    def start(self) -> LeaseKeeper:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"loopx-lease-{self.claim.turn}", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.renew()
            except LeaseLost:
                return
            except (TransportError, ServerError, Throttled):
                continue  # tried again at the next tick; the local deadline protects meanwhile
            except LoopxError as error:
                self.mark_lost(f"the renewal failed: {error}")
                return

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(self.gate.timeout, 1.0) + 1.0)


class TurnSession:
    """One turn of a runtime, from claim to release (use it through ``Gate.turn``)::

        with gate.turn(journal, "t1", lineage="ticket-1234", worker_id="worker-a") as t:
            t.commit("plan", "envelope")
            ticket = t.call("fetch", "safe", fetch_ticket)
            t.call("save", "idempotent", lambda: save(ticket), key="run-42/t1/save")
            t.call("send", "unsafe", lambda: send(ticket), max_duration=30)
            t.complete()

    ``done``: the gate says nothing of the turn may run (it is finished): ``call`` and ``commit`` then do
    nothing. ``decision``: the gate's answer on entering. ``claim``: the current claim (renewed)."""

    def __init__(
        self,
        gate: Gate,
        journal: Journal,
        turn: str,
        *,
        lineage: str,
        worker_id: str,
        phases: list[str] | None = None,
        keep_lease: bool = True,
        clock_drift: float = 0.01,
        lease_margin: float = 1.0,
    ) -> None:
        self.gate = gate
        self.journal = journal
        self.run = journal.run
        self.turn = turn
        self.lineage = lineage
        self.worker_id = worker_id
        self.phases = list(phases) if phases is not None else list(DEFAULT_PHASES)
        self.keep_lease = keep_lease
        self.clock_drift = clock_drift
        self.lease_margin = lease_margin
        self.done = False
        self.decision: Decision | None = None
        self.keeper: LeaseKeeper | None = None
        self.audit: RecoveryAudit | None = None
        self._reported: set[tuple[str, str]] = set()

    # -- entering: the gate first ------------------------------------------------------------------------
    def __enter__(self) -> TurnSession:
        journal, gate = self.journal, self.gate
        journal.limits = gate.limits()
        if self.turn not in journal.planned():
            journal.plan(self.turn, self.lineage, phases=self.phases if self.phases != list(DEFAULT_PHASES) else None)
        # A recovery when something of the turn beyond its plan was journaled before this session.
        resuming = any(e.turn == self.turn and e.kind != "turn_planned" for e in journal.entries)
        if resuming:
            self._unacknowledged_dispatches_failed()
        gate.reclaim(journal, self.worker_id)  # this worker's tokens back for records the server lacks
        gate.ship(journal)
        decision = gate.decision(self.run, self.turn, expect=journal.high_water())
        self.decision = decision
        if decision.state == "hold":
            self._let_go(decision)
            raise TurnHeld(self.turn, decision)
        if decision.state == "done":
            self.done = True
            return self
        try:
            claim = gate.claim(self.run, self.turn, self.worker_id)
        except NothingToRecover:
            self.done = True
            return self
        self.keeper = LeaseKeeper(gate, claim, clock_drift=self.clock_drift, lease_margin=self.lease_margin)
        if self.keep_lease:
            self.keeper.start()
        try:
            if resuming:
                self._settle_findings(decision)
                try:
                    self.audit = gate.open_recovery(claim)
                except NothingToRecover:
                    self.audit = None
            gate.ship(journal)
        except BaseException:
            self._leave(release=True)
            raise
        return self

    def _let_go(self, decision: Decision) -> None:
        """While a person decides, nobody holds the turn: the server refuses an operator's "it did not
        happen" while a worker's lease holds (that worker could be sending the effect right now). A lease
        of this worker's id (a crashed process of this worker: this one holds the journal's lock) is taken
        back, which keeps its token, and released."""
        holder = decision.body.get("claim")
        if not isinstance(holder, dict) or holder.get("worker_id") != self.worker_id:
            return
        with contextlib.suppress(LoopxError):
            claim = self.gate.claim(self.run, self.turn, self.worker_id)
            self.gate.release(claim)

    def _unacknowledged_dispatches_failed(self) -> None:
        """A dispatch written ahead at the server (``write_ahead: "server"``) that the server does not hold
        now, with no readback: the process that wrote it never got the acknowledgement (the server stores a
        record before it acknowledges it), so the body never ran. Its readback is ``failed``, journaled
        before anything is shipped, so the gate need not hold the turn for an operator."""
        cursors = self.gate.acknowledged(self.run)
        latest: dict[str, tuple[int, int, dict[str, Any]]] = {}
        for entry in self.journal.entries:
            if entry.turn == self.turn and entry.kind == "intent_dispatched":
                record = json.loads(entry.line)
                latest[str(record.get("intent"))] = (entry.branch, entry.lsn, record)
        for intent, (branch, lsn, record) in latest.items():
            if record.get("write_ahead") != "server" or lsn <= cursors.get(branch, -1):
                continue
            if self.journal.readback(self.turn, intent) is None:
                self.journal.observe(self.turn, intent, "failed", source="not_acknowledged")

    def _settle_findings(self, decision: Decision) -> None:
        """An unsafe effect without a readback got past the gate only with an operator's finding: journal
        it as that dispatch's readback (``settled``: it happened; ``replay``: it did not)."""
        for seen in decision.intents:
            intent = seen.get("intent")
            if not isinstance(intent, str) or not self.journal.dispatched(self.turn, intent):
                continue
            if self.journal.readback(self.turn, intent) not in (None, "unknown"):
                continue
            if seen.get("resolution") == "settled":
                self.journal.observe(self.turn, intent, "succeeded", source="operator_evidence")
            elif seen.get("resolution") == "replay":
                self.journal.observe(self.turn, intent, "failed", source="operator_evidence")

    @property
    def claim(self) -> Claim | None:
        return None if self.keeper is None else self.keeper.claim

    def renew(self) -> Claim:
        """Renew the lease now (with ``keep_lease=False``, call it more often than the lease runs out)."""
        return self._keeper().renew()

    def _keeper(self) -> LeaseKeeper:
        if self.keeper is None:
            raise LeaseLost(self.turn, "the turn is not claimed by this session")
        return self.keeper

    def _report(self, kind: str, target: str) -> None:
        audit = self.audit
        if audit is None or (kind, target) in self._reported:
            return
        if any(a.get("kind") == kind and a.get("target") == target for a in audit.planned):
            self.gate.report(audit, kind, target)
            self._reported.add((kind, target))

    # -- the turn's work ---------------------------------------------------------------------------------
    def committed(self) -> list[str]:
        """The phases of this turn committed in the journal (on any branch)."""
        phases: list[str] = []
        for entry in self.journal.entries:
            if entry.kind == "phase_committed" and entry.turn == self.turn:
                phase = json.loads(entry.line).get("phase")
                if isinstance(phase, str) and phase not in phases:
                    phases.append(phase)
        return phases

    def commit(self, *phases: str, **extra: Any) -> None:
        """Commit each of ``phases`` not yet committed (a resumed turn skips what it did before); ``extra``
        fields go into each record written."""
        if self.done:
            return
        done = self.committed()
        for phase in phases:
            if phase not in done:
                self.journal.commit(self.turn, phase, **extra)
                self._report("phase", phase)

    def complete(self) -> None:
        """Commit every planned phase not yet committed, then ``turn_terminal`` ``completed``."""
        if self.done:
            return
        self.commit(*self.phases)
        self.journal.terminal(self.turn, "completed")
        self._report("terminal", "turn_terminal")
        self.done = True

    def needed(self, intent: str, effect_class: EffectClass) -> bool:
        """Whether ``call`` would run the effect: a safe one always (it only reads), another one unless its
        latest dispatch has a ``succeeded`` readback."""
        if self.done:
            return False
        return effect_class == "safe" or self.journal.readback(self.turn, intent) != "succeeded"

    def call(
        self,
        intent: str,
        effect_class: EffectClass,
        fn: Callable[[], T],
        *,
        key: str | None = None,
        max_duration: float = 30.0,
        write_ahead: bool | None = None,
        failed_on: tuple[type[BaseException], ...] = (),
    ) -> T | None:
        """Run ``fn`` as the effect ``intent`` when it is needed (see ``needed``), between its dispatch and
        its readback, and return what it returned (None when skipped). As ``effect``, whose rules it keeps."""
        if not self.needed(intent, effect_class):
            return None
        with self.effect(intent, effect_class, key=key, max_duration=max_duration, write_ahead=write_ahead,
                         failed_on=failed_on):
            return fn()

    @contextlib.contextmanager
    def effect(
        self,
        intent: str,
        effect_class: EffectClass,
        *,
        key: str | None = None,
        max_duration: float = 30.0,
        write_ahead: bool | None = None,
        failed_on: tuple[type[BaseException], ...] = (),
        **extra: Any,
    ) -> Iterator[Effect]:
        """Run the block as the effect ``intent``, its dispatch journaled before it and its readback after
        (the rules of ``Journal.effect``). An unsafe effect, or any with ``write_ahead=True``, runs only
        after the server acknowledged its dispatch under this turn's fencing token, with lease enough left
        for ``max_duration`` seconds:

        - ``LeaseLost`` / ``LeaseTooShort`` before the dispatch: nothing is written or sent;
        - ``Fenced`` (another worker took the turn), ``WriteAheadFailed`` (no answer, another refusal), or
          the lease too short once acknowledged: the block never runs; the dispatch gets a ``failed``
          readback in the journal (the effect did not happen).

        Idempotent and safe effects keep the local write-ahead by default (the key makes a repeat
        harmless): their dispatch is durable locally before the block runs, and shipped afterwards."""
        if self.done:
            raise LeaseLost(self.turn, "the turn is finished; nothing of it may run")
        ahead = write_ahead if write_ahead is not None else effect_class == "unsafe"
        keeper = self._keeper()
        if ahead:
            keeper.check(intent, max_duration)
        elif keeper.lost is not None:
            raise LeaseLost(self.turn, keeper.lost or "")  # another worker may hold the turn: no more work
        if ahead:
            extra = {**extra, "write_ahead": "server"}  # the body runs only once the server holds this record
        record = self.journal.dispatch(self.turn, intent, effect_class, idempotency_key=key, **extra)
        effect = Effect(self.turn, intent, effect_class, key, record)
        if ahead:
            self._write_ahead(effect, keeper, max_duration)
        with self.journal.readback_of(effect, failed_on):
            yield effect
        self.gate.ship(self.journal)
        self._report("intent", intent)

    def _write_ahead(self, effect: Effect, keeper: LeaseKeeper, max_duration: float) -> None:
        """Ship the dispatch; return only once the server acknowledged it and the lease still covers the
        effect. Otherwise the dispatch gets its ``failed`` readback (the body never runs) and a typed error."""
        branch, lsn = int(effect.dispatch["branch"]), int(effect.dispatch["lsn"])
        try:
            try:
                shipped = self.gate.ship(self.journal)
            except Fenced:
                keeper.mark_lost("fenced: another worker holds the turn")
                raise
            except LoopxError as error:
                raise WriteAheadFailed(self.turn, effect.intent, lsn, error) from error
            if shipped.acknowledged.get(branch, -1) < lsn:
                raise WriteAheadFailed(self.turn, effect.intent, lsn, None, "the server's ack cursor is short of it")
            keeper.check(effect.intent, max_duration)
        except BaseException:
            effect.outcome = "failed"
            effect.readback = self.journal.observe(self.turn, effect.intent, "failed", source="not_sent")
            with contextlib.suppress(LoopxError):
                self.gate.ship(self.journal)  # best effort: refused too when fenced
            raise

    # -- leaving -------------------------------------------------------------------------------------------
    def _leave(self, *, release: bool) -> None:
        keeper, self.keeper = self.keeper, None
        if keeper is None:
            return
        keeper.stop()
        if release and keeper.lost is None:
            with contextlib.suppress(LoopxError):
                self.gate.release(keeper.claim)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            # Best effort: what was journaled reaches the server, the lease goes back for a quicker
            # takeover; the exception is the caller's.
            if not isinstance(exc, Fenced | LeaseLost):
                with contextlib.suppress(LoopxError):
                    self.gate.ship(self.journal)
            self._leave(release=True)
            return
        try:
            if self.keeper is not None:
                self.gate.ship(self.journal)
                # Closed only once the turn is done: the server reads every planned action never reported as
                # skipped and holds the turn for review. A session that leaves earlier (a LangGraph interrupt
                # waiting for a person) leaves its recovery open, as a crash does.
                if self.audit is not None and self.done:
                    self.gate.close_recovery(self.audit, note="resumed by loopx_client's turn session")
                    self.audit = None
        except BaseException:
            self._leave(release=True)
            raise
        self._leave(release=True)


__all__ = ["LeaseKeeper", "TurnSession"]
