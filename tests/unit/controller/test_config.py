"""The controller's configuration is read as a broker's is (same file format, ISRSIM_* variables and
--override, same precedence, same errors naming the key), with its own keys and defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.config import ControllerConfig
from server.config import ConfigError


def load(
    tmp_path: Path, text: str | None = None, overrides: list[str] | None = None, **env: str
) -> ControllerConfig:
    path = None
    if text is not None:
        path = tmp_path / "controller.properties"
        path.write_text(text)
    return ControllerConfig.load(path, overrides or [], environ=env)


def test_defaults(tmp_path: Path) -> None:
    c = load(tmp_path)
    assert c.node_id == 1000
    assert c.cluster_id == "isrsim"
    assert c.listener == ("127.0.0.1", 9093)
    assert c.get_int("broker.session.timeout.ms") == 9000
    defaults = c.topic_defaults
    assert (defaults.num_partitions, defaults.default_replication_factor) == (1, 1)
    assert defaults.min_insync_replicas == 1
    assert defaults.unclean_leader_election_enable is False


def test_precedence_file_then_env_then_override(tmp_path: Path) -> None:
    text = "node.id=7\nmetadata.log.dir=/srv/ctl\nnum.partitions=3\nunclean.leader.election.enable=yes\n"
    c = load(tmp_path, text, ["num.partitions=5"], ISRSIM_NUM_PARTITIONS="4", ISRSIM_NODE_ID="8")
    assert c.node_id == 8
    assert c.directory == Path("/srv/ctl")
    assert c.topic_defaults.num_partitions == 5
    assert c.topic_defaults.unclean_leader_election_enable is True


def test_unknown_keys_are_kept_for_a_warning(tmp_path: Path) -> None:
    c = load(tmp_path, "node.id=1\nlog.dirs=/x\n")  # a broker key: unknown to the controller
    assert c.unknown_keys == ["log.dirs"]


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("node.id=one", "node.id"),
        ("node.id=-1", "node.id"),
        ("default.replication.factor=0", "default.replication.factor"),
        ("unclean.leader.election.enable=perhaps", "unclean.leader.election.enable"),
        ("listeners=nowhere", "listeners"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, override: str, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, overrides=[override])
    assert key in str(exc.value)
