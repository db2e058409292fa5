"""A trainer's start-up as Megatron does it, without the training: rank 0 serves the rendezvous store on
MASTER_ADDR:MASTER_PORT, the others connect to it (standard library only, so a hundred of them are cheap).

torch's TCPStore, which ``init_process_group("env://")`` starts on rank 0, listens on every address of
MASTER_PORT with SO_REUSEADDR; a port some other process listens on fails it with EADDRINUSE, and the
worker dies at start-up, as a Megatron Bridge driver did on the GPU suite (issue 30). This does the same,
then runs ``--steps`` barriers through the store and prints ``step N loss X`` from rank 0.

    ft_launcher --nproc-per-node=2 master_port.py --steps 3
"""

from __future__ import annotations

import argparse
import os
import socket
import time


def serve(port: int, peers: int) -> list[socket.socket]:
    """Rank 0: the store's listening socket (as TCPStore binds it), and a connection from each peer."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("", port))  # EADDRINUSE here is the failure this stands for
    server.listen()
    return [server.accept()[0] for _ in range(peers)]


def connect(addr: str, port: int, timeout_s: float) -> socket.socket:
    """A peer: connect to rank 0's store, retrying until it listens (TCPStore's client does the same)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((addr, port), timeout=timeout_s)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    links = serve(port, world - 1) if rank == 0 else [connect(addr, port, 60)]
    for step in range(1, args.steps + 1):
        for link in links:  # a barrier: every peer's byte in, then the answer out
            link.sendall(b"s") if rank else link.recv(1)
        for link in links:
            link.recv(1) if rank else link.sendall(b"s")
        if rank == 0:
            print(f"step {step} loss {1.0 / step:.6f}", flush=True)


if __name__ == "__main__":
    main()
