"""IP network parsing shared by the pipeline's stages.

Every endpoint address is parsed by validation and again by conversion (and each edit repeats
both); ``ipaddress`` costs around 10 us a parse, which for 10k endpoints was a tenth of the
time to InSync. The parse is cached (the objects it returns are immutable), in a bounded cache:
holding every address of a 100k-endpoint snapshot cost 90 MB of peak memory.
"""

from __future__ import annotations

import functools
import ipaddress
import re

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#: One IPv4 address, bare or /32, in the canonical form ipaddress would print (no leading
#: zeros, which ipaddress refuses anyway): what almost every endpoint network is. Matching it
#: costs a tenth of an ipaddress parse.
IPV4_HOST = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}(?:/32)?")
#: One IPv4 address or CIDR (host bits allowed) in that canonical form, a prefix length
#: without a leading zero: a text ipaddress would take, told without its parse.
IPV4_CIDR = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}(?:/(?:3[0-2]|[12]?[0-9]))?")


def canonical_network(text: str) -> str:
    """``str(parse_network(text))`` (the masked CIDR), without building a network object for
    the common case of one IPv4 address; raises ValueError."""
    if IPV4_HOST.fullmatch(text):
        return text if text.endswith("/32") else text + "/32"
    return str(parse_network(text))


#: Canonical IPv4 /32 CIDRs, each followed by a newline.
_IPV4_HOSTS = re.compile(rf"(?:{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}/32\n)*")


def canonical_networks(values: tuple[str, ...]) -> tuple[str, ...]:
    """``canonical_network`` of each value that parses (the rest are left out: validation
    reports them). Values that are all canonical IPv4 /32s (a network set's, nearly always)
    are told so by one match over their joined text, and given back as they are: a third of
    the time of each one's own match, for a million entries."""
    if not values:
        return ()
    if _IPV4_HOSTS.fullmatch("\n".join(values) + "\n"):
        return values
    out = []
    for value in values:
        try:
            out.append(canonical_network(value))
        except ValueError:
            continue
    return tuple(out)


@functools.lru_cache(maxsize=1 << 14)
def parse_network(text: str) -> IPNetwork:
    """An IP or CIDR, host bits allowed (masked off); raises ValueError.

    An IPv6 zone (``fe80::1%eth0``) is refused: Python accepts it, but Go's parser (so
    Calico's validation) does not, and neither ipset nor iptables can take it.
    """
    if "%" in text:
        raise ValueError(f"{text!r}: an IPv6 zone is not allowed")
    return ipaddress.ip_network(text, strict=False)


def parse_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IP address, without an IPv6 zone (see parse_network); raises ValueError."""
    if "%" in text:
        raise ValueError(f"{text!r}: an IPv6 zone is not allowed")
    return ipaddress.ip_address(text)


def has_host_bits(text: str, network: IPNetwork) -> bool:
    """Whether ``text`` (which parsed as ``network``) names an address inside it, not the
    network itself: Calico's strict ``net`` rule rejects that."""
    if network.prefixlen == network.max_prefixlen:
        return False
    return ipaddress.ip_address(text.split("/", maxsplit=1)[0]) != network.network_address
