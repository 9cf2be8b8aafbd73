"""The kernel tools run from Trio: their output, their failures and their timeout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux import commands


async def test_a_tool_writing_much_to_both_outputs_is_read_to_its_end() -> None:
    # More than a pipe holds on each: the tool would block if either were not read.
    script = "head -c 300000 /dev/zero | tr '\\0' e >&2; head -c 300000 /dev/zero | tr '\\0' o"
    out = await commands.run(["sh", "-c", script])
    assert out == "o" * 300_000


async def test_a_failing_tool_is_a_write_error_with_what_it_said() -> None:
    with pytest.raises(DataplaneWriteError, match="went wrong"):
        await commands.run(["sh", "-c", "echo went wrong >&2; exit 3"], "input\n")


async def test_a_tool_that_stops_reading_its_stream_fails_the_write_without_hanging() -> None:
    # Far more input than a pipe holds, to a tool that reads none of it and exits.
    chunks = ("x" * 65536 + "\n" for _ in range(200))
    with trio.fail_after(10), pytest.raises(DataplaneWriteError, match="refused"):
        await commands.run(["sh", "-c", "echo refused >&2; exit 1"], chunks)


async def test_a_tool_that_hangs_is_killed_at_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "COMMAND_TIMEOUT", 0.5)
    pid_file = tmp_path / "pid"
    with pytest.raises(DataplaneWriteError):
        await commands.run(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 30"])
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped: not even a zombie is left
