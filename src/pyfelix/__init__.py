"""pyfelix: a per-node Calico-compatible network policy agent, in Python on Trio."""

__version__ = "0.1.0"

from pyfelix import attrs_cache as _attrs_cache

_attrs_cache.install()
