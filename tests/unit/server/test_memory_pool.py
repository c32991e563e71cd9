"""queued.max.request.bytes (Kafka's SimpleMemoryPool, non-strict) and Kafka's ConnectionQuotas."""

from __future__ import annotations

import pytest

from server.memory_pool import ConnectionQuotas, MemoryPool


def test_non_strict_pool_lets_one_request_overdraw_then_refuses_until_released() -> None:
    pool = MemoryPool(100)
    released: list[int] = []
    pool.add_release_listener(lambda: released.append(pool.available))
    assert pool.try_allocate(60) and pool.available == 40
    assert pool.try_allocate(90) and pool.available == -50  # any memory left: a big request is not starved
    assert not pool.try_allocate(1)
    pool.release(90)
    assert released == [40] and pool.try_allocate(30) and pool.allocated == 90
    pool.release(60)
    pool.release(30)
    assert pool.available == 100 and pool.out_of_memory_episodes == 1


def test_unbounded_pool_always_gives_and_releasing_too_much_is_a_bug() -> None:
    assert MemoryPool(-1).try_allocate(10**12) and not MemoryPool(0).bounded
    pool = MemoryPool(10)
    with pytest.raises(AssertionError):
        pool.release(1)


def test_connection_quotas_per_ip_and_in_all() -> None:
    quotas = ConnectionQuotas(max_connections=3, max_connections_per_ip=2)
    assert quotas.inc("10.0.0.1") and quotas.inc("10.0.0.1")
    assert not quotas.inc("10.0.0.1") and quotas.refused_per_ip == 1
    assert quotas.inc("10.0.0.2") and not quotas.can_accept()
    quotas.dec("10.0.0.1")
    assert quotas.can_accept() and quotas.count("10.0.0.1") == 1 and quotas.total == 2
