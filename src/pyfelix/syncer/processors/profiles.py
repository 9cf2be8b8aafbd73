"""Profiles, and the profiles Kubernetes namespaces and service accounts stand for (kns. and
ksa.)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyfelix import model
from pyfelix.model import (
    NAME_LABEL,
    NAMESPACE_LABEL_PREFIX,
    NAMESPACE_PROFILE_PREFIX,
    SERVICE_ACCOUNT_LABEL_PREFIX,
    SERVICE_ACCOUNT_PROFILE_PREFIX,
)
from pyfelix.values import FrozenMap

if TYPE_CHECKING:
    from pyfelix.resources import (
        Namespace,
        Profile,
        Resource,
        ServiceAccount,
    )
from pyfelix.syncer.processors.common import (
    KV,
)
from pyfelix.syncer.processors.policies import (
    _rules,
)


def _profile_kvs(
    name: str,
    labels: FrozenMap[str],
    ingress: tuple[model.Rule, ...],
    egress: tuple[model.Rule, ...],
    origin: Resource | None,
) -> list[KV]:
    label_value = model.ProfileLabels(labels, origin=origin) if labels else None
    rules = _SHARED_RULES.get((ingress, egress)) if origin is None else None
    if rules is None:
        rules = model.ProfileRules(ingress, egress, origin=origin)
    return [(model.ProfileLabelsKey(name), label_value), (model.ProfileRulesKey(name), rules)]


def _profile(profile: Profile) -> list[KV]:
    spec = profile.spec
    kvs = _profile_kvs(
        profile.name,
        spec.labels_to_apply,
        _rules(spec.ingress, ""),
        _rules(spec.egress, ""),
        profile,
    )
    return [*kvs, (model.ResourceKey("Profile", "", profile.name), model.Passthrough(profile))]


_ALLOW_ALL = (model.Rule(action="allow"),)
#: The rules of every namespace's profile (allow all) and every service account's (none),
#: one value each where no origin is recorded (a value for each of 100,000 namespaces and
#: their accounts was 13 MB).
_SHARED_RULES: dict[tuple[tuple[model.Rule, ...], tuple[model.Rule, ...]], model.ProfileRules] = {
    (rules, rules): model.ProfileRules(rules, rules) for rules in (_ALLOW_ALL, ())
}


def _namespace(ns: Namespace) -> list[KV]:
    return namespace_kvs(ns.name, ns.labels, ns)


#: The label keys each namespace's and service account's profile applies, interned: a
#: cluster's namespaces have the same few keys, and a copy of each for each of 100,000
#: namespaces and their service accounts was 20 MB. The profile's name is interned too: its
#: pods name it among their profiles, interned where they are decoded, and a second copy
#: for each namespace and account was 6 MB of each 100,000.
_NAMESPACE_NAME = sys.intern(f"{NAMESPACE_LABEL_PREFIX}{NAME_LABEL}")
_SERVICE_ACCOUNT_NAME = sys.intern(f"{SERVICE_ACCOUNT_LABEL_PREFIX}{NAME_LABEL}")


def namespace_kvs(name: str, labels: Mapping[str, str], origin: Resource | None) -> list[KV]:
    """Kubernetes' conversion of a namespace: profile kns.<name> applying pcns.* labels,
    allowing all (``origin``: the Namespace, or None where none was built)."""
    # Values interned too: a namespace's labels repeat its name and a few flags in each of a
    # cluster's namespaces (kubernetes.io/metadata.name, "true").
    applied = {sys.intern(f"{NAMESPACE_LABEL_PREFIX}{k}"): sys.intern(v) for k, v in labels.items()}
    applied[_NAMESPACE_NAME] = name
    profile = sys.intern(f"{NAMESPACE_PROFILE_PREFIX}{name}")
    return _profile_kvs(profile, FrozenMap(applied), _ALLOW_ALL, _ALLOW_ALL, origin)


def _service_account(sa: ServiceAccount) -> list[KV]:
    return service_account_kvs(sa.namespace, sa.name, sa.labels, sa)


def service_account_kvs(
    namespace: str, name: str, labels: Mapping[str, str], origin: Resource | None
) -> list[KV]:
    """Kubernetes' conversion of a service account: profile ksa.<namespace>.<name> applying
    pcsa.* labels, with no rules (``origin``: the ServiceAccount, or None where none was
    built)."""
    applied = {
        sys.intern(f"{SERVICE_ACCOUNT_LABEL_PREFIX}{k}"): sys.intern(v) for k, v in labels.items()
    }
    applied[_SERVICE_ACCOUNT_NAME] = name
    profile = sys.intern(f"{SERVICE_ACCOUNT_PROFILE_PREFIX}{namespace}.{name}")
    # Shared: every namespace's "default" account applies the same labels.
    return _profile_kvs(profile, FrozenMap.shared(applied), (), (), origin)
