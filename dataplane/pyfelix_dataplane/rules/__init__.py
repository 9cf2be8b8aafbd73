"""Rendering: the dataplane's desired state as iptables chains and ipsets, as Felix lays them out.

Pure functions of the messages the dataplane holds; the Linux driver writes what they render,
the dry-run driver prints it.
"""
