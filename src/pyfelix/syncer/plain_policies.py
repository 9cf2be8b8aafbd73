"""Policies converted where the dry-run's child checks them, handed on as the model values
they stand for.

A cluster of isolated tenants holds a policy for every few pods. The child decodes and
validates each one anyway; the computing process then decoded it again (10 us for a
Kubernetes NetworkPolicy) and converted it (22 us), on the path every file waits on. Here
the child converts a valid policy too and hands on its model keys and values as tuples that
marshal (:func:`policy_fields`); the computing process rebuilds them (:func:`policy_entry`,
11 us), sharing equal rules as the converter's own cache does. Converting costs the child
more than it saves here, so the child does it only while the computing process is behind
(``BackgroundValidation``'s spare work): whichever core is the slower gets the help.
Anything else is left to the general path: a document with any problem, a kind whose
conversion is not policies alone, a tier the dry-run's report would name (only the built-in
ones are taken), or a rule value these tuples do not carry (HTTP matches).

The values record no ``origin``: only the validation filter reads it, and the dry-run
validates beforehand. Only the dry-run hands policies on this way: the commands that change
resources before computing them (plan) need them as resources. tests/test_plain_policies.py
holds the two paths equal.
"""

from __future__ import annotations

import operator
from typing import Any

import attrs

from pyfelix import model
from pyfelix.resources.loader import Identity
from pyfelix.resources.meta import load_document
from pyfelix.resources.policy import BUILTIN_TIERS
from pyfelix.syncer.processors import KV, convert
from pyfelix.validation import validate_resource
from pyfelix.validation.kinds import PERMISSIVE
from pyfelix.validation.surprises import policy_tier
from pyfelix.values import FrozenMap, Port

#: What marks a policy's fields among the other plain kinds' tuples.
_MARKER = "policy"
#: The documents' kinds whose conversion gives policies alone.
_DOCUMENT_KINDS = frozenset(
    {
        "NetworkPolicy",
        "GlobalNetworkPolicy",
        "StagedNetworkPolicy",
        "StagedGlobalNetworkPolicy",
        "StagedKubernetesNetworkPolicy",
    }
)
#: Their resources' kinds (a Kubernetes NetworkPolicy is a ``NetworkPolicy`` document).
_RESOURCE_KINDS = _DOCUMENT_KINDS | {"KubernetesNetworkPolicy"}

#: The fields each value is made of (not the hash it keeps, which is this process's own).
_RULE_FIELDS = model.RULE_FIELDS
_rule_values = operator.attrgetter(*_RULE_FIELDS)
_PORTS = tuple(
    _RULE_FIELDS.index(name)
    for name in ("src_ports", "not_src_ports", "dst_ports", "not_dst_ports")
)
_HTTP = _RULE_FIELDS.index("http")
_ANNOTATIONS = _RULE_FIELDS.index("annotations")
_POLICY_FIELDS = tuple(f.name for f in attrs.fields(model.Policy) if f.init and f.name != "origin")
_policy_values = operator.attrgetter(*_POLICY_FIELDS)
_INBOUND = _POLICY_FIELDS.index("inbound_rules")
_TYPES = _POLICY_FIELDS.index("types")
_OUTBOUND = _POLICY_FIELDS.index("outbound_rules")
_key_values = operator.attrgetter(*(f.name for f in attrs.fields(model.PolicyKey) if f.init))

#: How many distinct rules the rebuilding keeps, to share (the converter's cache's size).
RULES_KEPT = 16384
_RULES: dict[tuple[Any, ...], model.Rule] = {}
#: A policy's types, one tuple for all policies alike as the converter has them (a few
#: distinct ones: kept while there are few).
_TYPES_KEPT = 64
_TYPES_SHARED: dict[tuple[str, ...], tuple[str, ...]] = {}

#: A policy's fields: the marker, its kind, namespace and name, and its model (key, value)
#: pairs, each key and value a tuple of its fields (None for a value that deletes).
PolicyFields = tuple[str, str, str, str, tuple[tuple[tuple[Any, ...], Any], ...]]


class _Unencodable(Exception):
    """A value these tuples do not carry."""


def policy_fields(document: dict[str, Any]) -> PolicyFields | None:
    """A valid policy document's identity and model values, as tuples that marshal; None
    for anything the general path is to take (see the module's docstring)."""
    if document.get("kind") not in _DOCUMENT_KINDS:
        return None
    resource, problems = load_document(document, "")
    if resource is None or problems or resource.KIND not in _RESOURCE_KINDS:
        return None
    tier = policy_tier(resource)
    if tier is not None and tier not in BUILTIN_TIERS:
        return None  # the dry-run names a tier no Tier resource creates
    if validate_resource(resource, PERMISSIVE):
        return None
    try:
        kvs = tuple(_encoded(key, value) for key, value in convert(resource))
    except _Unencodable:
        return None
    return (_MARKER, resource.KIND, resource.namespace, resource.name, kvs)


def is_policy_fields(value: tuple[Any, ...]) -> bool:
    """Whether a direct path's tuple is a policy's (``PolicyFields``)."""
    return len(value) == 5 and value[0] == _MARKER


def policy_identity(fields: PolicyFields) -> Identity:
    return fields[1], fields[2], fields[3]


def policy_entry(fields: PolicyFields) -> tuple[Identity, tuple[KV, ...]]:
    """The identity and the model (key, value) pairs of a policy's fields."""
    kvs = tuple(
        (model.PolicyKey(*key), None if value is None else _policy(value))
        for key, value in fields[4]
    )
    return policy_identity(fields), kvs


def _encoded(key: object, value: object) -> tuple[tuple[Any, ...], Any]:
    if type(key) is not model.PolicyKey or not (value is None or type(value) is model.Policy):
        raise _Unencodable
    if value is None:
        return _key_values(key), None
    values = list(_policy_values(value))
    values[_INBOUND] = tuple(map(_encoded_rule, values[_INBOUND]))
    values[_OUTBOUND] = tuple(map(_encoded_rule, values[_OUTBOUND]))
    return _key_values(key), tuple(values)


def _encoded_rule(rule: model.Rule) -> tuple[Any, ...]:
    values = list(_rule_values(rule))
    if values[_HTTP] is not None:
        raise _Unencodable
    for index in _PORTS:
        values[index] = tuple((p.min_port, p.max_port, p.name) for p in values[index])
    values[_ANNOTATIONS] = tuple(values[_ANNOTATIONS].items())
    return tuple(values)


def _policy(values: tuple[Any, ...]) -> model.Policy:
    fields = list(values)
    fields[_INBOUND] = tuple(map(_rule, fields[_INBOUND]))
    fields[_OUTBOUND] = tuple(map(_rule, fields[_OUTBOUND]))
    types = fields[_TYPES]
    shared = _TYPES_SHARED.get(types)
    if shared is None and len(_TYPES_SHARED) < _TYPES_KEPT:
        shared = _TYPES_SHARED[types] = types
    fields[_TYPES] = shared or types
    return model.Policy(*fields)


def _rule(values: tuple[Any, ...]) -> model.Rule:
    """The rule these fields give, shared with every equal one among the last kept."""
    rule = _RULES.get(values)
    if rule is None:
        fields = list(values)
        for index in _PORTS:
            fields[index] = tuple(Port(*port) for port in fields[index])
        fields[_ANNOTATIONS] = FrozenMap(dict(fields[_ANNOTATIONS]))
        rule = model.Rule.of(tuple(fields))
        if len(_RULES) >= RULES_KEPT:
            _RULES.clear()
        _RULES[values] = rule
    return rule
