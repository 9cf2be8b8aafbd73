"""Validation of a large load on the second core, while the first computes.

A one-shot command on a big datastore directory spends half its time decoding and half of the
rest validating; both are per file, but handing resources between processes costs more than
decoding them (pickling a resource takes 20 us, decoding and validating it 33 us, measured in
bench/RESULTS.md). What crosses cheaply is the verdict. So ``BackgroundValidation`` forks a
child that loads and validates every file itself, keeping only the problems (it drops each
file's resources once checked, so its memory stays small), while this process loads the same
files without validating them and computes. The caller then asks for the problems, which are
what ``validate_loaded`` of this process's load would have returned, in the same order.

A worker that cannot be forked, fails or returns garbage costs time, not results: the problems
are then found here.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pyfelix.errors import Problem
from pyfelix.resources import FelixConfiguration, LoadResult, Located
from pyfelix.resources.loader import (
    Direct,
    DirectDecoder,
    duplicate_problem,
    load_file,
    load_paths,
    manifest_sources,
)
from pyfelix.resources.shared_parse import available_cores, file_size
from pyfelix.validation import context_from, validate_loaded, validate_located
from pyfelix.validation.kinds import PERMISSIVE, context_problems

if TYPE_CHECKING:
    from pyfelix.resources import WorkloadEndpoint

log = logging.getLogger(__name__)

#: Below this many bytes of manifests a fork costs more than it saves.
PARALLEL_MIN_BYTES = 8 << 20


def _worth_a_worker(files: list[Path]) -> bool:
    return available_cores() >= 2 and sum(map(file_size, files)) >= PARALLEL_MIN_BYTES


def validate_paths(
    paths: Iterable[Path | str], direct: DirectDecoder | None = None
) -> list[Problem]:
    """``validate_loaded(load_paths(paths, direct))``, one file at a time: only problems are
    kept (a direct decoder takes only valid documents: those are checked for duplicates).

    Problems come in validate_loaded's order: the load's (paths, then each file's), the
    duplicates across files, then each kept resource's, each followed by those that depend on
    the cluster's settings, known once every file is in; then sorted by file and line."""
    files, load_problems = manifest_sources(paths)
    duplicates: list[Problem] = []
    checked: list[tuple[Located | None, list[Problem]]] = []
    first: dict[tuple[str, str, str], tuple[str, int | None]] = {}
    configurations = []
    for file in files:
        result = load_file(file, direct)
        load_problems.extend(result.problems)
        entries: tuple[Direct | Located, ...] = (*result.direct, *result.resources)
        for item in entries:
            earlier = first.get(item.key)
            if earlier is not None:
                duplicates.append(duplicate_problem(item, *earlier))
                continue
            first[item.key] = (item.source, item.line)
            if not isinstance(item, Located):
                continue  # a direct decoder takes valid documents only
            if isinstance(item.resource, FelixConfiguration):
                configurations.append(item.resource)
            found = validate_located(item, PERMISSIVE)
            spoofing = item.resource.KIND == "WorkloadEndpoint" and bool(
                cast("WorkloadEndpoint", item.resource).spec.allow_spoofed_source_prefixes
            )
            if found or spoofing:
                checked.append((item if spoofing else None, found))
    context = context_from(configurations)
    problems = load_problems + duplicates
    for spoofer, found in checked:
        problems.extend(found)
        if spoofer is not None and context != PERMISSIVE:
            problems.extend(
                Problem(spoofer.source, p.message, spoofer.line, spoofer.resource.ident, p.field)
                for p in context_problems(spoofer.resource, context)
            )
    return sorted(problems, key=lambda p: (p.source, p.line or 0))


class BackgroundValidation:
    """``validate_paths(paths, direct)`` in a forked child, started now; ``problems`` collects
    it."""

    def __init__(self, paths: list[Path | str], direct: DirectDecoder | None = None) -> None:
        self.paths = paths
        self.direct = direct
        self.pid = 0
        self.fd = -1
        files, _ = manifest_sources(paths)
        if not _worth_a_worker(files):
            return
        try:
            read, write = os.pipe()
            pid = os.fork()
        except OSError as exc:
            log.info("no validation worker (%s): validating here", exc)
            return
        if pid == 0:  # the child: validate, write, leave without running any cleanup
            status = 1
            try:
                os.close(read)
                data = pickle.dumps(validate_paths(paths, direct), pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write, "wb") as out:
                    out.write(data)
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        self.pid, self.fd = pid, read

    def problems(self, result: LoadResult) -> list[Problem]:
        """Every problem of ``result`` (this process's load of the same paths)."""
        if self.pid:
            with os.fdopen(self.fd, "rb") as source:
                data = source.read()
            _, status = os.waitpid(self.pid, 0)
            self.pid = 0
            if status == 0:
                try:
                    found = pickle.loads(data)
                except (pickle.UnpicklingError, EOFError, ValueError) as exc:
                    log.warning("validation worker's output unreadable (%s)", exc)
                else:
                    if isinstance(found, list):
                        return found
            else:
                log.warning("validation worker failed (status %d): validating here", status)
            # The load beside the worker may have trusted what the worker was to check.
            return validate_loaded(load_paths(self.paths, self.direct))
        return validate_loaded(result)
