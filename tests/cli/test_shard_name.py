"""A NodeShard's name is bounded where it enters (admission, `busched run/up --shard`) by what the records that
carry it take (`busched.bus.wire.ShardName`): a longer name was admitted, and a scheduler started with it wrote
binding records and node ledgers its own readers refuse."""

from __future__ import annotations

import msgspec
import pytest

from busched.api import build, limits
from busched.api import objects as o
from busched.bus import messages as m
from busched.cli.main import build_parser
from busched.cli.run import settings_from_args


@pytest.mark.parametrize("command", ["run", "up"])
def test_a_shard_name_over_the_bound_is_refused_at_start(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([command, "--shard", "s" * (limits.MAX_SHARD_NAME + 1)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--shard: {limits.MAX_SHARD_NAME + 1} characters, more than {limits.MAX_SHARD_NAME}" in err


def test_a_shard_name_at_the_bound_is_taken_and_its_records_are_read_back() -> None:
    name = "s" * limits.MAX_SHARD_NAME
    args = build_parser().parse_args(["run", "--shard", name])
    assert settings_from_args(args).shard == name
    rec = m.BindingRecord(version=1, namespace="t", name="a", attempt=1, node="n", writer="w", shard=name)
    assert m.decode(m.encode(rec)).shard == name  # (what the bound is for: its readers take it)


def test_a_node_shard_over_the_bound_is_refused_at_admission() -> None:
    long = msgspec.convert({"name": "s" * (limits.MAX_SHARD_NAME + 1)}, o.NodeShardSpec)
    with pytest.raises(build.SpecError, match=f"name: {limits.MAX_SHARD_NAME + 1} characters, more than"):
        build.node_shard(long)
    build.node_shard(msgspec.convert({"name": "s" * limits.MAX_SHARD_NAME}, o.NodeShardSpec))


@pytest.mark.parametrize("command", ["run", "up"])
def test_a_shard_a_lease_cannot_name_is_refused_at_start_when_elected(command: str, caplog: pytest.LogCaptureFixture,
                                                                      tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A lease's key is 1-64 letters, digits, '-' or '_' (`busched.bus.lease`), a NodeShard's name may hold dots:
    elected (--lease, on by default) such a scheduler failed at its start with a traceback from the lease."""
    from busched.cli.main import main

    monkeypatch.chdir(tmp_path)  # (were `up` to start, its data directory is made here)

    extra = ["--check"] if command == "run" else []
    assert main([command, "--shard", "gpu.pool", *extra]) == 2  # (`up` refused before it starts anything)
    assert "--shard 'gpu.pool': a shard elected with --lease" in caplog.text
    assert main([command, "--shard", "g" * 65, *extra]) == 2


def test_a_shard_a_lease_can_name_or_one_not_elected_is_taken() -> None:
    from busched.cli.main import main

    assert main(["run", "--shard", "gpu-pool_1", "--check"]) == 0
    assert main(["run", "--shard", "gpu.pool", "--lease", "0", "--check"]) == 0
