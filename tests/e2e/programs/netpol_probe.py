"""Probe several targets at once, as the Kubernetes network-policy tests' prober does: each
argument is PROTOCOL:ADDRESS:PORT; prints one line per target, "PROTOCOL:ADDRESS:PORT yes"
when it answered within the timeout, "... no" otherwise."""

import socket
import sys
import threading

TIMEOUT = 1.0
results: dict[str, bool] = {}


def probe(target: str) -> None:
    protocol, address, port = target.split(":")
    try:
        if protocol == "tcp":
            with socket.create_connection((address, int(port)), timeout=TIMEOUT) as connection:
                results[target] = connection.recv(2) == b"ok"
            return
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.settimeout(TIMEOUT)
            client.sendto(b"?", (address, int(port)))
            results[target] = client.recv(2) == b"ok"
    except OSError:
        results[target] = False


threads = [threading.Thread(target=probe, args=(t,)) for t in sys.argv[1:]]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
for target in sys.argv[1:]:
    print(target, "yes" if results.get(target) else "no")
