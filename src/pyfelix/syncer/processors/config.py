"""FelixConfiguration and ClusterInformation: Felix's configuration keys and the ready flag."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from pyfelix import model
from pyfelix.config.params import BY_JSON

if TYPE_CHECKING:
    from pyfelix.resources import (
        ClusterInformation,
        FelixConfiguration,
    )
from pyfelix.syncer.processors.common import (
    KV,
)


def _felix_configuration(config: FelixConfiguration) -> list[KV]:
    name = config.name
    make_key: Callable[[str], Hashable]
    if name == "default":
        make_key = model.GlobalConfigKey
    elif name.startswith("node."):
        hostname = name.removeprefix("node.")

        def make_key(param: str) -> Hashable:
            return model.HostConfigKey(hostname, param)

    else:
        return [(model.ResourceKey(config.KIND, "", name), model.Passthrough(config))]
    values = config.spec.felix_values()
    kvs: list[KV] = []
    for param in BY_JSON.values():
        if param.felix:
            text = values.get(param.felix)
            value = model.ConfigValue(text, origin=config) if text else None
            kvs.append((make_key(param.felix), value))
    return kvs


def _cluster_information(info: ClusterInformation) -> list[KV]:
    spec = info.spec
    ready = spec.datastore_ready
    kvs: list[KV] = [
        (model.ReadyFlagKey(), None if ready is None else model.ReadyFlag(ready, origin=info))
    ]
    for felix_name, value in (
        ("ClusterGUID", spec.cluster_guid),
        ("ClusterType", spec.cluster_type),
        ("CalicoVersion", spec.calico_version),
        ("Variant", spec.variant),
    ):
        kvs.append(
            (
                model.GlobalConfigKey(felix_name),
                model.ConfigValue(value, origin=info) if value else None,
            )
        )
    return kvs
