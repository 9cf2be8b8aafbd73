"""pyfelix's Linux dataplane driver.

It turns the calculation graph's messages into kernel state: ipsets and iptables chains through
``ipset restore`` and ``iptables-restore``, routes, VXLAN devices and WireGuard links through
pyroute2. Every kernel writer sits behind a small interface with a dry-run twin, and the only
seam with ``pyfelix`` is the shared message module. The driver itself arrives with the issue that
programs the kernel; this package is its home from the start so the layout shows the design.
"""

__all__: list[str] = []
