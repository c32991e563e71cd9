"""What ``cluster status`` draws: each node's /metrics address, and the time of the last refresh under
``--watch`` (no silent screen)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from rich.console import Console

from cli import status_view
from kit.cluster_files import ClusterInfo, ProcessEntry


def _cluster() -> ClusterInfo:
    def entry(node_id: int, metrics_port: int) -> ProcessEntry:
        return ProcessEntry(node_id, "127.0.0.1", 1, os.getpid(), "", "", "", "", metrics_port=metrics_port)

    return ClusterInfo(
        root="", cluster_id="isrsim", controller=entry(1000, 9100), brokers=[entry(1, 9101), entry(2, 0)]
    )


def _text(data: status_view.StatusData, **kwargs: Any) -> str:
    console = Console(width=220, record=True)
    console.print(status_view.render(data, **kwargs))
    return console.export_text()


async def test_status_shows_each_nodes_metrics_address(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_answer(host: str, port: int, api_key: int, body: dict[str, Any], timeout: float) -> Any:
        return None

    monkeypatch.setattr(status_view, "ask", no_answer)
    data = await status_view.gather(_cluster())
    assert data.controller["metrics"] == "http://127.0.0.1:9100/metrics"
    assert [b["metrics"] for b in data.brokers] == ["http://127.0.0.1:9101/metrics", None]
    text = _text(data)
    assert "http://127.0.0.1:9100/metrics" in text and "http://127.0.0.1:9101/metrics" in text
    assert status_view.status_document(data)["brokers"][0]["metrics"] == "http://127.0.0.1:9101/metrics"


async def test_a_watched_status_says_when_it_was_refreshed(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_answer(host: str, port: int, api_key: int, body: dict[str, Any], timeout: float) -> Any:
        return None

    monkeypatch.setattr(status_view, "ask", no_answer)
    data = await status_view.gather(_cluster())
    assert "refreshed 12:00:01, every 1s" in _text(data, refreshed="12:00:01, every 1s")
    assert "refreshed" not in _text(data)
