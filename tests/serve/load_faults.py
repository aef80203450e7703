"""Load and faults against a running `kiln serve` (run by tests/cli/serve.rs: the base URL and
the server's pid). 16 clients send 200 requests between them, on 127.0.0.1 only: greedy chat
requests, whole and streamed, whose replies must equal the reply the same request got alone
before the load; clients that hang up mid-stream or before the reply; malformed JSON, unknown
fields, impossible values, a wrong method and bodies over the size limit, each of which must get
a 4xx. Afterwards the server must still answer at once (nothing left queued or running) and its
resident memory must be back near its level before the load. Standard library only; every
socket has a timeout, so the run ends by itself. Prints its figures; exits non-zero naming the
first failure."""

import http.client
import json
import random
import socket
import sys
import threading
import time
from urllib.parse import urlparse

CLIENTS = 16
REQUESTS = 200
PROMPTS = ["Name a colour.", "Count to three.", "What is a kiln?", "Say hello."]
MAX_TOKENS = 24
TIMEOUT_S = 120


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class Client:
    def __init__(self, url):
        u = urlparse(url)
        self.host, self.port = u.hostname, u.port

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT_S)
        try:
            c.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            c.close()

    def chat(self, prompt, stream=False):
        body = {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            "stream": stream,
        }
        status, text = self.request("POST", "/v1/chat/completions", json.dumps(body))
        if status != 200:
            return status, text
        if not stream:
            return status, json.loads(text)["choices"][0]["message"]["content"]
        pieces = []
        for line in text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                for c in chunk["choices"]:
                    pieces.append(c["delta"].get("content") or "")
        if not text.rstrip().endswith("data: [DONE]"):
            return 599, "the stream did not end with [DONE]"
        return status, "".join(pieces)

    def hang_up(self, stream, after_bytes):
        """Send a chat request and close the socket after reading `after_bytes` of the reply."""
        body = json.dumps(
            {
                "messages": [{"role": "user", "content": random.choice(PROMPTS)}],
                "max_tokens": 400,
                "temperature": 0,
                "stream": stream,
            }
        ).encode()
        s = socket.create_connection((self.host, self.port), timeout=TIMEOUT_S)
        try:
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            if after_bytes:
                s.recv(after_bytes)
        finally:
            s.close()


def main():
    url, pid = sys.argv[1], int(sys.argv[2])
    client = Client(url)
    # The truth: each prompt's reply alone, before the load (twice: the second from the cache).
    expected = {}
    for p in PROMPTS:
        status, text = client.chat(p)
        again = client.chat(p)[1]
        if status != 200 or text != again:
            sys.exit(f"FAILED: the reference for {p!r}: {status} {text!r} / {again!r}")
        expected[p] = text
    idle_rss = rss_kib(pid)

    big = json.dumps({"messages": [{"role": "user", "content": "x" * (33 << 20)}]})
    bad = [
        ("POST", "/v1/chat/completions", '{"messages": [', 400),
        ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "tempurature": 1}), 400),
        ("POST", "/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 1000}), 400),
        ("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": -9}), 400),
        ("POST", "/v1/completions", json.dumps({"prompt": [999999999]}), 400),
        ("POST", "/v1/chat/completions", "\xff\xfe not utf-8", 400),
        ("GET", "/v1/chat/completions", None, 405),
        ("POST", "/v1/chat/completions", big, 413),
    ]
    rng = random.Random(1234)
    plan = []
    for i in range(REQUESTS):
        r = rng.random()
        if r < 0.45:
            plan.append(("chat", rng.choice(PROMPTS), False))
        elif r < 0.65:
            plan.append(("chat", rng.choice(PROMPTS), True))
        elif r < 0.8:
            plan.append(("hang_up", rng.random() < 0.5, rng.choice([0, 64])))
        else:
            plan.append(("bad", rng.randrange(len(bad)), None))
    failures, counts, lock = [], {}, threading.Lock()
    work = list(enumerate(plan))

    def worker():
        while True:
            with lock:
                if not work:
                    return
                i, item = work.pop()
            kind = item[0]
            try:
                if kind == "chat":
                    status, text = client.chat(item[1], stream=item[2])
                    ok = status == 200 and text == expected[item[1]]
                    what = f"{'streamed' if item[2] else 'whole'} chat {item[1]!r}: {status} {text[:200]!r}"
                elif kind == "hang_up":
                    client.hang_up(item[1], item[2])
                    ok, what = True, "hang-up"
                else:
                    method, path, body, want = bad[item[1]]
                    status, text = client.request(method, path, body)
                    ok = status == want and (status == 405 or '"error"' in text)
                    what = f"bad request {item[1]} ({want} wanted): {status} {text[:200]!r}"
            except Exception as e:  # a reset or a timeout is a failure too
                ok, what = False, f"{kind} {item}: {type(e).__name__}: {e}"
            with lock:
                counts[kind] = counts.get(kind, 0) + 1
                if not ok:
                    failures.append(f"request {i}: {what}")

    start = time.time()
    threads = [threading.Thread(target=worker) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - start
    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures[:10]))

    # Nothing left queued or running: a request now is answered as fast as alone.
    t0 = time.time()
    status, text = client.chat(PROMPTS[0])
    after_s = time.time() - t0
    if status != 200 or text != expected[PROMPTS[0]]:
        sys.exit(f"FAILED: after the load: {status} {text!r}")
    status, _ = client.request("GET", "/health")
    if status != 200:
        sys.exit(f"FAILED: /health after the load: {status}")
    final_rss = rss_kib(pid)
    print(
        f"load: {REQUESTS} requests from {CLIENTS} clients in {elapsed:.1f} s {counts}; "
        f"a request after it took {after_s * 1e3:.0f} ms; resident memory {idle_rss // 1024} MiB "
        f"before, {final_rss // 1024} MiB after"
    )
    if final_rss > idle_rss * 1.25 + 32 * 1024:
        sys.exit(f"FAILED: memory grew from {idle_rss} KiB to {final_rss} KiB")


if __name__ == "__main__":
    main()
