"""The profile decoder: kns.<ns> and ksa.<ns>.<sa> profiles back into namespace and service
account updates (their pcns./pcsa. labels without the prefix), for the dataplane's benefit."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from pyfelix import messages as m
from pyfelix import model
from pyfelix.calc.dispatcher import Dispatcher, value_of
from pyfelix.calc.outputs import NamespaceOutput
from pyfelix.model import (
    NAMESPACE_LABEL_PREFIX,
    NAMESPACE_PROFILE_PREFIX,
    SERVICE_ACCOUNT_LABEL_PREFIX,
    SERVICE_ACCOUNT_PROFILE_PREFIX,
)
from pyfelix.syncer.api import Update
from pyfelix.values import FrozenMap


def _strip(labels: Mapping[str, str], prefix: str, *, shared: bool = False) -> FrozenMap[str]:
    """The labels that have ``prefix``, without it; the keys interned, as the prefixed ones
    are (each namespace's are the same few). ``shared``: an equal map made before serves
    (every namespace's "default" service account has the same labels)."""
    cut = len(prefix)
    stripped = {sys.intern(k[cut:]): v for k, v in labels.items() if k.startswith(prefix)}
    return FrozenMap.shared(stripped) if shared else FrozenMap(stripped)


class ProfileDecoder:
    """The namespaces and service accounts that Kubernetes profiles (kns., ksa.) stand for,
    sent to the dataplane as Felix's profile decoder sends them."""

    def __init__(self, output: NamespaceOutput) -> None:
        self._out = output

    def register_with(self, updates: Dispatcher) -> None:
        updates.register(model.ProfileLabelsKey, self._on_labels_update)

    def _on_labels_update(self, update: Update) -> None:
        assert isinstance(update.key, model.ProfileLabelsKey)
        labels = value_of(update, model.ProfileLabels)
        self.on_profile_labels(update.key.name, labels.labels if labels else None)

    def on_profile_labels(self, name: str, labels: Mapping[str, str] | None) -> None:
        # The names cut out of a profile's are interned: the dataplane's state keeps them,
        # and each is a namespace's or account's name the model holds already.
        if name.startswith(NAMESPACE_PROFILE_PREFIX):
            namespace = sys.intern(name[len(NAMESPACE_PROFILE_PREFIX) :])
            if labels is None:
                self._out.on_namespace_remove(namespace)
            else:
                message = m.NamespaceUpdate(namespace, _strip(labels, NAMESPACE_LABEL_PREFIX))
                self._out.on_namespace_update(message)
        elif name.startswith(SERVICE_ACCOUNT_PROFILE_PREFIX):
            namespace, _, account = name[len(SERVICE_ACCOUNT_PROFILE_PREFIX) :].partition(".")
            key = m.ServiceAccountID(sys.intern(namespace), sys.intern(account))
            if labels is None:
                self._out.on_service_account_remove(key)
            else:
                stripped = _strip(labels, SERVICE_ACCOUNT_LABEL_PREFIX, shared=True)
                self._out.on_service_account_update(m.ServiceAccountUpdate(key, stripped))
