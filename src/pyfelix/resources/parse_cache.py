"""Each manifest file's parsed documents, kept from one start of the agent to the next.

A restarted agent (a FelixConfiguration change restarts it, as it restarts Felix; so do an
upgrade and a reboot) mostly reads the files it read the time before, and parsing and checking
them is most of its first read: 0.2 s of CPU for 10,000 endpoints in YAML. The first read keeps
each file's documents, as it hands them on (plain endpoints as their checked fields), in a
marshal file named by a hash of the file's text and of the code that parsed it (the pyfelix
sources' stats, the parsers' and Python's versions): an edited file, or another pyfelix, finds
nothing and is parsed; an entry that cannot be read is a miss, one that cannot be written is
not kept. Entries live in a directory per datastore, under /var/cache/pyfelix for root and the
user's cache directory otherwise (``PYFELIX_CACHE_DIR`` moves them, ``none`` turns this off);
each first read touches what it used, and the syncer then indexes it by the files' stats (so
that the next start finds unchanged files without reading them) and removes the rest, and
the directories of datastores that no longer exist.

What this leaves to the caller: parsing on a miss, and deciding which reads use it (the first
only: later reads are of edited files).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import marshal
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from pyfelix import __version__
from pyfelix.resources.loader import Digest, LoadResult, parse_text, read_manifest
from pyfelix.resources.parsing import Parsed

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "PYFELIX_CACHE_DIR"
#: Where root's agent keeps it (the FHS place for data a program can compute again).
SYSTEM_CACHE_DIR = Path("/var/cache/pyfelix")
#: The file in each datastore's directory naming that datastore.
ROOT_FILE = "datastore"
#: The file in each datastore's directory mapping each manifest path, as its stat was, to its
#: entry: a restart finds its unchanged files without reading them.
INDEX_FILE = "index"
_SUFFIX = ".marshal"
_PACKAGE = Path(__file__).resolve().parent.parent


Stat = tuple[int, int, int]


def stat_key(stat: os.stat_result) -> Stat:
    """What says a file is the one parsed: (inode, mtime in ns, size)."""
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def file_stat(path: Path) -> Stat | None:
    """``stat_key`` of ``path``; None if it is gone."""
    try:
        return stat_key(path.stat())
    except OSError:
        return None


def cache_base() -> Path | None:
    """Where the parse caches of this user's agents live; None when turned off."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured is not None:
        return None if configured.strip().lower() in ("", "none") else Path(configured)
    if os.geteuid() == 0:
        return SYSTEM_CACHE_DIR
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "pyfelix"


def code_identity() -> bytes:
    """What the parsed documents depend on besides the text: Python's and pyfelix's versions,
    the parsers' files, and every pyfelix source file (each by its size and modification
    time, as bytecode is checked; PyYAML is found, not imported: most starts never need it)."""
    parts = [sys.version, __version__]
    for parser in ("yaml_rs", "yaml", "_yaml"):
        spec = importlib.util.find_spec(parser)
        if spec is not None and spec.origin is not None and os.path.exists(spec.origin):
            stat = os.stat(spec.origin)
            parts.append(f"{spec.origin}:{stat.st_mtime_ns}:{stat.st_size}")
    for directory, subdirectories, files in sorted(os.walk(_PACKAGE)):
        subdirectories.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                try:
                    stat = os.stat(os.path.join(directory, name))
                except OSError:  # gone since the walk listed it (an upgrade under way)
                    parts.append(f"{directory}/{name}:gone")
                    continue
                parts.append(f"{directory}/{name}:{stat.st_mtime_ns}:{stat.st_size}")
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=16).digest()


