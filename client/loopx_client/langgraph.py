"""LoopX live inside LangGraph (``pip install 'loopx-client[langgraph]'``).

``LoopxCheckpointer(saver, gate, journal_dir=..., worker_id=...)`` wraps any LangGraph ``BaseCheckpointSaver``
(memory, SQLite, PostgreSQL). LangGraph keeps saving its checkpoints in that saver; the wrapper journals
each thread as a LoopX run, ``langgraph-<thread_id>``, lineage ``langgraph:<thread_id>``:

- one turn per super-step, ``step:<P>``, where ``P`` is the checkpoint the step runs from (the first step
  of a thread, which has no parent, is ``step:start``), with the phases ``tasks`` and ``checkpoint`` of
  the import's mapping (docs/imports.md). The import names the same step ``pending:<P>`` while it is in
  flight and ``checkpoint:<C>`` once its checkpoint ``C`` is saved;
- an intent per call of a tool declared with ``@effect``, ``tool:<node>:<tool>:<digest of its arguments>``,
  journaled in the turn of the step that runs it;
- when LangGraph saves the step's checkpoint, the turn commits both phases and ends ``completed``.

Before LangGraph runs anything of a thread again (``graph.invoke(None, config)``, or a
``Command(resume=...)``), the wrapper asks the gate about the step left open: a turn held for an unknown
unsafe effect raises ``TurnHeld`` naming the intent and the turn's console page. Once an operator said
the effect happened, the tool is never called again: ``interrupt()`` pauses the graph and the value given
with ``Command(resume=value)`` is what the tool returns. When the operator said it did not happen, the tool
runs again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import inspect
import json
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar, cast

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        DeltaChannelHistory,
    )
    from langgraph.config import get_config
    from langgraph.constants import CONFIG_KEY_CHECKPOINTER
    from langgraph.types import interrupt
except ImportError as missing:  # the core stays standard library only: LangGraph comes with the extra
    raise ImportError("loopx_client.langgraph needs LangGraph: pip install 'loopx-client[langgraph]'") from missing

from .errors import DurabilityNotSync, EffectOutsideGraph, LoopxError, ServerError, Throttled, TransportError, TurnHeld
from .gate import Gate
from .journal import EffectClass, Journal
from .session import TurnSession

F = TypeVar("F", bound=Callable[..., Any])

PHASES = ["tasks", "checkpoint"]  # the import's phases of a LangGraph step (docs/imports.md)
START_STEP = "start"  # the step that saves a thread's first checkpoint runs from no checkpoint

# LangGraph's loop loads a thread's latest checkpoint with its runtime in the configuration; a bare
# `get_state` does not. Only the first is about to run something, so only it asks the gate.
LOOP_CONFIG_KEY = "__pregel_runtime"
# How the loop saves its checkpoints, as it tells the saver. Only "sync" saves a step's checkpoint before
# the next step runs: otherwise a crash can lose a checkpoint whose next step already sent an effect, and
# LangGraph would redo that step under a checkpoint of another id, a turn this journal never saw.
DURABILITY_CONFIG_KEY = "__pregel_durability"

Declared = Literal["read", "idempotent", "unsafe"]
CLASSES: dict[str, EffectClass] = {"read": "safe", "idempotent": "idempotent", "unsafe": "unsafe"}
# The server may be away for a moment: a step's records stay durable in the local journal and are
# shipped with the next one. Unsafe effects never run without the server's acknowledgement anyway.
AWAY = (TransportError, ServerError, Throttled)


@dataclass
class _Thread:
    """One LangGraph thread's journal and the turn sessions open in this process."""

    run: str
    lineage: str
    journal: Journal
    lock: threading.RLock = field(default_factory=threading.RLock)
    sessions: dict[str, TurnSession] = field(default_factory=dict)
    alocks: dict[int, asyncio.Lock] = field(default_factory=dict)

    def alock(self, loop: asyncio.AbstractEventLoop) -> asyncio.Lock:
        """The thread's lock for the async effects of one event loop (an asyncio lock serves one loop)."""
        with self.lock:
            return self.alocks.setdefault(id(loop), asyncio.Lock())


def step_turn(parent: str | None) -> str:
    """The turn of the super-step that runs from checkpoint ``parent`` (None: the thread's first)."""
    return "step:" + (parent or START_STEP)


