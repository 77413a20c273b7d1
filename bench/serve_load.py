#!/usr/bin/env python3
"""serve_load.py — load test of `stof serve` (BENCH.md suite E), loopback only, bounded.

64 concurrent clients (by default) send 1-64 sentences per request to /v1/embeddings for a
fixed time; client 0 sends single sentences only, so the latency of a single-sentence
request under that load is measured on its own. The ceiling is stof's offline batch path:
`stof embed --file` over the same sentences, timed without its start-up (a run over one
sentence is subtracted). Every reply is checked against the offline embeddings of its
sentences, so a wrong or reordered result counts as a failure, not as throughput.

    python3 bench/serve_load.py --stof build/stof --model models/all-MiniLM-L6-v2 \
        --device cpu --duration-s 600 --out bench/results/serve-DATE-MACHINE.json

Writes {"summary": {"throughput_vs_offline", "p50_ms", "p99_ms_single", "failed",
"rss_growth_mb"}, "models": {...}, "command": ...}. The Server class is also what
tests/serve/test_serve.py starts servers with.
"""

import argparse
import base64
import http.client
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

WORDS = ("the a of to and in is was for on that with as by at from it his an were are which "
         "this be or has had first one their its new after who they two her she been other "
         "when there all during into school time may years more most only over city some "
         "world would where later up such used many can state about national out known "
         "university united then made river guitar music plays someone man woman child "
         "morning evening quickly slowly beautiful ancient modern network server request "
         "embedding sentence language model training data results paper method").split()


class Server:
    """A `stof serve` process on a free loopback port (--port 0; the port it prints)."""

    def __init__(self, stof, model, args=(), device="cpu", timeout_s=180):
        cmd = [stof, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
               "--device", device, *args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        ready = queue.Queue()
        threading.Thread(target=self._read_stderr, args=(ready,), daemon=True).start()
        try:
            self.port = ready.get(timeout=timeout_s)
        except queue.Empty:
            self.proc.kill()
            raise RuntimeError(f"stof serve did not start in {timeout_s} s: {self.lines}")
        if self.port is None:
            self.proc.wait(timeout=30)
            raise RuntimeError(f"stof serve exited ({self.proc.returncode}): {self.lines}")

    def _read_stderr(self, ready):
        told = False
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            m = re.search(r"listening on http://[^ ]*:(\d+)", line)
            if m and not told:
                ready.put(int(m.group(1)))
                told = True
        if not told:
            ready.put(None)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers dict, body bytes) of one request on a new connection."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = headers or {}
            c.request(method, path, body=body, headers=headers,
                      encode_chunked=headers.get("Transfer-Encoding") == "chunked")
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            c.close()

    def post(self, path, obj, timeout=120):
        """(status, parsed JSON reply) of a JSON POST."""
        status, _, body = self.request("POST", path, json.dumps(obj).encode(),
                                       {"Content-Type": "application/json"}, timeout)
        return status, json.loads(body)

    def metric(self, name):
        """The value of one unlabelled sample of /metrics."""
        _, _, body = self.request("GET", "/metrics")
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        return float("nan")

    def stop(self, timeout_s=60):
        """SIGTERM, then the exit status (killed after timeout_s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def sentences(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 28))]
        out.append(f"{' '.join(words).capitalize()} {i}.")
    return out


def offline(stof, model, device, texts, batch):
    """Embeddings of texts by `stof embed`, and its sentences per second without start-up."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "texts.txt")
        with open(path, "w") as f:
            f.write("\n".join(texts) + "\n")
        base = [stof, "embed", "--model", model, "--device", device, "--batch", str(batch)]
        t0 = time.perf_counter()
        subprocess.run(base + ["one sentence"], check=True, stdout=subprocess.DEVNULL)
        t1 = time.perf_counter()
        out = subprocess.run(base + ["--file", path], check=True, capture_output=True, text=True)
        t2 = time.perf_counter()
    emb = {}
    for line in out.stdout.splitlines():
        row = json.loads(line)
        emb[row["text"]] = row["embedding"]
    return emb, len(texts) / max((t2 - t1) - (t1 - t0), 1e-9)


def close_to(got, want, tol):
    return len(got) == len(want) and all(abs(a - b) <= tol for a, b in zip(got, want))


def client(server, pool, emb, seed, single, until, tol, stats, lock):
    import numpy as np
    rng = random.Random(seed)
    conn = None
    while time.perf_counter() < until:
        k = 1 if single else rng.randint(1, 64)
        texts = [rng.choice(pool) for _ in range(k)]
        body = json.dumps({"input": texts, "encoding_format": "base64"}).encode()
        t0 = time.perf_counter()
        ok = False
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
            conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            if r.status == 200:
                rows = json.loads(data)["data"]
                ok = len(rows) == k and all(
                    close_to(np.frombuffer(base64.b64decode(row["embedding"]), "<f4"),
                             emb[texts[row["index"]]], tol) for row in rows)
        except (OSError, http.client.HTTPException, ValueError, KeyError):
            conn = None
        ms = (time.perf_counter() - t0) * 1e3
        with lock:
            stats["latency"].append(ms)
            stats["sentences"] += k if ok else 0
            stats["failed"] += 0 if ok else 1
            if single:
                stats["single"].append(ms)
    if conn is not None:
        conn.close()


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100.0 * len(xs)))] if xs else float("nan")


