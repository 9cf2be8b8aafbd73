"""The Kubernetes network-policy tests' server: TCP and UDP on each port given, answering
"ok" to every connection and datagram. Prints "ready" once listening."""

import socket
import sys
import threading


def tcp(port: int) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(64)
    while True:
        connection, _ = listener.accept()
        connection.sendall(b"ok")
        connection.close()


def udp(port: int) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("0.0.0.0", port))
    while True:
        _, peer = server.recvfrom(64)
        server.sendto(b"ok", peer)


for number in sys.argv[1:]:
    for serve in (tcp, udp):
        threading.Thread(target=serve, args=(int(number),), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
