"""The calculation graph: plain synchronous components, wired in :mod:`pyfelix.calc.graph`."""
