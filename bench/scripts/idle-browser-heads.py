#!/usr/bin/env python3
"""Resident memory per idle keep-alive connection after a browser-like request.

`bench idle` asks with one field (Host); a browser sends about twenty, and what a server
keeps of a head between requests grows with them. This opens N connections to a server it
starts, makes one such request on each (20 fields), keeps them open, and prints the growth
of the server's RSS divided by N.

usage: idle-browser-heads.py SCB_BINARY CONFIG PORT [N]
  CONFIG must route GET /respond on 127.0.0.1:PORT (plain HTTP/1.1), one worker.
"""
import socket
import subprocess
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def main():
    binary, config, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 3000
    server = subprocess.Popen([binary, "run", config], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                time.sleep(0.1)
        fields = b"".join(b"X-Field-%d: value-of-a-browser-header-%d\r\n" % (i, i)
                          for i in range(19))
        request = b"GET /respond HTTP/1.1\r\nHost: 127.0.0.1\r\n" + fields + b"\r\n"
        before = rss_kib(server.pid)
        held = []
        for _ in range(n):
            conn = socket.create_connection(("127.0.0.1", port))
            conn.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    raise RuntimeError("closed before the answer")
                head += chunk
            held.append(conn)
        time.sleep(0.5)
        after = rss_kib(server.pid)
        print(f"{n} connections: {(after - before) / n:.2f} KiB each "
              f"({before} KiB before, {after} KiB with them)")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
