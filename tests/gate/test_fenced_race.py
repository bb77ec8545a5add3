"""Two writers racing for one turn on PostgreSQL, over real concurrent connections: the stale owner (whose
lease ran out and whose turn another worker claimed) and the current one send a batch for the same place
at the same moment. Exactly one batch lands, always the current owner's; the stale one is `fenced` and
nothing of it is stored, whichever reaches the run's lock first."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from journals.models import JournalRecord, Turn
from journals.services import IngestError, records_ingest
from recovery.models import TurnClaim
from recovery.services import turn_claim
from tests.journal_builder import JournalBuilder

ROUNDS = 20


def _ingest(b: JournalBuilder, lines: list[bytes], fencing: dict[str, int]) -> None:
    records_ingest(run_id=b.run, body=b.body(lines), content_type="application/x-ndjson", token=None, fencing=fencing)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_stale_owner_never_lands_when_racing_the_current_one():
    b = JournalBuilder("fence-race")
    b.plan("t1", phases=[f"p{i}" for i in range(ROUNDS)])
    _ingest(b, b.lines, {})
    turn = Turn.objects.get(run__run_id="fence-race", turn_id="t1")
    stale = turn_claim(turn=turn, worker_id="old").fencing_token
    TurnClaim.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    current = turn_claim(turn=turn, worker_id="new").fencing_token
    assert current > stale
    for round_no in range(ROUNDS):
        # Both believe the next lsn is theirs: the same place, other bytes (one of them is an lsn conflict
        # for whichever comes second, so without fencing the first would win, stale or not).
        mine = b.commit("t1", f"p{round_no}")[0]
        theirs = dict(mine, note="stale writer")
        from engine.canonical import canonical_bytes

        outcomes = _race(
            lambda: _ingest(b, [b.lines[-1]], {"t1": current}),
            lambda theirs=theirs: _ingest(b, [canonical_bytes(theirs)], {"t1": stale}),
        )
        assert outcomes[0] == "stored", (round_no, outcomes)
        assert outcomes[1] == "fenced", (round_no, outcomes)
    lines = [bytes(x) for x in JournalRecord.objects.filter(run__run_id="fence-race").order_by("seq").values_list(
        "line", flat=True)]
    assert lines == b.lines  # the current owner's records, each once, and nothing of the stale writer's


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_batch_without_the_token_never_lands_on_a_claimed_turn_under_a_racing_claim():
    """A writer without a token races a claim of the turn: either its batch commits before the claim (the
    turn was unclaimed then) or it is refused `fencing_required`; a batch that landed is whole."""
    for round_no in range(ROUNDS):
        b = JournalBuilder(f"claim-race-{round_no}")
        b.plan("t1")
        _ingest(b, b.lines, {})
        turn = Turn.objects.get(run__run_id=b.run, turn_id="t1")
        b.commit("t1", "plan", "envelope")
        outcomes = _race(
            lambda b=b: _ingest(b, b.lines[1:], {}),
            lambda turn=turn: turn_claim(turn=turn, worker_id="w"),
        )
        assert outcomes[1] == "stored", outcomes
        count = JournalRecord.objects.filter(run__run_id=b.run).count()
        assert (outcomes[0], count) in (("stored", 3), ("fencing_required", 1)), (round_no, outcomes, count)


def _race(*actions) -> list[str]:
    """Run the actions at the same moment, each on its own thread and connection: "stored" or the code."""
    barrier = threading.Barrier(len(actions))
    outcomes = [""] * len(actions)

    def run(index: int) -> None:
        try:
            barrier.wait()
            actions[index]()
            outcomes[index] = "stored"
        except IngestError as exc:
            outcomes[index] = exc.code
        except BaseException as exc:  # surfaced in the outcome: a thread's failure must fail the test
            outcomes[index] = repr(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes
