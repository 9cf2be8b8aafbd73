"""What the loader and its parsers share: the bounds on hostile input, and the shape of a
parsed file. A module of its own so that the parsers (strict_yaml.py, fast_yaml.py) do not
import the loader that calls them."""

from __future__ import annotations

from pyfelix.resources.schema import JSON

#: Calico's resources nest about ten levels; Kubernetes objects with status about twenty.
MAX_DEPTH = 64
#: Values built per character of YAML text, plus a constant: a document without aliases builds
#: fewer values than it has characters; anchors reused sensibly stay far below this.
ALIAS_EXPANSION_PER_CHAR = 4
ALIAS_EXPANSION_SLACK = 100_000

#: A file's parsed documents: each with its start line and its items' start lines.
Parsed = list[tuple[JSON, int, list[int]]]
