"""Helpers shared by the fetch session tests."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from broker.fetch_session import CachedPartition, FetchManager, PartitionResponseData
from broker.fetch_session_cache import FetchSessionCache
from protocol.common import MockTime, TopicPartition
from protocol.fetch_request import FetchRequestPartitionData


@dataclass
class Env:
    """A FetchManager over a cache, with a manual clock and seeded session ids."""

    cache: FetchSessionCache
    time: MockTime = field(default_factory=MockTime)
    manager: FetchManager = field(init=False)

    def __post_init__(self) -> None:
        self.manager = FetchManager(self.cache, self.time)


def make_env(max_entries: int = 10, eviction_ms: int = 1000) -> Env:
    return Env(FetchSessionCache(max_entries, eviction_ms, random.Random(42)))


@pytest.fixture
def env() -> Env:
    return make_env()


def dummy_create(size: int) -> dict[TopicPartition, CachedPartition]:
    return {("test", i): CachedPartition("test", i) for i in range(size)}


def req(
    fetch_offset: int, log_start_offset: int = 0, max_bytes: int = 100, epoch: int = -1
) -> FetchRequestPartitionData:
    return FetchRequestPartitionData(fetch_offset, log_start_offset, max_bytes, epoch)


def resp(
    hw: int, lso: int | None = None, log_start: int | None = None, records: bytes = b""
) -> PartitionResponseData:
    return PartitionResponseData(
        error_code=0,
        high_watermark=hw,
        last_stable_offset=hw if lso is None else lso,
        log_start_offset=hw if log_start is None else log_start,
        records=records,
    )


def error_resp(code: int) -> PartitionResponseData:
    return PartitionResponseData(
        error_code=code, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1
    )
