"""nftables' own library (libnftables, installed with the nft tool), through ctypes: the same
input as ``nft -f``, run in this process.

Measured with a 5000-chain table (bench/RESULTS.md): a one-element transaction costs 3.5 ms
this way against 24 ms for a run of the nft program, which starts, loads its libraries and
reads the table back into its cache every time; a label change's latency in the nftables mode
is mostly that. Listings are nft's text, not its JSON: the JSON output costs three times as
much (a 10,000-endpoint node's table: 0.3-0.5 s against 0.11-0.13 s, and its parse 0.12-0.2 s
against 0.01-0.02 s).

The library is not safe in two threads at once, even with a context each: it keeps
process-wide state. Every command ends by freeing a global cache of interface names, which
any command that parses or prints an interface index fills (our ``fib ... oif`` rules do): two
such commands at once corrupt the heap and abort the agent (reproduced: eight threads listing
a chain with one such rule, "double free or corruption"). Up to 1.0.x the JSON output also
splits set type names with the process's ``strtok``. So every call into the library, on any
context, holds one process-wide lock; the two families' commands take turns (the kernel's
work for one is inside its call). Where the library cannot be loaded, the nft program is run
instead (a process each: no shared state).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

import trio

from pyfelix.errors import DataplaneWriteError
from pyfelix_dataplane.linux.commands import CALLS, ERRORS, run

log = logging.getLogger(__name__)

#: The library's soname (nftables 0.9.3 to 1.1).
SONAME = "libnftables.so.1"
#: libnftables' output flags (libnftables.h): listings without counters' values, and with
#: base chains' priorities as numbers (as the rendering writes them), not names.
OUTPUT_STATELESS = 1 << 2
OUTPUT_NUMERIC_PRIO = 1 << 8
#: The same for the nft program.
LISTING_OPTIONS = ("--stateless", "--numeric-priority")


def _load() -> ctypes.CDLL | None:
    # By its soname first: find_library runs ldconfig in a child (a fork of the agent).
    try:
        lib = ctypes.CDLL(SONAME)
    except OSError:
        name = ctypes.util.find_library("nftables")
        if name is None:
            return None
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            return None
    lib.nft_ctx_new.restype = ctypes.c_void_p
    lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
    for function in ("nft_ctx_buffer_output", "nft_ctx_buffer_error"):
        getattr(lib, function).argtypes = [ctypes.c_void_p]
    for function in ("nft_ctx_get_output_buffer", "nft_ctx_get_error_buffer"):
        getattr(lib, function).argtypes = [ctypes.c_void_p]
        getattr(lib, function).restype = ctypes.c_char_p
    lib.nft_ctx_output_set_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint]
    lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return lib


_LIB: ctypes.CDLL | None = None
_LOADED = False
#: Held by every call into the library, whichever context it runs on (see above).
_CALLS = threading.Lock()


def _library() -> ctypes.CDLL | None:
    global _LIB, _LOADED
    if not _LOADED:
        _LIB, _LOADED = _load(), True
        if _LIB is None:
            log.info("libnftables not found: running the nft program for each transaction")
    return _LIB


class Nft:
    """One libnftables context (two: listings have output flags of their own), or the nft
    program."""

    def __init__(self) -> None:
        lib = _library()
        self._lib = lib
        if lib is not None:
            self._ctx, self._listing = lib.nft_ctx_new(0), lib.nft_ctx_new(0)
            lib.nft_ctx_output_set_flags(self._listing, OUTPUT_STATELESS | OUTPUT_NUMERIC_PRIO)
            for ctx in (self._ctx, self._listing):
                lib.nft_ctx_buffer_output(ctx)
                lib.nft_ctx_buffer_error(ctx)

    def _run_here(self, text: str, listing: bool) -> tuple[int, str, str]:
        assert self._lib is not None
        ctx = self._listing if listing else self._ctx
        with _CALLS:
            code = self._lib.nft_run_cmd_from_buffer(ctx, text.encode())
            output = self._lib.nft_ctx_get_output_buffer(ctx) or b""
            error = self._lib.nft_ctx_get_error_buffer(ctx) or b""
        return code, output.decode(errors="replace"), error.decode(errors="replace")

    async def transaction(self, script: str) -> None:
        """Run ``script`` as one transaction; DataplaneWriteError with nft's message (which
        quotes the failing line) when the kernel or the parser refuses it."""
        if self._lib is None:
            await run(["nft", "-f", "-"], script)
            return
        CALLS["nft"] += 1
        code, _, error = await trio.to_thread.run_sync(self._run_here, script, False)
        if code != 0:
            ERRORS["nft"] += 1
            raise DataplaneWriteError("nft", error.strip() or f"exit {code}")

    async def listing(self, command: str) -> str:
        """A ``list`` command's text ("" when it fails: nothing to list)."""
        if self._lib is None:
            return await run(["nft", *LISTING_OPTIONS, *command.split()], check=False)
        CALLS["nft-list"] += 1
        code, output, _ = await trio.to_thread.run_sync(self._run_here, command, True)
        if code != 0:
            ERRORS["nft-list"] += 1
        return output if code == 0 else ""
