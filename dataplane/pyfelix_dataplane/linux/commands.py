"""Running the kernel tools (ipset, iptables-restore, ...) from Trio, with a timeout, turning a
failure into a DataplaneWriteError that names the failing input line."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import trio

from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.pyroute import is_netlink_error

# iptables-restore of a large table takes about a second (PLATFORM.md 2.2); anything near this
# limit is a hung lock or a broken kernel, not a slow write.
COMMAND_TIMEOUT = 30.0
#: A streamed input goes through a pipe this large (root may exceed pipe-max-size), so the
#: producer never waits for the tool; and in pieces of this size, one write each.
STREAM_PIPE_SIZE = 1 << 23
STREAM_CHUNK = 1 << 18
F_SETPIPE_SZ = 1031
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


#: What fails below the kernel writers: each writer maps these (and pyroute2's NetlinkError)
#: to DataplaneWriteError.
KERNEL_ERRORS = (OSError, subprocess.SubprocessError, trio.TooSlowError)


@contextlib.contextmanager
def writing(what: str) -> Iterator[None]:
    """Map a failure below a kernel writer (a system call, netlink, a timeout) to
    DataplaneWriteError naming what was being written."""
    try:
        yield
    except DataplaneWriteError:
        raise
    except Exception as exc:
        if not (isinstance(exc, KERNEL_ERRORS) or is_netlink_error(exc)):
            raise
        raise DataplaneWriteError(what, str(exc) or type(exc).__name__) from exc


async def run(argv: Sequence[str], stdin: str | Iterable[str] = "", check: bool = True) -> str:
    """Run a command, feed it ``stdin``, return its stdout; raise DataplaneWriteError.

    Text goes in as an in-memory file: a pipe is refilled 64 KiB at a time by this thread,
    which has to win the GIL from the route writer's thread for every refill. Chunks produced
    lazily are streamed through a pipe enlarged to hold them, so the tool starts parsing while
    the rest is being produced and this thread never waits for the tool."""
    kind = tool_kind(argv[0])
    CALLS[kind] += 1
    with writing(" ".join(argv[:2])), trio.fail_after(COMMAND_TIMEOUT):
        if isinstance(stdin, str):
            text = stdin
            with os.fdopen(os.memfd_create(kind), "w+b") as input_file:
                input_file.write(stdin.encode())
                input_file.seek(0)
                result = await _run_process(argv, input_file.fileno())
        else:
            result, text = await _run_streaming(argv, stdin)
    stdout = result.stdout.decode(errors="replace")
    if check and result.returncode != 0:
        ERRORS[kind] += 1
        stderr = result.stderr.decode(errors="replace")
        match = _FAILED_LINE.search(stderr)
        line = ""
        if match and text:
            lines = text.splitlines()
            index = int(match.group(1)) - 1
            line = lines[index] if 0 <= index < len(lines) else ""
        raise DataplaneWriteError(" ".join(argv[:2]), stderr, line)
    return stdout


async def _run_process(argv: Sequence[str], stdin: int) -> subprocess.CompletedProcess[bytes]:
    """``argv`` run to its end on ``stdin``, its output collected; killed if cancelled."""
    return await _finished(*_started(argv, stdin))


def _started(argv: Sequence[str], stdin: int) -> tuple[subprocess.Popen[bytes], int, int]:
    """``argv`` started on ``stdin``, with the read ends of its output and error pipes.

    Started in this thread, not in a worker thread as ``trio.run_process`` starts a tool: the
    vfork and exec take a fraction of a millisecond, where the worker waited 30-40 ms for
    the GIL while this thread rendered the next table (the tool started that much later)."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        process = subprocess.Popen(list(argv), stdin=stdin, stdout=out_write, stderr=err_write)
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    return process, out_read, err_read


async def _finished(
    process: subprocess.Popen[bytes], out_read: int, err_read: int
) -> subprocess.CompletedProcess[bytes]:
    """What ``process`` wrote to the pipes read at ``out_read`` and ``err_read`` (closed
    here), once it has exited; it is killed if this is cancelled."""
    output: dict[int, list[bytes]] = {out_read: [], err_read: []}
    try:
        async with trio.open_nursery() as nursery:
            for pipe, received in output.items():
                nursery.start_soon(_drain, pipe, received)
        await _exited(process)
    except BaseException:
        process.kill()
        process.wait()
        raise
    stdout, stderr = (b"".join(received) for received in output.values())
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


async def _drain(pipe: int, received: list[bytes]) -> None:
    """Everything the tool writes to ``pipe`` (which this closes), until it closes it."""
    async with trio.lowlevel.FdStream(pipe) as stream:
        while data := await stream.receive_some():
            received.append(data)


async def _exited(process: subprocess.Popen[bytes]) -> None:
    """Until ``process`` has exited, reaped (its pidfd readable: no thread waits for it)."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except OSError:  # pragma: no cover (kernels before 5.3)
        await trio.to_thread.run_sync(process.wait, abandon_on_cancel=True)
        return
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    process.wait()


def _enlarge(pipe: int) -> None:
    """As large as allowed: above pipe-max-size only with CAP_SYS_RESOURCE."""
    try:
        fcntl.fcntl(pipe, F_SETPIPE_SZ, STREAM_PIPE_SIZE)
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
            fcntl.fcntl(pipe, F_SETPIPE_SZ, min(limit, STREAM_PIPE_SIZE))


async def _run_streaming(
    argv: Sequence[str], chunks: Iterable[str]
) -> tuple[subprocess.CompletedProcess[bytes], str]:
    """Run with ``chunks`` streamed to stdin; returns the result and the text sent."""
    read_end, write_end = os.pipe()
    _enlarge(write_end)
    sent: list[str] = []
    results: list[subprocess.CompletedProcess[bytes]] = []
    try:
        # The tool starts before the first chunk is produced, and parses them as they come.
        started = _started(argv, read_end)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)  # the tool's alone: if it stops reading, writing fails

    async def process() -> None:
        results.append(await _finished(*started))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(process)
        async with trio.lowlevel.FdStream(write_end) as pipe:
            pending: list[str] = []
            size = 0
            try:
                for chunk in chunks:
                    pending.append(chunk)
                    size += len(chunk)
                    if size >= STREAM_CHUNK:
                        sent += pending
                        await pipe.send_all("".join(pending).encode())
                        pending, size = [], 0
                sent += pending
                await pipe.send_all("".join(pending).encode())
            except trio.BrokenResourceError:
                pass  # the tool stopped reading: its exit status says why
    return results[0], "".join(sent)


def available(tool: str) -> bool:
    """Whether ``tool`` is on the PATH (looked up, not run: a run cost 3-5 ms of the start)."""
    return shutil.which(tool) is not None
