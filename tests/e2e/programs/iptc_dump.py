"""The cali chains' rule ids as python-iptables (libiptc) reads them, as JSON."""

import json

import iptc

out: dict[str, list[str]] = {}
for name in ("filter", "raw", "mangle", "nat"):
    table = iptc.Table(name)
    table.refresh()
    for chain in table.chains:
        if chain.name.startswith("cali-"):
            out[f"{name}/{chain.name}"] = [
                match.parameters.get("comment", "")
                for rule in chain.rules
                for match in rule.matches
                if match.name == "comment"
                and match.parameters.get("comment", "").startswith("cali:")
            ]
print(json.dumps(out))
