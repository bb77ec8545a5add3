"""Two workers racing for one turn on PostgreSQL, over real concurrent connections: exactly one wins
each round, and fencing tokens only grow."""

from __future__ import annotations

import threading

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