def make_bert_base(path, vocab_from):
    """A BERT-base-shaped folder (BertConfig's defaults: 12 layers, 768 hidden, 512
    positions) with seeded random weights and vocab_from's vocab.txt, unless path has one."""
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    import shutil
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    BertModel(BertConfig()).save_pretrained(path, safe_serialization=True)
    shutil.copy(os.path.join(vocab_from, "vocab.txt"), os.path.join(path, "vocab.txt"))
    return path


def run_model(args, model):
    pool = sentences(args.pool, args.seed)
    emb, offline_before = offline(args.stof, model, args.device, pool, args.offline_batch)
    tol = 1e-4 if args.device == "cpu" else 5e-3
    server_args = ["--max-queue", str(4 * args.clients)]
    for opt in ("max_batch_tokens", "max_wait_ms"):
        if getattr(args, opt) is not None:
            server_args += ["--" + opt.replace("_", "-"), str(getattr(args, opt))]
    server = Server(args.stof, model, server_args, args.device)
    try:
        stats = {"latency": [], "single": [], "sentences": 0, "failed": 0}
        lock = threading.Lock()
        warm_until = time.perf_counter() + args.warmup_s
        threads = [threading.Thread(target=client, args=(server, pool, emb, args.seed + i, i == 0,
                                                         warm_until, tol, stats, lock))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        warm_failed = stats["failed"]
        rss0 = server.rss_mb()
        stats = {"latency": [], "single": [], "sentences": 0, "failed": 0}
        t0 = time.perf_counter()
        until = t0 + args.duration_s
        threads = [threading.Thread(target=client, args=(server, pool, emb, args.seed + 100 + i,
                                                         i == 0, until, tol, stats, lock))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        rss1 = server.rss_mb()
        rc = server.stop()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    # the ceiling measured before and after the load, as the machine's load may drift
    _, offline_after = offline(args.stof, model, args.device, pool, args.offline_batch)
    offline_sps = (offline_before + offline_after) / 2
    sps = stats["sentences"] / elapsed
    return {
        "offline_sentences_per_s_before_after": [round(offline_before, 1),
                                                 round(offline_after, 1)],
        "offline_sentences_per_s": round(offline_sps, 1),
        "served_sentences_per_s": round(sps, 1),
        "throughput_vs_offline": round(sps / offline_sps, 3),
        "requests": len(stats["latency"]),
        "single_requests": len(stats["single"]),
        "p50_ms": round(percentile(stats["latency"], 50), 2),
        "p99_ms": round(percentile(stats["latency"], 99), 2),
        "p50_ms_single": round(percentile(stats["single"], 50), 2),
        "p99_ms_single": round(percentile(stats["single"], 99), 2),
        "failed": stats["failed"] + warm_failed,
        "rss_after_warmup_mb": round(rss0, 1),
        "rss_growth_mb": round(rss1 - rss0, 1),
        "server_exit_status": rc,
        "duration_s": round(elapsed, 1),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stof", default="build/stof")
    p.add_argument("--model", action="append", default=[],
                   help="model folder (repeat for several; the summary is over all)")
    p.add_argument("--bert-base", metavar="DIR",
                   help="also a BERT-base-shaped model, made in DIR (random weights, the first "
                        "--model's vocabulary) unless DIR holds one")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--duration-s", type=float, default=600)
    p.add_argument("--warmup-s", type=float, default=15)
    p.add_argument("--pool", type=int, default=4096, help="distinct sentences")
    p.add_argument("--offline-batch", type=int, default=128)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-batch-tokens", type=int, help="passed to stof serve (default: its own)")
    p.add_argument("--max-wait-ms", type=int, help="passed to stof serve (default: its own)")
    p.add_argument("--out", help="JSON results file")
    args = p.parse_args()
    if not 1 <= args.clients <= 1024 or not 0 < args.duration_s <= 3600:
        p.error("--clients in [1, 1024] and --duration-s in (0, 3600]")
    if not args.model:
        p.error("give at least one --model")
    if args.bert_base:
        args.model.append(make_bert_base(args.bert_base, args.model[0]))
    models = {}
    for m in args.model:
        models[os.path.basename(os.path.normpath(m))] = run_model(args, m)
        print(json.dumps(models, indent=1), flush=True)
    v = list(models.values())
    summary = {
        "throughput_vs_offline": min(r["throughput_vs_offline"] for r in v),
        "p50_ms": max(r["p50_ms"] for r in v),
        "p99_ms_single": max(r["p99_ms_single"] for r in v),
        "failed": sum(r["failed"] for r in v),
        "rss_growth_mb": max(r["rss_growth_mb"] for r in v),
    }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {"summary": summary, "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "commit": commit, "models": models, "device": args.device,
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
