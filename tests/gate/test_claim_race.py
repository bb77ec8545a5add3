"""Two workers racing for one turn on PostgreSQL, over real concurrent connections: exactly one wins
each round, and fencing tokens only grow."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections

from journals.models import Turn
from journals.services import records_ingest
from recovery.models import TurnClaim
from recovery.services import GateError, turn_claim, turn_release
from tests.journal_builder import JournalBuilder

ROUNDS = 40
WORKERS = 4


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_exactly_one_of_racing_workers_wins_each_round():
    b = JournalBuilder("race")
    b.plan("t1")
    records_ingest(run_id="race", body=b.body(), content_type="application/x-ndjson", token=None)
    turn = Turn.objects.get(turn_id="t1")
    tokens: list[int] = []
    for round_no in range(ROUNDS):
        wins, losses, errors = _round(turn, round_no)
        assert not errors, errors
        assert len(wins) == 1 and len(losses) == WORKERS - 1, (round_no, wins, losses)
        tokens.append(wins[0][1])
        turn_release(turn=turn, fencing_token=wins[0][1])
    assert tokens == sorted(tokens) and len(set(tokens)) == ROUNDS
    assert TurnClaim.objects.filter(turn=turn).count() == ROUNDS


def _round(turn: Turn, round_no: int) -> tuple[list[tuple[str, int]], list[str], list[BaseException]]:
    """WORKERS threads released together by a barrier, each claiming over its own connection."""
    barrier = threading.Barrier(WORKERS)
    wins: list[tuple[str, int]] = []
    losses: list[str] = []
    errors: list[BaseException] = []

    def race(worker: str) -> None:
        try:
            barrier.wait()
            claim = turn_claim(turn=turn, worker_id=worker)
            wins.append((worker, claim.fencing_token))
        except GateError as exc:
            (losses if exc.code == "claim_held" else errors).append(worker if exc.code == "claim_held" else exc)
        except BaseException as exc:  # surfaced by the caller: a thread's failure must fail the test
            errors.append(exc)
        finally:
            connections.close_all()  # each thread has its own connection

    threads = [threading.Thread(target=race, args=(f"w{round_no}-{i}",)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return wins, losses, errors


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_gate_transitions_and_background_assessments_never_deadlock(operator):
    """An assessment stores under the run's lock and then writes turn rows; a gate transition refreshes
    first and locks its turn after. Raced many times over real connections: no deadlock, no error."""
    from recovery.services import assessment_refresh, turn_block

    b = JournalBuilder("lock-order")
    for i in range(5):
        b.plan(f"t{i}")
    records_ingest(run_id="lock-order", body=b.body(), content_type="application/x-ndjson", token=None)
    turn = Turn.objects.get(run__run_id="lock-order", turn_id="t0")
    for round_no in range(15):
        b.commit(f"t{round_no % 5}", "plan") if round_no < 5 else b.dispatch("t1", f"i{round_no}")
        records_ingest(run_id="lock-order", body=b.body(b.lines[-1:]), content_type="application/x-ndjson", token=None)
        errors = _together(
            lambda: assessment_refresh(run=turn.run),
            lambda: turn_block(turn=turn, actor=operator, reason="hold"),
        )
        assert not errors, errors


def _together(*actions: Callable[[], Any]) -> list[BaseException]:
    """Run the actions at the same moment, each on its own thread and connection; their errors."""
    barrier = threading.Barrier(len(actions))
    errors: list[BaseException] = []

    def run(action: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            action()
        except BaseException as exc:  # returned to the caller: a thread's failure must fail the test
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
