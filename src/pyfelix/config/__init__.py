"""Felix's configuration: the parameter table, its text forms, and the typed ``FelixConfig``
every consumer reads.

Values travel as Felix's text (ConfigUpdate, FELIX_<NAME> variables); ``parse_config`` turns
the merged text into a FelixConfig once, where the message is made. A value that does not
parse is named in a warning and its default used, as Felix skips a bad value from a source.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pyfelix.config.felix_config import FIELDS, FelixConfig, NFTablesMode, RouteSource
from pyfelix.config.text import ParamError, ProtoPort

__all__ = [
    "FIELDS",
    "FelixConfig",
    "NFTablesMode",
    "ParamError",
    "ProtoPort",
    "RouteSource",
    "parse_config",
]

log = logging.getLogger(__name__)

#: The (parameter, value) pairs already named in a warning: the same configuration is parsed
#: at start-up, by the calculation graph, and again at each change, and one warning is enough.
_WARNED: set[tuple[str, str]] = set()


def parse_config(text: Mapping[str, str]) -> FelixConfig:
    """The typed configuration of Felix parameters given as text (unknown names are ignored:
    the datastore layer has reported them)."""
    values = {}
    for field in FIELDS:
        raw = text.get(field.felix)
        if raw is None:
            continue
        try:
            values[field.attribute] = field.parse(raw)
        except (ParamError, ValueError) as exc:
            if (field.felix, raw) not in _WARNED:
                _WARNED.add((field.felix, raw))
                log.warning(
                    "Felix parameter %s=%r ignored, using its default: %s", field.felix, raw, exc
                )
    return FelixConfig(**values)
