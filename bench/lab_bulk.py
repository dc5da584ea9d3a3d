"""Bulk TCP between a lab's two hosts, apart from dtrain and Gloo: what the lab carries over
warm connections one way, and both ways at once (as a two-rank ring all-reduce sends). Needs
root and a lab that is up (`dtrain netlab up NAME --hosts 2 ...`).

    python3 bench/lab_bulk.py NAME [--bytes 64M] [--streams 5] [--rounds 4] [--rate-bits 1e9]

Each direction sends BYTES split over STREAMS connections, ROUNDS times on the same
connections (the first round pays slow start), each round answered by 1 byte a
connection. Prints, per mode, every round's time and the best later round's share of the
link rate with the answer's round trip taken off (2 x the lab's one-way delay, --delay-ms).
"""
import argparse
import socket
import subprocess
import sys
import threading
import time

PORT = 5601
CHUNK = bytes(1 << 20)


def receive(conn, n, rounds):
    buf = bytearray(1 << 20)
    for _ in range(rounds):
        got = 0
        while got < n:
            k = conn.recv_into(buf)
            if k == 0:
                return
            got += k
        conn.sendall(b"k")


def send(conn, n):
    left = n
    while left > 0:
        k = min(left, len(CHUNK))
        conn.sendall(CHUNK[:k])
        left -= k
    conn.recv(1)


def run_threads(targets):
    threads = [threading.Thread(target=f, args=a) for f, a in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def host(me, peer, total, streams, rounds, sending, receiving):
    """One host: receives on the peer's connections when `receiving`, sends when `sending`."""
    share = total // streams
    receiver = None
    if receiving:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((me, PORT))
        listener.listen(streams)
        receiver = threading.Thread(target=lambda: run_threads(
            [(receive, (listener.accept()[0], share, rounds)) for _ in range(streams)]))
        receiver.start()
    if sending:
        time.sleep(0.5)  # the peer's listener is up
        conns = [socket.create_connection((peer, PORT)) for _ in range(streams)]
        times = []
        for _ in range(rounds):
            time.sleep(0.05)
            start = time.perf_counter()
            run_threads([(send, (c, share)) for c in conns])
            times.append(time.perf_counter() - start)
        print(" ".join(f"{t:.4f}" for t in times), flush=True)
    if receiver:
        receiver.join()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lab")
    ap.add_argument("--bytes", default="64M")
    ap.add_argument("--streams", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--rate-bits", type=float, default=1e9)
    ap.add_argument("--delay-ms", type=float, default=25)
    ap.add_argument("--host", nargs=4, help=argparse.SUPPRESS)  # me peer sending receiving
    a = ap.parse_args()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    total = int(a.bytes[:-1]) * units[a.bytes[-1]] if a.bytes[-1] in units else int(a.bytes)
    if a.host:
        host(a.host[0], a.host[1], total, a.streams, a.rounds, a.host[2] == "1", a.host[3] == "1")
        return
    ips, ns = ["10.200.0.1", "10.200.0.2"], f"dtrain-{a.lab}"
    common = [sys.executable, __file__, a.lab, "--bytes", a.bytes, "--streams", str(a.streams),
              "--rounds", str(a.rounds)]
    print("| mode | round times ms | best later round, share of the link |")
    print("| --- | --- | ---: |")
    for mode in ("one way", "both ways"):
        both = mode == "both ways"
        flags = {0: ("1", "1" if both else "0"), 1: ("1" if both else "0", "1")}  # send, receive
        procs = [subprocess.Popen(["ip", "netns", "exec", f"{ns}-h{k}", *common, "--host", ips[k],
                                   ips[1 - k], *flags[k]], stdout=subprocess.PIPE, text=True)
                 for k in (1, 0)]
        outs = [p.communicate()[0] for p in procs]
        for out in outs:
            if not out.strip():
                continue
            times = [float(t) for t in out.split()]
            best = min(times[1:] or times) - 2 * a.delay_ms / 1e3
            share = total * 8 / best / a.rate_bits
            print(f"| {mode} | {', '.join(f'{t * 1e3:.0f}' for t in times)} | {share:.2f} |")


if __name__ == "__main__":
    main()
