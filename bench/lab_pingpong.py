"""A plain TCP ping-pong between a lab's two hosts, beside what a faithful link would give:
what one connection pays a message on the lab (the impairer, tbf, veth, and the hosts'
congestion control: under bbr, pacing), apart from dtrain and Gloo. Needs root and a lab
that is up (`dtrain netlab up NAME --hosts 2 ...`).

    python3 bench/lab_pingpong.py NAME [--rate-bits 1e9] [--delay-ms 25] [--rounds 8]

Each size: `rounds` exchanges of SIZE bytes one way and 1 byte back on one connection
(TCP_NODELAY); prints the median round trip and 2 * delay + SIZE / rate.
"""
import argparse
import socket
import statistics
import subprocess
import sys
import time

SIZES = [4096, 16384, 65536, 262144, 1048576, 4194304]
PORT = 5599


def receive(sock, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            sys.exit(0)
        got += k
    return buf


def serve(host):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, PORT))
    listener.listen(1)
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        n = int.from_bytes(receive(conn, 8), "little")
        receive(conn, n)
        conn.sendall(b"k")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lab")
    ap.add_argument("--rate-bits", type=float, default=1e9)
    ap.add_argument("--delay-ms", type=float, default=25)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve)
        return
    server_ip, ns = "10.200.0.1", f"dtrain-{a.lab}"
    server = subprocess.Popen(["ip", "netns", "exec", f"{ns}-h0", sys.executable, __file__,
                               a.lab, "--serve", server_ip])
    time.sleep(0.5)
    client = f"""
import socket, time, statistics
s = socket.create_connection(("{server_ip}", {PORT}))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for n in {SIZES}:
    times = []
    for _ in range({a.rounds}):
        t = time.perf_counter()
        s.sendall(n.to_bytes(8, "little") + bytes(n))
        s.recv(1)
        times.append(time.perf_counter() - t)
    print(n, statistics.median(times))
"""
    out = subprocess.run(["ip", "netns", "exec", f"{ns}-h1", sys.executable, "-c", client],
                         capture_output=True, text=True, check=True).stdout
    server.kill()
    print("| bytes | round trip ms (median) | faithful link ms | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for line in out.split("\n"):
        if not line:
            continue
        n, t = int(line.split()[0]), float(line.split()[1])
        ideal = 2 * a.delay_ms / 1e3 + n * 8 / a.rate_bits
        print(f"| {n} | {t * 1e3:.1f} | {ideal * 1e3:.1f} | {t / ideal:.2f} |")


if __name__ == "__main__":
    main()