def intent_name(node: str, tool: str, arguments: dict[str, Any]) -> str:
    """The intent of one call of a tool in a node: the same call on a re-run of the step is the same
    intent (a tool called twice with the same arguments in one node is one effect)."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return f"tool:{node}:{tool}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


class LoopxCheckpointer(BaseCheckpointSaver[Any]):
    """A ``BaseCheckpointSaver`` that delegates every checkpoint to ``saver`` and journals each super-step
    of the root graph to LoopX as it is saved (module docstring). One process writes a thread's journal
    at a time (its file lock); ``close()`` (or ``with``) closes the journals."""

    def __init__(
        self,
        saver: BaseCheckpointSaver[Any],
        gate: Gate,
        *,
        journal_dir: str | Path,
        worker_id: str,
        run_prefix: str = "langgraph",
    ) -> None:
        super().__init__(serde=saver.serde)
        self.saver = saver
        self.gate = gate
        self.journal_dir = Path(journal_dir)
        self.worker_id = worker_id
        self.run_prefix = run_prefix
        self._threads: dict[str, _Thread] = {}
        self._lock = threading.Lock()

    # -- LoopX's side --------------------------------------------------------------------------------------
    def run_of(self, thread_id: str) -> str:
        return f"{self.run_prefix}-{thread_id}"

    def console_url(self, run: str, turn: str) -> str:
        """The console's list of turns filtered to this one (the console's own address of a turn needs
        the server's row id, which a runtime never sees)."""
        site = self.gate.base.removesuffix("/api/v1")
        return f"{site}/turns/?" + urllib.parse.urlencode({"run": run, "q": turn})

    def _thread(self, thread_id: str) -> _Thread:
        with self._lock:
            found = self._threads.get(thread_id)
            if found is None:
                run = self.run_of(thread_id)
                self.journal_dir.mkdir(parents=True, exist_ok=True)
                journal = Journal(self.journal_dir / f"{run}.jsonl", run=run)
                found = _Thread(run, f"langgraph:{thread_id}", journal)
                self._threads[thread_id] = found
            return found

    @staticmethod
    def _root(config: RunnableConfig) -> str | None:
        """The thread id when ``config`` is the root graph's (subgraphs are journaled with their parent's
        step), else None."""
        conf = config.get("configurable") or {}
        thread_id = conf.get("thread_id")
        if thread_id is None or conf.get("checkpoint_ns", ""):
            return None
        return str(thread_id)

    @staticmethod
    def _terminal(journal: Journal, turn: str) -> bool:
        return any(e.turn == turn and e.kind == "turn_terminal" for e in journal.entries)

    def _open(self, thread: _Thread, turn: str) -> TurnSession:
        """The turn's session in this process, opened (and the gate asked) when there is none."""
        session = thread.sessions.get(turn)
        if session is not None:
            return session
        session = self.gate.turn(thread.journal, turn, lineage=thread.lineage, worker_id=self.worker_id, phases=PHASES)
        try:
            session.__enter__()
        except TurnHeld as held:
            raise self._held(thread, held) from held
        thread.sessions[turn] = session
        return session

    def _held(self, thread: _Thread, held: TurnHeld) -> TurnHeld:
        waiting = [i for i in held.decision.intents if i.get("resolution") == "indeterminate"]
        intent = str(waiting[0].get("intent")) if waiting else None
        return TurnHeld(held.turn, held.decision, intent=intent, console=self.console_url(thread.run, held.turn))

    def _leave(self, thread: _Thread, turn: str, error: BaseException | None) -> None:
        session = thread.sessions.pop(turn, None)
        if session is not None:
            session.__exit__(type(error) if error else None, error, error.__traceback__ if error else None)

    def resume_check(self, config: RunnableConfig, saved: CheckpointTuple | None) -> None:
        """Before LangGraph runs the step due from the thread's latest checkpoint: a step this journal left
        open (a crash, an interrupt, an error) is resumed only when the gate lets it (``TurnHeld``)."""
        thread_id = self._root(config)
        conf = config.get("configurable") or {}
        if thread_id is None or LOOP_CONFIG_KEY not in conf:
            return
        durability = conf.get(DURABILITY_CONFIG_KEY, "async")  # LangGraph's default when none is given
        if durability != "sync":
            raise DurabilityNotSync(f"durability={durability!r}: invoke the graph with durability='sync'")
        if saved is None or conf.get("checkpoint_id"):
            return
        thread = self._thread(thread_id)
        turn = step_turn(saved.checkpoint["id"])
        with thread.lock:
            if turn in thread.journal.planned() and not self._terminal(thread.journal, turn):
                self._open(thread, turn)

    def step_saved(self, config: RunnableConfig) -> None:
        """LangGraph saved a checkpoint: the step that made it, from the checkpoint in ``config``, is done."""
        thread_id = self._root(config)
        if thread_id is None:
            return
        thread = self._thread(thread_id)
        parent = (config.get("configurable") or {}).get("checkpoint_id")
        turn = step_turn(parent)
        journal = thread.journal
        with thread.lock:
            if self._terminal(journal, turn):
                return  # a second child of the same checkpoint (time travel): see the limits in the docs
            if turn not in thread.sessions and turn in journal.planned():
                self._open(thread, turn)  # left open by a crashed process: the gate first
            session = thread.sessions.get(turn)
            if session is not None:
                try:
                    session.complete()
                except BaseException as error:
                    self._leave(thread, turn, error)
                    raise
                self._leave(thread, turn, None)
                return
            # A step with no declared effect: nothing to claim, its records only.
            journal.plan(turn, thread.lineage, phases=PHASES)
            for phase in PHASES:
                journal.commit(turn, phase)
            journal.terminal(turn, "completed")
            with contextlib.suppress(*AWAY):
                self.gate.ship(journal)

    # -- the effects -------------------------------------------------------------------------------------
    def run_effect(
        self,
        where: _Where,
        effect_class: EffectClass,
        fn: Callable[[], Any],
        *,
        key: str | None,
        max_duration: float,
        arguments: dict[str, Any],
    ) -> Any:
        thread = self._thread(where.thread_id)
        turn = step_turn(where.step)
        with thread.lock:
            session = self._open(thread, turn)
            intent = intent_name(where.node, where.tool, arguments)
            settled = self._settled(thread, session, intent, effect_class)
            if settled is not None:
                return interrupt(settled)
            try:
                with session.effect(intent, effect_class, key=key, max_duration=max_duration):
                    return fn()
            except BaseException as error:
                # The step stops here: the turn is let go, so that whatever runs it next asks the gate.
                self._leave(thread, turn, error)
                raise

    async def arun_effect(
        self,
        where: _Where,
        effect_class: EffectClass,
        fn: Callable[[], Any],
        *,
        key: str | None,
        max_duration: float,
        arguments: dict[str, Any],
    ) -> Any:
        thread = self._thread(where.thread_id)
        turn = step_turn(where.step)
        intent = intent_name(where.node, where.tool, arguments)
        # One effect of the thread at a time, as in the sync path; the journal is written in worker threads
        # under the thread's lock.
        async with thread.alock(asyncio.get_running_loop()):
            session, settled = await asyncio.to_thread(self._prepare, thread, turn, intent, effect_class)
            if settled is not None:
                return interrupt(settled)
            block = session.effect(intent, effect_class, key=key, max_duration=max_duration)
            await asyncio.to_thread(self._locked, thread, block.__enter__)
            try:
                result = await fn()
            except BaseException as error:
                await asyncio.to_thread(self._locked, thread, block.__exit__, type(error), error, error.__traceback__)
                await asyncio.to_thread(self._locked, thread, self._leave, thread, turn, error)
                raise
            await asyncio.to_thread(self._locked, thread, block.__exit__, None, None, None)
            return result

    def _prepare(self, thread: _Thread, turn: str, intent: str, effect_class: EffectClass) -> tuple[TurnSession, Any]:
        with thread.lock:
            session = self._open(thread, turn)
            return session, self._settled(thread, session, intent, effect_class)

    @staticmethod
    def _locked(thread: _Thread, call: Callable[..., Any], *args: Any) -> Any:
        with thread.lock:
            return call(*args)

    def _settled(self, thread: _Thread, session: TurnSession, intent: str, effect_class: EffectClass) -> Any:
        """An unsafe intent whose dispatch has a ``succeeded`` readback (the effect happened: the process
        died before its node wrote, or an operator found that it happened): the payload of the interrupt
        that asks for what the tool returned. None when the tool is to run."""
        if effect_class != "unsafe" or thread.journal.readback(session.turn, intent) != "succeeded":
            return None
        # The graph pauses here; the session is let go so that nobody holds the turn meanwhile.
        self._leave(thread, session.turn, None)
        return {
            "loopx": "effect_happened",
            "run": thread.run,
            "turn": session.turn,
            "intent": intent,
            "console": self.console_url(thread.run, session.turn),
        }

    def close(self) -> None:
        """Let go of every open turn and close the journals."""
        with self._lock:
            threads, self._threads = list(self._threads.values()), {}
        for thread in threads:
            with thread.lock:
                for turn in list(thread.sessions):
                    with contextlib.suppress(LoopxError):
                        self._leave(thread, turn, None)
                thread.journal.close()

    def __enter__(self) -> LoopxCheckpointer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- BaseCheckpointSaver, delegated ------------------------------------------------------------------
    @property
    def config_specs(self) -> list[Any]:
        return list(self.saver.config_specs)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        saved = self.saver.get_tuple(config)
        self.resume_check(config, saved)
        return saved

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.saver.list(config, filter=filter, before=before, limit=limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved = self.saver.put(config, checkpoint, metadata, new_versions)
        self.step_saved(config)
        return saved

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.saver.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.saver.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.saver.delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.saver.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.saver.prune(thread_ids, strategy=strategy)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self.saver.get_delta_channel_history(config=config, channels=channels)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.saver.get_next_version(current, channel)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        saved = await self.saver.aget_tuple(config)
        await asyncio.to_thread(self.resume_check, config, saved)
        return saved

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.saver.alist(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        saved = await self.saver.aput(config, checkpoint, metadata, new_versions)
        await asyncio.to_thread(self.step_saved, config)
        return saved

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self.saver.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.saver.adelete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.saver.adelete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.saver.acopy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.saver.aprune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self.saver.aget_delta_channel_history(config=config, channels=channels)


@dataclass(frozen=True)
class _Where:
    """Where a tool call runs: the thread, the checkpoint its step runs from, the node, the tool."""

    thread_id: str
    step: str
    node: str
    tool: str


def _where(tool: str) -> tuple[LoopxCheckpointer | None, _Where | None]:
    """The adapter and the step of the tool call running now (from LangGraph's runnable configuration),
    or (None, None) outside a graph compiled with a ``LoopxCheckpointer``."""
    try:
        config = get_config()
    except RuntimeError:
        return None, None
    conf = config.get("configurable") or {}
    saver = conf.get(CONFIG_KEY_CHECKPOINTER)
    if not isinstance(saver, LoopxCheckpointer):
        return None, None
    # LangGraph hands a task the checkpoint its step runs from, by namespace: "" is the root graph's.
    step = (conf.get("checkpoint_map") or {}).get("") or conf.get("checkpoint_id")
    metadata = config.get("metadata") or {}
    node = metadata.get("langgraph_node") or "graph"
    if conf.get("thread_id") is None or not step:
        return None, None
    return saver, _Where(str(conf["thread_id"]), str(step), str(node), tool)


def effect(
    declared: Declared, *, key: str | Callable[..., str] | None = None, max_duration: float = 30.0
) -> Callable[[F], F]:
    """Declare a tool's effect class; put it under ``@tool``::

        @tool
        @effect("idempotent", key="note/{ticket_id}")
        def save_note(ticket_id: str, text: str) -> str: ...

    ``read``: runs every time (it changes nothing). ``idempotent``: needs ``key``, a format string of the
    tool's arguments or a function of them; a re-run sends it again with the same key. ``unsafe``: runs only
    after the server acknowledged its dispatch under the turn's fencing token, never twice without an
    operator (``TurnHeld``); ``max_duration`` is what it may take (the lease must cover it)."""
    if declared not in CLASSES:
        raise ValueError("effect is one of read, idempotent, unsafe")
    if (declared == "idempotent") != (key is not None):
        raise ValueError("an idempotent effect needs a key, and only it takes one")
    effect_class = CLASSES[declared]

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)

        def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)

        def key_of(values: dict[str, Any]) -> str | None:
            if key is None:
                return None
            return key.format(**values) if isinstance(key, str) else key(**values)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                saver, where = _where(fn.__name__)
                if saver is None or where is None:
                    if effect_class != "safe":
                        raise EffectOutsideGraph(f"{fn.__name__} is {declared}: it runs inside a LoopX graph only")
                    return await fn(*args, **kwargs)
                values = arguments(args, kwargs)
                return await saver.arun_effect(
                    where,
                    effect_class,
                    lambda: fn(*args, **kwargs),
                    key=key_of(values),
                    max_duration=max_duration,
                    arguments=values,
                )

            return cast(F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            saver, where = _where(fn.__name__)
            if saver is None or where is None:
                if effect_class != "safe":
                    raise EffectOutsideGraph(f"{fn.__name__} is {declared}: it runs inside a LoopX graph only")
                return fn(*args, **kwargs)
            values = arguments(args, kwargs)
            return saver.run_effect(
                where,
                effect_class,
                lambda: fn(*args, **kwargs),
                key=key_of(values),
                max_duration=max_duration,
                arguments=values,
            )

        return cast(F, wrapper)

    return decorate


__all__ = [
    "DurabilityNotSync",
    "EffectOutsideGraph",
    "LoopxCheckpointer",
    "PHASES",
    "effect",
    "intent_name",
    "step_turn",
]
