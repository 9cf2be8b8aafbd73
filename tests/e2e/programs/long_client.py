"""One long-lived connection to the echo server at argv[1]: each stdin line sent, its echo
printed."""

import socket
import sys

connection = socket.create_connection((sys.argv[1], 7000), timeout=2)
for line in sys.stdin:
    connection.sendall(line.encode())
    print(connection.recv(64).decode().strip(), flush=True)
