"""Read calicoctl-format manifests from files and directories.

Accepted: multi-document YAML, JSON, a document that is a plain list of resources (what
``calicoctl get`` prints for several), and ``List``/``<Kind>List`` documents with ``items``.
Every problem is reported with the file, the line where the document (or list item) starts,
the resource and the field path. A file that does not parse at all yields no resources and is
flagged ``unparsable`` so that a watcher can keep the resources it held before.

Hostile input is bounded: a file larger than MAX_FILE_BYTES is refused unread, documents nested
more than MAX_DEPTH levels are refused, and YAML aliases may not expand a document beyond a
budget proportional to its text (an alias bomb of a few hundred bytes would otherwise grow
without bound).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from pyfelix.errors import Problem
from pyfelix.resources.meta import (
    MANIFEST_KIND_MODULES,
    READ_API_VERSIONS,
    Resource,
    kind_for,
    load_document,
    resource_ident,
)
from pyfelix.resources.parsing import MAX_DEPTH, Parsed
from pyfelix.resources.schema import JSON
from pyfelix.resources.skipped import unread_kind

log = logging.getLogger(__name__)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
#: No manifest comes close (250k endpoints are about 100 MB across many files).
MAX_FILE_BYTES = 256 << 20


@attrs.frozen
class Located:
    """A resource and where it was read from."""

    resource: Resource
    source: str
    line: int | None

    @property
    def key(self) -> tuple[str, str, str]:
        r = self.resource
        return (r.KIND, r.namespace, r.name)

    @property
    def ident(self) -> str:
        return self.resource.ident


Identity = tuple[str, str, str]
#: Turns some documents straight into what the caller wants (the dry-run takes plain
#: endpoints' model values), giving their identity (Kind, namespace, name) and that value, or
#: None to have the document loaded as a resource. It must accept only valid documents, and
#: the tuples its ``Digest`` made of documents (a parsed document is a dict, never a tuple).
DirectDecoder = Callable[[Any], tuple[Identity, object] | None]
#: The half of a direct decoder that can run where the documents are parsed (a worker
#: process): a document's fields, checked, as a tuple that marshals, or None to leave it as is.
Digest = Callable[[dict[str, Any]], tuple[Any, ...] | None]
#: A digest of a document's JSON text, where a typed decoder can read it without parsing all
#: of it: the tuple ``Digest`` gives of the parsed document, or None to parse it and offer it
#: to ``Digest``.
TextDigest = Callable[[bytes], tuple[Any, ...] | None]


@attrs.frozen
class TextReader:
    """A ``TextDigest``, and strings the text of every document it takes contains one of: a
    file without any is parsed whole, as it was (a file's items parsed one by one from their
    texts take twice as long as the file parsed at once)."""

    markers: tuple[str, ...]
    digest: TextDigest
    #: Reads a whole file's items ahead of ``digest``: their tuples where it can, else their
    #: texts (``syncer/plain_native.py``); None where there is none.
    split: Callable[[str], tuple[dict[str, Any] | None, list[Any]] | None] | None = None


@attrs.frozen
class Direct:
    """A document a direct decoder took: its identity, what it gave, where it was read."""

    key: Identity
    value: object
    source: str
    line: int | None

    @property
    def ident(self) -> str:
        return resource_ident(*self.key)


@attrs.frozen
class LoadResult:
    resources: tuple[Located, ...] = ()
    problems: tuple[Problem, ...] = ()
    unparsable: frozenset[str] = frozenset()
    #: The documents a direct decoder took (see load_text), in load order.
    direct: tuple[Direct, ...] = ()
    #: The kind label of each document skipped as one Felix never consumes (skipped.py).
    skipped: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def is_list_document(data: JSON) -> bool:
    """Whether a parsed document is a list of resources (``List``, ``PodList``, ...)."""
    if not (
        isinstance(data, Mapping)
        and isinstance(data.get("kind"), str)
        and data["kind"].endswith("List")
        and "items" in data
    ):
        return False
    return data["kind"] not in MANIFEST_KIND_MODULES


#: The apiVersions of an untyped ``List``: kubectl's, and calicoctl's for several kinds.
LIST_API_VERSIONS = frozenset({"v1", "projectcalico.org/v3"})


def _list_problem(data: JSON) -> str | None:
    """Why a list document's own apiVersion is wrong, or None. Its items are read only when
    it is one a client prints: a list that names no version could hold anything."""
    if not is_list_document(data):
        return None
    assert isinstance(data, Mapping)
    kind, api_version = data["kind"], data.get("apiVersion")
    if kind == "List":
        if api_version in LIST_API_VERSIONS:
            return None
        expected = "v1 (kubectl) or projectcalico.org/v3"
        return f"a List's apiVersion must be {expected}, not {api_version!r}"
    if type(api_version) is str and api_version:
        return None
    return f"{kind} has no apiVersion: its items' kind is not known"


def _list_item_kind(list_kind: str, api_version: str) -> tuple[str, str]:
    """The kind and apiVersion of a typed list's items (``NetworkPolicyList`` of
    networking.k8s.io/v1): the registered kind's own, else the list's, so that a list of a
    kind Felix never reads (``DeploymentList``) is skipped and an unknown one refused."""
    kind = list_kind.removesuffix("List")
    known = kind_for(kind, api_version)
    if known is None:
        return kind, api_version
    return known.manifest_kind(), known.API_VERSION


def _expand(data: JSON, line: int, item_lines: list[int]) -> Iterator[tuple[JSON, int]]:
    """Yield (document, line) for each resource a parsed document holds."""
    if data is None:
        return
    if isinstance(data, list):
        for index, item in enumerate(data):
            yield item, item_lines[index] if index < len(item_lines) else line
        return
    if is_list_document(data):
        items = data["items"]
        if not isinstance(items, list):
            yield {"kind": data["kind"], "items": items}, line
            return
        kind, api_version = _list_item_kind(data["kind"], data["apiVersion"])
        for index, item in enumerate(items or []):
            doc = item
            if isinstance(item, Mapping) and "kind" not in item and data["kind"] != "List":
                doc = {"apiVersion": api_version, **item, "kind": kind}
            yield doc, item_lines[index] if index < len(item_lines) else line
        return
    yield data, line


def parse_yaml(text: str) -> Parsed:
    """Every document with its start line; raises yaml.YAMLError on any syntax problem.
    yaml-rs reads what it reads as YAML 1.1 does (fast_yaml.py), the strict loader the rest.
    Both are imported on the first file parsed: a restart that finds its files in the parse
    cache parses none (fast_yaml's patterns and yaml-rs cost 7 ms to import)."""
    from pyfelix.resources.fast_yaml import parse_plain  # noqa: PLC0415

    plain = parse_plain(text)
    if plain is not None:
        return plain
    return parse_strict(text)


def parse_strict(text: str) -> Parsed:
    """``parse_yaml`` by PyYAML alone: the reference reading, and every error's. PyYAML is
    imported on the first file that needs it (most never do: 10 ms of every start)."""
    from pyfelix.resources.strict_yaml import parse_strict as strict  # noqa: PLC0415

    return strict(text)


def _parse(text: str, source: str) -> Parsed:
    if source.endswith(".json"):
        data = json.loads(text)
        return [(data, 1, [])]
    return parse_yaml(text)


def load_text(
    text: str, source: str = "<input>", direct: DirectDecoder | None = None
) -> LoadResult:
    """Load the resources in one file's text (duplicates within it are reported). With
    ``direct``, the documents it takes are in the result's ``direct``, not its resources."""
    parsed = parse_text(text, source)
    if isinstance(parsed, LoadResult):
        return parsed
    return load_parsed(parsed, source, direct)


def parse_text(text: str, source: str) -> Parsed | LoadResult:
    """The documents of a file's text, or the result of a file that does not parse."""
    try:
        return _parse(text, source)
    except json.JSONDecodeError as exc:
        problem = Problem(source, f"cannot parse JSON: {exc.msg}", exc.lineno)
        return LoadResult(problems=(problem,), unparsable=frozenset({source}))
    except RecursionError:
        # JSON's decoder (and PyYAML's composer) recurse; deep input ends here, not in a crash.
        problem = Problem(source, f"cannot parse: nested more than {MAX_DEPTH} levels deep")
        return LoadResult(problems=(problem,), unparsable=frozenset({source}))
    except Exception as exc:
        yaml = sys.modules.get("yaml")  # a YAML error comes from PyYAML, imported then
        if yaml is None or not isinstance(exc, yaml.YAMLError):
            raise
        from pyfelix.resources.strict_yaml import yaml_problem  # noqa: PLC0415

        return LoadResult(
            problems=(yaml_problem(source, exc, text),), unparsable=frozenset({source})
        )


def load_parsed(documents: Parsed, source: str, direct: DirectDecoder | None = None) -> LoadResult:
    """``load_text`` of a file parsed already (by ``parse_text``, here or in a worker)."""
    entries: list[Located | Direct] = []
    problems: list[Problem] = []
    skipped: list[str] = []
    for data, line, item_lines in documents:
        if type(data) is tuple and direct is not None:
            # A plain endpoint's checked fields (a parsed document is never a tuple).
            taken = direct(data)
            if taken is not None:
                entries.append(Direct(taken[0], taken[1], source, line))
                continue
        wrong_list = _list_problem(data)
        if wrong_list is not None:
            problems.append(Problem(source, wrong_list, line))
            continue
        for doc, doc_line in _expand(data, line, item_lines):
            if direct is not None and type(doc) in (dict, tuple):
                taken = direct(doc)
                if taken is not None:
                    entries.append(Direct(taken[0], taken[1], source, doc_line))
                    continue
            if type(doc) is dict and (
                doc.get("kind") not in MANIFEST_KIND_MODULES
                or doc.get("apiVersion") not in READ_API_VERSIONS
            ):
                label = unread_kind(doc)
                if label is not None:
                    skipped.append(label)
                    continue
            try:
                resource, found = load_document(doc, source, doc_line)
            except RecursionError:
                resource = None
                found = [Problem(source, f"nested more than {MAX_DEPTH} levels deep", doc_line)]
            problems.extend(found)
            if resource is not None:
                entries.append(Located(resource, source, doc_line))
    return _without_duplicates([entries], problems, skipped=tuple(skipped))


#: The source that stands for standard input (``pyfelix validate -``).
STDIN = "-"


@functools.cache
def stdin_text() -> str:
    """Standard input's text, read once (the load and the validation beside it read the
    same ``-``); raises OSError over MAX_FILE_BYTES, or UnicodeDecodeError."""
    data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(f"larger than {MAX_FILE_BYTES >> 20} MiB")
    return data.decode("utf-8")


def read_manifest(path: Path) -> str:
    """A manifest file's text (standard input's for ``-``); raises OSError (also for one over
    MAX_FILE_BYTES, which is not read, and for anything but a regular file) or
    UnicodeDecodeError.

    The file is opened without blocking and checked before it is read: opening a FIFO
    for reading waits for a writer, and reading a device may never end, either of which
    would leave the reader (and with it every later edit, and SIGTERM) waiting for ever."""
    if str(path) == STDIN:
        return stdin_text()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    with os.fdopen(fd, "rb") as file:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(f"{path}: not a regular file")
        if status.st_size > MAX_FILE_BYTES:
            raise OSError(f"larger than {MAX_FILE_BYTES >> 20} MiB")
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise OSError(f"larger than {MAX_FILE_BYTES >> 20} MiB")
    return data.decode("utf-8")


def _without_duplicates(
    files: Iterable[Iterable[Located | Direct]],
    problems: list[Problem],
    unparsable: frozenset[str] = frozenset(),
    skipped: tuple[str, ...] = (),
) -> LoadResult:
    """Keep the first of each Kind/namespace/name (files in order, each file's entries in
    order); every later one is an error, after ``problems``."""
    first: dict[Identity, Located | Direct] = {}
    duplicates: list[Problem] = []
    kept: list[Located] = []
    taken: list[Direct] = []
    for entries in files:
        for item in entries:
            earlier = first.get(item.key)
            if earlier is not None:
                duplicates.append(duplicate_problem(item, earlier.source, earlier.line))
                continue
            first[item.key] = item
            if isinstance(item, Located):
                kept.append(item)
            else:
                taken.append(item)
    return LoadResult(tuple(kept), (*problems, *duplicates), unparsable, tuple(taken), skipped)


def duplicate_problem(item: Located | Direct, source: str, line: int | None) -> Problem:
    """``item`` defines again what ``source`` (at ``line``) defined first."""
    where = source if line is None else f"{source}:{line}"
    return Problem(
        item.source,
        f"duplicate resource, already defined at {where}",
        item.line,
        item.ident,
    )


def escapes(root: Path, path: Path) -> bool:
    """Whether ``path`` below ``root`` is (or goes through) a symlink that leads out of it:
    the agent runs as root, so a link to /etc/shadow must not be read. Links that stay inside
    (a Kubernetes ConfigMap's ..data links) are followed."""
    try:
        return not path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):
        return True


