"""An echo server on TCP 7000; prints "ready" once listening."""

import socket
import threading


def echo(connection: socket.socket) -> None:
    while data := connection.recv(64):
        connection.sendall(data)


server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", 7000))
server.listen(4)
print("ready", flush=True)
while True:
    connection, _ = server.accept()
    threading.Thread(target=echo, args=(connection,), daemon=True).start()
