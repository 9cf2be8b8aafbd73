"""attrs' generated methods, kept compiled beside the bytecode.

attrs writes each class's ``__init__``, ``__eq__``, ``__hash__`` and ``__repr__`` as source
and compiles it when the class is defined: for pyfelix's 330-odd classes some 45 ms of every
process start, a tenth of the agent's start before its first read (bench/RESULTS.md). Python
keeps a module's bytecode in ``__pycache__``; this keeps attrs' there too: the code of each
generated script of a pyfelix class, under attrs' name for it and with a hash of its text (the
hash Python's own hash-based .pyc files are checked by), in one marshal file per Python
version, read at the first class definition.
A script that changed is compiled as before. The file is written where bytecode would be
(not under PYTHONDONTWRITEBYTECODE; not where the package cannot be written), by ``save``:
at the exit of a process that compiled something, and by ``write_all`` (`make venv`, the
benchmarks), which imports every module first.

The one thing a cached script does not repeat is the number attrs mixes into each class's
``__hash__`` (the hash of a name, which differs between processes with the hash seed): the
cached number is the writing process's, which serves as well, since hashes are only compared
within a process and the numbers still differ from class to class. If attrs no longer has
the function this wraps, nothing is cached.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import marshal
import os
import pkgutil
import re
import sys
import tempfile
from pathlib import Path
from types import CodeType
from typing import Any

import attr._make

#: Whose classes are cached: pyfelix's, and those of the libraries whose attrs classes every
#: agent defines as it starts (trio's and outcome's: 50-odd, 7 ms of compiling); a test's or
#: another library's would only grow the file.
PACKAGES = ("pyfelix.", "pyfelix_dataplane.", "trio.", "outcome.")
#: attrs' name for a generated script: "<attrs generated WHAT module.Class>", a linecache
#: duplicate ending "-N>".
_SCRIPT_NAME = re.compile(r"<attrs generated (\S+) ([\w.]+)(?:-\d+)?>")

Entries = dict[str, tuple[bytes, CodeType]]


def cache_path() -> Path:
    """The cache of this Python, in this package's ``__pycache__`` (not of this attrs: a
    script's code is the same whichever attrs wrote it, and asking attrs its version costs
    an import of importlib.metadata, 17 ms)."""
    name = f"attrs-methods.{sys.implementation.cache_tag}.marshal"
    return Path(__file__).with_name("__pycache__") / name


class MethodCache:
    """The compiled scripts by name; ``compiled`` counts those this process had to compile."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: Entries | None = None
        self.compiled = 0

    def code(self, script: str, name: str) -> CodeType:
        """The code of attrs' ``script`` called ``name``: from the cache if it holds this
        script's, else compiled (and kept, for a pyfelix class)."""
        match = _SCRIPT_NAME.fullmatch(name)
        if match is None or not match[2].startswith(PACKAGES):
            return compile(script, name, "exec")
        entries = self._load()
        # The hash seed's part of the script, which differs from process to process.
        seeded = str(hash(f"<attrs generated hash {match[2]}>"))
        digest = importlib.util.source_hash(script.replace(seeded, "").encode())
        entry = entries.get(name)
        if entry is not None and entry[0] == digest:
            return entry[1]
        code = compile(script, name, "exec")
        entries[name] = (digest, code)
        self.compiled += 1
        return code

    def _load(self) -> Entries:
        if self._entries is None:
            self._entries = {}
            try:
                # Read whole, then decoded: marshal.load on the file reads it object by
                # object through the buffered reader's methods, 14 ms against 3 ms.
                loaded = marshal.loads(self.path.read_bytes())
            except (OSError, EOFError, ValueError, TypeError):
                return self._entries  # none yet, or unreadable: compiled and rewritten
            if isinstance(loaded, dict):
                self._entries = loaded
        return self._entries

    def save(self, always: bool = False) -> bool:
        """Write the cache, if this process compiled something and may write bytecode (or
        ``always``, as compileall does); an atomic replace, so that a reader never sees half a
        file. Whether it was written."""
        wanted = always or (self.compiled > 0 and not sys.dont_write_bytecode)
        if self._entries is None or not wanted:
            return False
        try:
            self.path.parent.mkdir(exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".attrs-methods")
        except OSError:
            return False  # a read-only install: as with bytecode, nothing is kept
        try:
            with os.fdopen(fd, "wb") as file:
                marshal.dump(self._entries, file)
                os.fchmod(file.fileno(), Path(__file__).stat().st_mode & 0o666)  # as bytecode's
            os.replace(temporary, self.path)
        except OSError:
            Path(temporary).unlink(missing_ok=True)
            return False
        self.compiled = 0
        return True


CACHE = MethodCache(cache_path())


def _compile_and_eval(
    script: str,
    globs: dict[str, Any] | None,
    locs: Any = None,
    filename: str = "",
) -> None:
    """attrs' own, but for where the code comes from."""
    eval(CACHE.code(script, filename), globs, locs)


def install() -> None:
    """Route attrs' compilation through the cache (once; not where attrs differs)."""
    if getattr(attr._make, "_compile_and_eval", None) is None:
        return
    if attr._make._compile_and_eval is not _compile_and_eval:
        attr._make._compile_and_eval = _compile_and_eval
        atexit.register(CACHE.save)


def import_all() -> None:
    """Import every module of both packages (and with them the libraries' the agent uses), so
    that every class is in the cache."""
    for package in ("pyfelix", "pyfelix_dataplane"):
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, f"{package}."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)


def write_all() -> None:
    """The cache of every class, written whatever PYTHONDONTWRITEBYTECODE says (as compileall
    writes bytecode): what `make venv` and the benchmarks run."""
    import_all()
    if not CACHE.save(always=True):
        raise SystemExit(f"cannot write {CACHE.path}")
