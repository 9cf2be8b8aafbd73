"""Running the kernel tools (ipset, iptables-restore, ...) from Trio, with a timeout, turning a
failure into a DataplaneWriteError that names the failing input line."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from collections.abc import Sequence

import trio

from pyfelix.errors import PyfelixError

# iptables-restore of a large table takes about a second (PLATFORM.md 2.2); anything near this
# limit is a hung lock or a broken kernel, not a slow write.
COMMAND_TIMEOUT = 30.0
_FAILED_LINE = re.compile(r"line:? (\d+)", re.IGNORECASE)

#: Calls and failures per kind of tool ("ipset", "iptables-restore", "iptables-save"), for
#: Felix's metrics; one agent per process, so process-wide counters are the agent's.
CALLS: Counter[str] = Counter()
ERRORS: Counter[str] = Counter()


def tool_kind(program: str) -> str:
    """ip6tables-nft-restore and iptables-legacy-restore are both "iptables-restore"."""
    if program.startswith(("iptables", "ip6tables")):
        return "iptables-save" if program.endswith("-save") else "iptables-restore"
    return program


class DataplaneWriteError(PyfelixError):
    """A kernel write failed; ``line`` is the input line the tool rejected, when it says."""

    def __init__(self, command: str, stderr: str, line: str = "") -> None:
        detail = f" (failing line: {line})" if line else ""
        super().__init__(f"{command} failed: {stderr.strip()}{detail}")
        self.line = line


async def run(argv: Sequence[str], stdin: str = "", check: bool = True) -> str:
    """Run a command, feed it ``stdin``, return its stdout; raise DataplaneWriteError."""
    kind = tool_kind(argv[0])
    CALLS[kind] += 1
    # The input goes in as an in-memory file, not a pipe: a pipe is refilled 64 KiB at a time
    # by this thread, which has to win the GIL from the route writer's thread for every refill.
    with os.fdopen(os.memfd_create(kind), "w+b") as input_file:
        input_file.write(stdin.encode())
        input_file.seek(0)
        with trio.fail_after(COMMAND_TIMEOUT):
            result = await trio.run_process(
                list(argv),
                stdin=input_file.fileno(),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    stdout = result.stdout.decode(errors="replace")
    if check and result.returncode != 0:
        ERRORS[kind] += 1
        stderr = result.stderr.decode(errors="replace")
        match = _FAILED_LINE.search(stderr)
        line = ""
        if match and stdin:
            lines = stdin.splitlines()
            index = int(match.group(1)) - 1
            line = lines[index] if 0 <= index < len(lines) else ""
        raise DataplaneWriteError(" ".join(argv[:2]), stderr, line)
    return stdout


def available(tool: str) -> bool:
    try:
        subprocess.run([tool, "--version"], capture_output=True, check=False)
    except FileNotFoundError:
        return False
    return True
