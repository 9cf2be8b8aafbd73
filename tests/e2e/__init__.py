"""End-to-end tests: ``pyfelix run`` inside a node namespace, workloads in theirs, real traffic.
Nothing here touches the root namespace."""
