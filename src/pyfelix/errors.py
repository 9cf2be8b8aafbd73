"""Errors and problem reports shared by every stage.

Exceptions::

    PyfelixError
    └── ManifestError        a file or document could not be read as resources (.problems)
    SelectorError(ValueError) a selector did not parse (pyfelix.selector; names the position)

Problems are values, not exceptions: loading and validation collect every problem they find, so a
user sees all of them at once. Each one names where it came from (file and line), the resource
(Kind/namespace/name), the field path and what is wrong.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class FieldProblem:
    """Something wrong with one field of a resource; ``field`` is a dotted path (may be "")."""

    field: str
    message: str


@attrs.frozen
class Problem:
    """A problem located in a source: ``file[:line]: Kind/namespace/name: field.path: message``."""

    source: str
    message: str
    line: int | None = None
    resource: str | None = None
    field: str = ""

    def __str__(self) -> str:
        parts = [self.source if self.line is None else f"{self.source}:{self.line}"]
        if self.resource:
            parts.append(self.resource)
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)


class PyfelixError(Exception):
    """Base of pyfelix's own exceptions."""


class ManifestError(PyfelixError):
    """Input that cannot be turned into resources; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems
