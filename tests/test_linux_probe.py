"""The kernel probe against the real tools, in a namespace: the iptables backend whose mangle
table holds kubelet's hint chain, else the one that already holds rules, is the one chosen (nft
when neither does, or as configured); the tables it read to count them are not read again; and
a probe made for other settings is not taken for the current ones."""

from __future__ import annotations

import pytest
import trio

from pyfelix.config import FelixConfig
from pyfelix.config.felix_config import IptablesBackend, NFTablesMode
from pyfelix_dataplane.linux.iptables import IptablesWriter
from pyfelix_dataplane.linux.kernel import KernelProbe
from pyfelix_dataplane.linux.opening import early_readers, linux_kernel, probe_kernel
from pyfelix_dataplane.rules.render import TABLES
from tests.netns import in_netns, run_in, temporary_netns


def _backends(settings: list[tuple[IptablesBackend, NFTablesMode]]) -> list[str]:
    """Each settings' probed backend and nftables choice. Runs inside the namespace."""

    async def main() -> list[str]:
        found = []
        for backend, mode in settings:
            probe = await probe_kernel(FelixConfig(iptables_backend=backend, nftables_mode=mode))
            found.append(f"{probe.backend} {'nftables' if probe.nftables else 'iptables'}")
        return found

    return trio.run(main)


def _opened_with(probe: KernelProbe) -> str:
    """The description of the kernel opened (Auto backend) with ``probe``."""
    return trio.run(
        linux_kernel, FelixConfig(nftables_mode=NFTablesMode.DISABLED), probe
    ).description


@pytest.mark.netns
def test_the_probe_finds_the_backend_that_holds_rules() -> None:
    auto, legacy = IptablesBackend.AUTO, IptablesBackend.LEGACY
    off, on = NFTablesMode.DISABLED, NFTablesMode.ENABLED
    with temporary_netns("probe") as ns:
        assert in_netns(ns, _backends, [(auto, off), (legacy, off), (auto, on)]) == [
            "nft iptables",
            "legacy iptables",
            "nft nftables",
        ]
        for rule in ("-A INPUT -s 192.0.2.1 -j ACCEPT", "-A INPUT -s 192.0.2.2 -j ACCEPT"):
            assert run_in(ns, "iptables-legacy", *rule.split()).returncode == 0
        assert in_netns(ns, _backends, [(auto, off), (IptablesBackend.NFT, off)]) == [
            "legacy iptables",
            "nft iptables",
        ]
        # Made for other settings (a configured NFT backend): probed again, legacy found.
        stale = KernelProbe(IptablesBackend.NFT, off, "nft", False)
        assert in_netns(ns, _opened_with, stale).startswith("iptables-legacy")
        # Made for these settings: taken as it is (it says nft; the tools would say legacy).
        current = KernelProbe(auto, off, "nft", False)
        assert in_netns(ns, _opened_with, current).startswith("iptables-nft")


def _readings(backend: IptablesBackend) -> tuple[dict[int, str], bool]:
    """The reader of each version the probe leads to (by kind), and whether what they read
    is what the tool reads now. Runs inside the namespace."""

    async def main() -> tuple[dict[int, str], bool]:
        config = FelixConfig(iptables_backend=backend, nftables_mode=NFTablesMode.DISABLED)
        readers = early_readers(config, await probe_kernel(config)).tables
        same = True
        for version, reader in readers.items():
            now = await IptablesWriter(version, "nft").read(TABLES)
            same = same and await reader.read(TABLES) == now
        return {v: type(reader).__name__ for v, reader in readers.items()}, same

    return trio.run(main)


@pytest.mark.netns
def test_the_hint_chain_decides_and_the_counted_tables_are_not_read_again() -> None:
    auto, nft = IptablesBackend.AUTO, IptablesBackend.NFT
    saved, read = {4: "SavedTables", 6: "SavedTables"}, {4: "IptablesWriter", 6: "IptablesWriter"}
    with temporary_netns("probe") as ns:
        # What the detection read stands for the tables, empty ones too; a configured backend
        # is not detected, and its tables are read.
        assert in_netns(ns, _readings, auto) == (saved, True)
        assert in_netns(ns, _readings, nft) == (read, True)
        for tool in ("iptables-nft", "ip6tables-nft"):
            assert run_in(ns, tool, "-N", "cali-probe").returncode == 0
            assert run_in(ns, tool, "-A", "INPUT", "-j", "cali-probe").returncode == 0
        assert in_netns(ns, _readings, auto) == (saved, True)
        # kubelet's hint in the legacy mangle table outweighs the nft rules.
        assert (
            run_in(ns, "iptables-legacy", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT").returncode
            == 0
        )
        assert in_netns(ns, _backends, [(auto, NFTablesMode.DISABLED)]) == ["legacy iptables"]
