"""Topic configs for a managed broker: when it starts hosting a topic, it asks the controller for the topic's
configs (DESCRIBE_CONFIGS) and applies them, as Kafka's brokers apply topic-level overrides they learn from
ZooKeeper or the metadata log. Today that is ``min.insync.replicas``; until the answer arrives a partition
uses the broker's own setting."""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from protocol import controller_messages as cm
from protocol.api_keys import ApiKeys
from protocol.common import error_name
from protocol.errors import Errors
from protocol.schema import from_body
from server.backoff import ExponentialBackoff
from server.controller_channel import CONTROLLER_UNREACHABLE, ControllerChannel

log = logging.getLogger(__name__)


class TopicConfigFetcher:
    def __init__(
        self,
        broker_id: int,
        channel: ControllerChannel,
        apply: Callable[[str, dict[str, str]], None],
        *,
        retry_backoff_s: float = 0.1,
    ) -> None:
        self.broker_id = broker_id
        self.channel = channel
        self.apply = apply
        self.retry_backoff_s = retry_backoff_s
        self.known: set[str] = set()
        self.wanted: set[str] = set()
        self._wake = trio.Event()

    def want(self, topic: str) -> None:
        """Ask for ``topic``'s configs (once; a topic's configs do not change after it is created)."""
        if topic not in self.known and topic not in self.wanted:
            self.wanted.add(topic)
            self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        backoff = ExponentialBackoff(self.retry_backoff_s)
        while True:
            while not self.wanted:
                await self._wake.wait()
                self._wake = trio.Event()
            topics = sorted(self.wanted)
            request = cm.DescribeConfigsRequest(
                resources=[
                    cm.DescribeConfigsRequestResource(resource_type=cm.CONFIG_RESOURCE_TOPIC, resource_name=t)
                    for t in topics
                ]
            )
            try:
                body = await self.channel.request(ApiKeys.DESCRIBE_CONFIGS, request)
                resp = from_body(cm.DescribeConfigsResponse, body)
            except CONTROLLER_UNREACHABLE as exc:
                log.info("broker %d: DESCRIBE_CONFIGS not answered (%r); will retry", self.broker_id, exc)
                await trio.sleep(backoff.next_s())
                continue
            backoff.reset()
            for result in resp.results:
                topic = result.resource_name
                self.wanted.discard(topic)
                if result.error_code != Errors.NONE:
                    log.info(
                        "broker %d: no configs for topic %s: %s %s",
                        self.broker_id,
                        topic,
                        error_name(result.error_code),
                        result.error_message or "",
                    )
                    continue
                self.known.add(topic)
                # Only the topic's own values: for the rest the broker's own setting applies, as in Kafka.
                self.apply(
                    topic,
                    {
                        c.name: c.value
                        for c in result.configs
                        if c.value is not None and c.config_source == cm.CONFIG_SOURCE_TOPIC
                    },
                )

    def forget(self, topic: str) -> None:
        """The topic was deleted here: a topic created again with that name is asked for afresh."""
        self.known.discard(topic)
        self.wanted.discard(topic)
