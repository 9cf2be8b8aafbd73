"""Calico's v3 validation rules, applied to loaded resources.

``validate_resource`` answers for one resource (used by the pipeline's validation filter, where an
invalid resource becomes a deletion); ``validate_loaded`` checks a whole load result and returns
every problem located in its file, as ``pyfelix validate`` prints them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from pyfelix.config.text import ParamError, ProtoPort, parse_duration
from pyfelix.errors import FieldProblem, Problem
from pyfelix.resources import LoadResult, Located, Resource
from pyfelix.resources.config_sources import startup_text
from pyfelix.resources.field_lines import read_texts, sources_of, with_field_lines
from pyfelix.validation.felixconfig import parse_param
from pyfelix.validation.kinds import ValidationContext, check_resource


def validate_resource(
    resource: Resource, context: ValidationContext | None = None
) -> list[FieldProblem]:
    """Every problem with one resource (empty when valid)."""
    return check_resource(resource, context or ValidationContext()).problems


def context_from(
    resources: Iterable[Resource], hostname: str = "", environ: Mapping[str, str] | None = None
) -> ValidationContext:
    """The node's settings checks depend on (WorkloadSourceSpoofing), from every source in
    Felix's precedence: the environment, ``hostname``'s FelixConfiguration, one selecting
    it, the global one (without a hostname, the global one and the environment)."""
    text = startup_text(resources, hostname, os.environ if environ is None else environ)
    if text.get("WorkloadSourceSpoofing", "").lower() == "any":
        return ValidationContext(workload_source_spoofing="Any")
    return ValidationContext()


def validate_located(item: Located, context: ValidationContext) -> list[Problem]:
    return [
        Problem(item.source, p.message, item.line, item.resource.ident, p.field)
        for p in validate_resource(item.resource, context)
    ]


def validate_loaded(result: LoadResult, hostname: str = "") -> list[Problem]:
    """Load problems plus validation problems, in file order; the settings checks depend on
    are ``hostname``'s (``context_from``)."""
    context = context_from((item.resource for item in result.resources), hostname)
    problems = list(result.problems)
    for item in result.resources:
        problems.extend(validate_located(item, context))
    problems = with_field_lines(problems, read_texts(sources_of(problems)))
    return sorted(problems, key=lambda p: (p.source, p.line or 0))


__all__ = [
    "ParamError",
    "ProtoPort",
    "ValidationContext",
    "context_from",
    "parse_duration",
    "parse_param",
    "validate_loaded",
    "validate_located",
    "validate_resource",
]
