"""One exception hierarchy, and lower-layer errors mapped where they enter."""

from __future__ import annotations

import pytest
from pyroute2.netlink.exceptions import NetlinkError

from pyfelix.config import ParamError
from pyfelix.datastore.commands import CommandError
from pyfelix.datastore.etcd import EtcdCompacted, EtcdError, EtcdTLSError, EtcdUnavailable
from pyfelix.datastore.etcd_grpc import GrpcError
from pyfelix.datastore.kubernetes import (
    KubeConfigError,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeNotFound,
    KubeUnavailable,
)
from pyfelix.errors import DataplaneWriteError, ManifestError, PyfelixError, RestartRequired
from pyfelix.resources.k8s_conversion import ConversionError
from pyfelix.resources.schema import TooDeep
from pyfelix.selector import SelectorError
from pyfelix.syncer.inotify import InotifyUnavailable
from pyfelix_dataplane.linux.commands import run, writing
from pyfelix_dataplane.rules.marks import MarkMaskTooSmall
from pyfelix_dataplane.rules.nft import NftUnsupported


@pytest.mark.parametrize(
    "cls",
    [
        ManifestError,
        SelectorError,
        ParamError,
        TooDeep,
        MarkMaskTooSmall,
        InotifyUnavailable,
        EtcdError,
        EtcdUnavailable,
        EtcdCompacted,
        GrpcError,
        EtcdTLSError,
        KubeError,
        KubeGone,
        KubeForbidden,
        KubeNotFound,
        KubeUnavailable,
        KubeConfigError,
        ConversionError,
        NftUnsupported,
        CommandError,
        DataplaneWriteError,
        RestartRequired,
    ],
)
def test_every_exception_is_a_pyfelix_error(cls: type[Exception]) -> None:
    assert issubclass(cls, PyfelixError)


@pytest.mark.parametrize(
    "error", [OSError(19, "No such device"), NetlinkError(17, "File exists"), TimeoutError()]
)
def test_writers_map_what_fails_below_them(error: Exception) -> None:
    with pytest.raises(DataplaneWriteError, match="VXLAN device failed"), writing("VXLAN device"):
        raise error


async def test_a_missing_tool_is_a_write_error_not_a_crash() -> None:
    with pytest.raises(DataplaneWriteError, match="no-such-tool-here"):
        await run(["no-such-tool-here", "restore"], "")
