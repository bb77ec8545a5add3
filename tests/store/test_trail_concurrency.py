"""Concurrent trail writers on PostgreSQL serialise at the chain head (trail/chain.py): however their
transactions interleave, the chain has no gap and no fork."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from trail.chain import trail_verify
from trail.models import OperatorAction, TrailHead
from trail.services import operator_action_record


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_make_one_unbroken_chain() -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(15):
                with transaction.atomic():
                    operator_action_record(actor=None, actor_name=f"writer-{n}", kind="turn_edit",
                                           reason=f"write {i}", after={"i": i})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    seqs = list(OperatorAction.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 61))
    assert not trail_verify().problems
    assert TrailHead.objects.get().seq == 60
