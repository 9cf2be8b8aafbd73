"""Felix's configuration sources and their precedence, highest first:

1. the environment (``FELIX_<NAME>``, any case);
2. this node's FelixConfiguration (``node.<hostname>``);
3. a selector-scoped FelixConfiguration (any other name, with ``spec.nodeSelector``) whose
   selector matches this node's labels; when several match, the oldest by creationTimestamp
   (then by name) wins, and the others are named in a warning, as Felix does;
4. the global one (``default``).

A parameter takes its value from the first source that sets it. Felix's configuration file
has no counterpart here. The calculation graph's config batcher merges the sources as they
change; ``startup_text`` merges them once from resources read at start (what validation and
the graph's construction need before the graph runs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import attrs

from pyfelix.config.params import BY_FELIX_NAME
from pyfelix.resources.cluster import FelixConfiguration, Node
from pyfelix.resources.meta import Resource
from pyfelix.selector import Selector, SelectorError, parse_selector
from pyfelix.values import FrozenMap

log = logging.getLogger(__name__)

#: The sets of several matching names already warned about (the merge runs at every change).
_WARNED: set[tuple[str, ...]] = set()

GLOBAL = "default"
NODE_PREFIX = "node."

#: The resources the start-up configuration is made of: FelixConfigurations, and the Node
#: whose labels choose the selector-scoped ones (what a caller keeps to merge them later).
STARTUP_KINDS = (FelixConfiguration, Node)


def environment_config(environ: Mapping[str, str]) -> dict[str, str]:
    """Felix parameters set as FELIX_<NAME> (case-insensitive), by their canonical names."""
    out = {}
    for key, value in environ.items():
        if key.upper().startswith("FELIX_"):
            param = BY_FELIX_NAME.get(key[6:].lower())
            if param is not None:
                out[param.felix] = value
    return out


@attrs.frozen
class SelectorScoped:
    """A FelixConfiguration that applies to the nodes its nodeSelector matches."""

    name: str
    selector: Selector | None
    values: FrozenMap[str]
    #: Its creationTimestamp (RFC 3339, which sorts as text); "" for none, which is oldest.
    created: str = ""

    @classmethod
    def of(cls, config: FelixConfiguration) -> SelectorScoped | None:
        """The scoped entry of ``config``; None for ``default`` and ``node.<name>`` ones. A
        selector that does not parse applies to no node (logged), as in Felix."""
        name = config.name
        if name == GLOBAL or name.startswith(NODE_PREFIX):
            return None
        text = config.spec.values.get("nodeSelector")
        selector = None
        if isinstance(text, str) and text:
            try:
                selector = parse_selector(text)
            except SelectorError as exc:
                log.warning("FelixConfiguration %s: nodeSelector does not parse (%s)", name, exc)
        values = FrozenMap(config.spec.felix_values())
        return cls(name, selector, values, config.metadata.creation_timestamp)


def selector_config(
    entries: Iterable[SelectorScoped], labels: Mapping[str, str] | None
) -> dict[str, str]:
    """The parameters of the scoped configuration that wins for a node with ``labels``
    (None: the node is not known yet, so none applies)."""
    if labels is None:
        return {}
    matching = [e for e in entries if e.selector is not None and e.selector.evaluate(labels)]
    if not matching:
        return {}
    winner = min(matching, key=lambda e: (e.created, e.name))
    names = tuple(sorted(e.name for e in matching))
    if len(matching) > 1 and names not in _WARNED:
        _WARNED.add(names)
        log.warning(
            "FelixConfigurations %s all select this node: %s, the oldest, is used",
            ", ".join(names),
            winner.name,
        )
    return dict(winner.values)


def merged(
    global_: Mapping[str, str],
    selected: Mapping[str, str],
    host: Mapping[str, str],
    environment: Mapping[str, str],
) -> dict[str, str]:
    """The sources merged in Felix's precedence (a later mapping wins)."""
    return {**global_, **selected, **host, **environment}


def startup_text(
    resources: Iterable[Resource], hostname: str, environ: Mapping[str, str]
) -> dict[str, str]:
    """Every source merged from ``resources`` (FelixConfigurations, and this node's Node for
    its labels) and ``environ``."""
    global_: dict[str, str] = {}
    host: dict[str, str] = {}
    scoped: list[SelectorScoped] = []
    labels: Mapping[str, str] | None = None
    for resource in resources:
        if not isinstance(resource, STARTUP_KINDS):
            continue
        if isinstance(resource, FelixConfiguration):
            if resource.name == GLOBAL:
                global_.update(resource.spec.felix_values())
            elif resource.name == f"{NODE_PREFIX}{hostname}":
                host.update(resource.spec.felix_values())
            else:
                entry = SelectorScoped.of(resource)
                if entry is not None:
                    scoped.append(entry)
        elif resource.name == hostname and hostname:
            labels = resource.labels
    selected = selector_config(scoped, labels)
    return merged(global_, selected, host, environment_config(environ))