class ParseCache:
    """One datastore's entries. ``purpose`` names what the entries hold beyond the parse (the
    digest applied to them): entries of another purpose are never read."""

    def __init__(self, directory: Path, root: Path, purpose: str) -> None:
        self.directory = directory
        self._root = root
        self._purpose = purpose.encode()
        self._salt: bytes | None = None
        self._writable = True
        self._index: dict[str, tuple[Stat, str]] | None = None

    @classmethod
    def for_datastore(cls, root: Path, purpose: str) -> ParseCache | None:
        """The cache of the datastore at ``root`` (a directory or a file), None when off."""
        base = cache_base()
        if base is None:
            return None
        resolved = root.resolve()
        name = hashlib.blake2b(str(resolved).encode(), digest_size=8).hexdigest()
        return cls(base / name, resolved, purpose)

    def _salted(self) -> bytes:
        """This pyfelix's and this purpose's part of every key (and of the index)."""
        if self._salt is None:
            self._salt = code_identity() + self._purpose
        return self._salt

    def key(self, text: str) -> str:
        """The entry name of a file whose text is ``text``."""
        digest = hashlib.blake2b(self._salted(), digest_size=20)
        digest.update(text.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def get(self, key: str) -> Parsed | None:
        """The documents kept under ``key`` (touched: this read used them), or None."""
        data = self.get_marshalled(key)
        if data is None:
            return None
        try:
            parsed = marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            return None
        return parsed if isinstance(parsed, list) else None

    def get_marshalled(self, key: str) -> bytes | None:
        """``get`` as its entry's bytes, not checked (a reader that cannot load them parses
        the file itself), or None."""
        path = self.directory / (key + _SUFFIX)
        try:
            with path.open("rb") as file:
                data = file.read()
            os.utime(path)
        except OSError:
            return None
        return data

    def put(self, key: str, parsed: Parsed) -> None:
        """Keep ``parsed`` under ``key`` (``put_marshalled``)."""
        try:
            data = marshal.dumps(parsed)
        except ValueError as exc:
            log.debug("not keeping parsed manifests in %s: %s", self.directory, exc)
            return
        self.put_marshalled(key, data)

    def put_marshalled(self, key: str, data: bytes) -> None:
        """Keep documents already marshalled under ``key``: written aside and renamed, so a
        reader finds the whole entry or none; a failure turns writing off for this process
        (said once, at debug)."""
        if not self._writable:
            return
        path = self.directory / (key + _SUFFIX)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            marker = self.directory / ROOT_FILE
            if not marker.exists():
                marker.write_text(str(self._root))
            partial.write_bytes(data)
            os.replace(partial, path)
        except OSError as exc:
            log.debug("not keeping parsed manifests in %s: %s", self.directory, exc)
            self._writable = False
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)

    def _indexed(self) -> dict[str, tuple[Stat, str]]:
        """The index, if this pyfelix wrote it for this purpose: another's (before an
        upgrade) names entries of what that one's code parsed, which this one cannot read."""
        if self._index is None:
            self._index = {}
            try:
                salt, files = marshal.loads((self.directory / INDEX_FILE).read_bytes())
                if salt == self._salted():
                    self._index = {
                        str(path): (tuple(stat), str(key)) for path, (stat, key) in files.items()
                    }
            except (OSError, EOFError, ValueError, TypeError, AttributeError):
                pass  # none yet, or unreadable: every file is looked up by its text
        return self._index

    def lookup(self, path: Path, stat: Stat) -> Parsed | None:
        """The documents of ``path`` if its entry was indexed for the file as ``stat`` says
        it is (the stat the prefetch trusts, as bytecode trusts a source's time and size)."""
        found = self._indexed().get(str(path))
        if found is None or found[0] != stat:
            return None
        return self.get(found[1])

    def fresh(self, paths: list[Path]) -> bool:
        """Whether every one of ``paths`` has an indexed entry for the file as it is now."""
        index = self._indexed()
        for path in paths:
            found = index.get(str(path))
            if found is None or found[0] != file_stat(path):
                return False
            if not (self.directory / (found[1] + _SUFFIX)).exists():
                return False
        return True

    def write_index(self, paths: list[Path]) -> None:
        """Index the entries of ``paths`` as the files are now (read again and hashed: after
        InSync, off the start's path); a file changed while it was read is left out."""
        if not self._writable or not self.directory.is_dir():
            return
        index: dict[str, tuple[Stat, str]] = {}
        for path in paths:
            try:
                before = file_stat(path)
                key = self.key(read_manifest(path))
            except (OSError, UnicodeDecodeError):
                continue
            entry = self.directory / (key + _SUFFIX)
            if before is not None and before == file_stat(path) and entry.exists():
                index[str(path)] = (before, key)
        target = self.directory / INDEX_FILE
        partial = target.with_name(f"{INDEX_FILE}.{os.getpid()}.tmp")
        try:
            partial.write_bytes(marshal.dumps((self._salted(), index)))
            os.replace(partial, target)
        except OSError as exc:
            log.debug("cannot write %s: %s", target, exc)
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        self._index = index

    def parse(self, text: str, source: str, digest: Digest | None) -> Parsed | LoadResult:
        """``parse_text`` with each dict document ``digest`` takes as what it gives, from the
        entry for ``text`` when there is one; kept when it parses."""
        key = self.key(text)
        parsed = self.get(key)
        if parsed is not None:
            return parsed
        result = parse_digested(text, source, digest)
        if not isinstance(result, LoadResult):
            self.put(key, result)
        return result

    def parse_marshalled(self, text: str, source: str, digest: Digest | None) -> bytes | None:
        """``parse`` as marshalled documents (an entry's bytes as they are kept: a hit is
        handed on without loading it, a miss marshalled once for the entry and the caller);
        None when the text does not parse or its documents do not marshal."""
        key = self.key(text)
        data = self.get_marshalled(key)
        if data is not None:
            return data
        data = parse_marshalled(text, source, digest)
        if data is not None:
            self.put_marshalled(key, data)
        return data

    def prune(self, before: float) -> int:
        """Remove this datastore's entries not used since ``before`` (a time.time()), and the
        directories of datastores that are gone; how many entries went."""
        removed = 0
        try:
            with os.scandir(self.directory) as entries:
                for entry in entries:
                    if entry.name in (ROOT_FILE, INDEX_FILE):
                        continue
                    if entry.name.endswith(".tmp") or entry.stat().st_mtime < before:
                        os.unlink(entry.path)
                        removed += 1
        except OSError as exc:
            log.debug("cannot prune %s: %s", self.directory, exc)
        self._prune_gone_datastores()
        return removed

    def _prune_gone_datastores(self) -> None:
        try:
            siblings = [p for p in self.directory.parent.iterdir() if p != self.directory]
        except OSError:
            return
        for sibling in siblings:
            try:
                root = (sibling / ROOT_FILE).read_text()
            except OSError:
                continue
            if not os.path.exists(root):
                shutil.rmtree(sibling, ignore_errors=True)


def parse_digested(text: str, source: str, digest: Digest | None) -> Parsed | LoadResult:
    """``parse_text``, each dict document ``digest`` takes given as what it gives."""
    parsed = parse_text(text, source)
    if isinstance(parsed, LoadResult) or digest is None:
        return parsed
    return [digested(entry, digest) for entry in parsed]


def parse_marshalled(text: str, source: str, digest: Digest | None) -> bytes | None:
    """``parse_digested``'s documents marshalled; None when the text does not parse or
    its documents do not marshal (the reader parses the file itself, and reports it)."""
    parsed = parse_digested(text, source, digest)
    if isinstance(parsed, LoadResult):
        return None
    try:
        return marshal.dumps(parsed)
    except ValueError:
        return None


def digested(entry: tuple[Any, int, list[int]], digest: Digest) -> tuple[Any, int, list[int]]:
    """A parsed document as ``digest`` takes it (a dict it recognises), else as it is."""
    data, line, item_lines = entry
    taken = digest(data) if type(data) is dict else None
    return entry if taken is None else (taken, line, item_lines)