def manifest_files_and_links(path: Path) -> tuple[list[Path], list[Path]]:
    """(manifest files below directory ``path``, sorted, hidden ones skipped; the links among
    them that lead out of ``path``, which are left out). A file ``path`` is itself."""
    if not path.is_dir():
        return [path], []
    candidates = sorted(
        p
        for p in path.rglob("*")
        if p.suffix in MANIFEST_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
        and p.is_file()
    )
    outside = [p for p in candidates if escapes(path, p)]
    return [p for p in candidates if p not in set(outside)], outside


def manifest_files(path: Path) -> list[Path]:
    """The manifest files of ``path`` (see manifest_files_and_links); links out are logged."""
    files, outside = manifest_files_and_links(path)
    for link in outside:
        log.warning("%s leads out of %s; not followed", link, path)
    return files


def manifest_sources(paths: Iterable[Path | str]) -> tuple[list[Path], list[Problem]]:
    """The manifest files of files and directories, in load order, and the problems of those
    that cannot be loaded at all (missing paths, links out of a directory)."""
    files: list[Path] = []
    problems: list[Problem] = []
    for given in paths:
        path = Path(given)
        if str(given) == STDIN:
            # Read now, before a validation worker is forked: both then see the same text.
            with contextlib.suppress(OSError, UnicodeDecodeError):
                stdin_text()
            files.append(path)
            continue
        if not path.exists():
            problems.append(Problem(str(path), "no such file or directory"))
            continue
        found, outside = manifest_files_and_links(path)
        problems.extend(
            Problem(str(link), f"a link out of {path}; not followed") for link in outside
        )
        files.extend(found)
    return files, problems


def load_file(file: Path, direct: DirectDecoder | None = None) -> LoadResult:
    """One manifest file (duplicates within it are reported)."""
    try:
        text = read_manifest(file)
    except (OSError, UnicodeDecodeError) as exc:
        problem = Problem(str(file), f"cannot read: {exc}")
        return LoadResult(problems=(problem,), unparsable=frozenset({str(file)}))
    return load_text(text, str(file), direct)


def merge(results: Iterable[LoadResult], problems: Iterable[Problem] = ()) -> LoadResult:
    """Files' results as one load: duplicates across files are errors too."""
    found = list(problems)
    unparsable: set[str] = set()
    skipped: list[str] = []
    files: list[tuple[Located | Direct, ...]] = []
    for result in results:
        files.append((*result.resources, *result.direct))
        found.extend(result.problems)
        unparsable.update(result.unparsable)
        skipped.extend(result.skipped)
    return _without_duplicates(files, found, frozenset(unparsable), tuple(skipped))


def load_paths(paths: Iterable[Path | str], direct: DirectDecoder | None = None) -> LoadResult:
    """Load files and directories; duplicates across files are errors too."""
    files, problems = manifest_sources(paths)
    return merge((load_file(file, direct) for file in files), problems)
