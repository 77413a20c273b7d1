#!/usr/bin/env python3
"""serve_load.py — load test of `stof serve` (BENCH.md suite E), loopback only, bounded.

64 concurrent clients (by default) send 1-64 sentences per request to /v1/embeddings for a
fixed time; client 0 sends single sentences only, so the latency of a single-sentence
request under that load is measured on its own. Clients run as threads spread over
--client-procs processes, client 0 alone in one of them, so that neither the clients'
decoding and checking nor one interpreter's lock caps the throughput or adds to the
single-sentence latency. The ceiling is stof's offline batch path: `stof embed --file
--format npy` over the same sentences (repeated until it computes for a few seconds, so
that start-up noise stays small), timed without its start-up (a run over one sentence is
subtracted), before and after the load. Every reply is checked against the offline
embeddings of its sentences, so a wrong or reordered result counts as a failure, not as
throughput.

    python3 bench/serve_load.py --stof build/stof --model models/all-MiniLM-L6-v2 \
        --device cpu --duration-s 600 --out bench/results/serve-DATE-MACHINE.json

Writes {"summary": {"throughput_vs_offline", "p50_ms", "p99_ms_single", "failed",
"rss_growth_mb"}, "models": {...}, "device", "command", ...}. The Server class is also what
tests/serve/test_serve.py starts servers with.
"""

import argparse
import base64
import http.client
import json
import math
import multiprocessing
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import git_commit  # noqa: E402

WORDS = ("the a of to and in is was for on that with as by at from it his an were are which "
         "this be or has had first one their its new after who they two her she been other "
         "when there all during into school time may years more most only over city some "
         "world would where later up such used many can state about national out known "
         "university united then made river guitar music plays someone man woman child "
         "morning evening quickly slowly beautiful ancient modern network server request "
         "embedding sentence language model training data results paper method").split()


class Server:
    """A `stof serve` process on a free loopback port (--port 0; the port it prints)."""

    def __init__(self, stof, model, args=(), device="cpu", timeout_s=180, cpus=None):
        cmd = [stof, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
               "--device", device, *args]
        # cpus: the cores the server and every thread it starts may run on (None: any)
        pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, preexec_fn=pin)
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


def offline_embeddings(stof, model, device, texts, batch):
    """{text: float32 embedding} of texts by `stof embed`."""
    import numpy as np
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "texts.txt")
        with open(path, "w") as f:
            f.write("\n".join(texts) + "\n")
        out = subprocess.run([stof, "embed", "--model", model, "--device", device, "--batch",
                              str(batch), "--file", path], check=True, capture_output=True,
                             text=True)
    emb = {}
    for line in out.stdout.splitlines():
        row = json.loads(line)
        emb[row["text"]] = np.asarray(row["embedding"], dtype=np.float32)
    return emb


def offline_rate(stof, model, device, texts, batch, min_s=3.0, max_repeat=64, cpus=None):
    """Sentences per second of `stof embed --file --format npy` over texts (repeated until
    the run computes for about min_s), less its start-up: a run over one sentence."""
    base = [stof, "embed", "--model", model, "--device", device, "--batch", str(batch),
            "--format", "npy"]

    def seconds(args):
        t0 = time.perf_counter()
        pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
        subprocess.run(base + args, check=True, stdout=subprocess.DEVNULL, preexec_fn=pin)
        return time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "texts.txt")
        repeat = 1
        while True:
            with open(path, "w") as f:
                f.write("\n".join(texts * repeat) + "\n")
            startup = seconds(["one sentence"])
            compute = seconds(["--file", path]) - startup
            if compute >= min_s or repeat >= max_repeat:
                return len(texts) * repeat / max(compute, 1e-9)
            repeat = min(max_repeat, repeat * max(2, math.ceil(min_s / max(compute, 0.05))))


def new_stats():
    return {"latency": [], "single": [], "sentences": 0, "failed": 0}


def client(port, pool, emb, seed, single, until, tol, stats, lock):
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
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            ms = (time.perf_counter() - t0) * 1e3
            if r.status == 200:
                rows = json.loads(data)["data"]
                ok = len(rows) == k
                for row in rows if ok else ():
                    got = np.frombuffer(base64.b64decode(row["embedding"]), "<f4")
                    want = emb[texts[row["index"]]]
                    ok = ok and got.shape == want.shape and \
                        np.linalg.norm(got - want) <= tol * np.linalg.norm(want)
        except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError):
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


def client_process(port, pool, emb, clients, until, tol, results, cpus=None):
    """Runs clients [(seed, single)] as threads in this process (on cpus, when given); puts
    its stats on results."""
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    stats, lock = new_stats(), threading.Lock()
    threads = [threading.Thread(target=client, args=(port, pool, emb, seed, single, until, tol,
                                                     stats, lock))
               for seed, single in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put(stats)


def load(port, pool, emb, n_clients, procs, seed, seconds, tol, cpus=None):
    """n_clients over procs processes (client 0, the single-sentence one, alone in the
    first) for `seconds`; the merged stats and the elapsed time."""
    ctx = multiprocessing.get_context("fork")
    groups = [[(seed, True)]] + [[] for _ in range(max(1, procs - 1))]
    for i in range(1, n_clients):
        groups[1 + (i - 1) % (len(groups) - 1)].append((seed + i, False))
    results = ctx.Queue()
    t0 = time.perf_counter()
    until = t0 + seconds
    workers = [ctx.Process(target=client_process,
                           args=(port, pool, emb, g, until, tol, results, cpus))
               for g in groups if g]
    for w in workers:
        w.start()
    stats = new_stats()
    for _ in workers:
        part = results.get(timeout=seconds + 900)
        for key in stats:
            stats[key] += part[key]
    for w in workers:
        w.join()
    return stats, time.perf_counter() - t0


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100.0 * len(xs)))] if xs else float("nan")


TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")


def make_bert_base(path, vocab_from):
    """A BERT-base-shaped folder (BertConfig's defaults: 12 layers, 768 hidden, 512
    positions, the uncased 30522-token vocabulary) with seeded random weights in float16 and
    vocab_from's tokenizer files, unless path has one."""
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    import shutil
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    model = BertModel(BertConfig()).to(torch.float16)
    model.save_pretrained(path, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(vocab_from, name)):
            shutil.copy(os.path.join(vocab_from, name), os.path.join(path, name))
    return path


def run_model(args, model):
    pool = sentences(args.pool, args.seed)
    emb = offline_embeddings(args.stof, model, args.device, pool, args.offline_batch)
    offline_before = offline_rate(args.stof, model, args.device, pool, args.offline_batch,
                                  cpus=args.server_cpus)
    # relative error of an embedding: float16 on the GPU, in batches of other shapes than the
    # offline run's, moves a BERT-base embedding by about 1e-3; another sentence's by ~1
    tol = 1e-4 if args.device == "cpu" else 1e-2
    server_args = ["--max-queue", str(4 * args.clients)]
    for opt in ("max_batch_tokens", "max_batch_ms", "max_wait_ms", "connection_nice"):
        if getattr(args, opt) is not None:
            server_args += ["--" + opt.replace("_", "-"), str(getattr(args, opt))]
    server = Server(args.stof, model, server_args, args.device, cpus=args.server_cpus)
    try:
        warm, _ = load(server.port, pool, emb, args.clients, args.client_procs, args.seed,
                       args.warmup_s, tol, args.client_cpus)
        rss0 = server.rss_mb()
        stats, elapsed = load(server.port, pool, emb, args.clients, args.client_procs,
                              args.seed + 100, args.duration_s, tol, args.client_cpus)
        rss1 = server.rss_mb()
        budget = server.metric("stof_serve_batch_token_budget")
        batches = server.metric("stof_serve_batches_total")
        rc = server.stop()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    # the ceiling measured before and after the load, as the machine's load may drift
    offline_after = offline_rate(args.stof, model, args.device, pool, args.offline_batch,
                                  cpus=args.server_cpus)
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
        "failed": stats["failed"] + warm["failed"],
        "rss_after_warmup_mb": round(rss0, 1),
        "rss_growth_mb": round(rss1 - rss0, 1),
        "batch_token_budget_at_end": int(budget),
        "batches": int(batches),
        "server_cpus": sorted(args.server_cpus) if args.server_cpus else "any",
        "client_cpus": sorted(args.client_cpus) if args.client_cpus else "any",
        "server_exit_status": rc,
        "duration_s": round(elapsed, 1),
    }


def device_name(device):
    """The GPU's name for a GPU run (results say which GPU they come from), else "cpu"."""
    if device != "gpu":
        return "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True, timeout=60)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "gpu"


def cpu_list(text):
    """"0-7,12" -> {0, 1, ..., 7, 12}."""
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    if not cpus:
        raise argparse.ArgumentTypeError(f"no cores in {text!r}")
    return cpus


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
    p.add_argument("--client-procs", type=int, default=min(8, os.cpu_count() or 1),
                   help="processes the clients run in (client 0 alone in one)")
    p.add_argument("--duration-s", type=float, default=600)
    p.add_argument("--warmup-s", type=float, default=15)
    p.add_argument("--pool", type=int, default=4096, help="distinct sentences")
    p.add_argument("--offline-batch", type=int, default=128)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-batch-tokens", type=int, help="passed to stof serve (default: its own)")
    p.add_argument("--max-batch-ms", type=int, help="passed to stof serve (default: its own)")
    p.add_argument("--max-wait-ms", type=int, help="passed to stof serve (default: its own)")
    p.add_argument("--connection-nice", type=int,
                   help="passed to stof serve (default: its own)")
    p.add_argument("--server-cpus", type=cpu_list, metavar="LIST",
                   help="cores for the server (e.g. 0-7), as a machine of its own would have "
                        "them; the clients then take --client-cpus (default: any core)")
    p.add_argument("--client-cpus", type=cpu_list, metavar="LIST")
    p.add_argument("--out", help="JSON results file")
    args = p.parse_args()
    if not 1 <= args.clients <= 1024 or not 0 < args.duration_s <= 3600:
        p.error("--clients in [1, 1024] and --duration-s in (0, 3600]")
    if not 1 <= args.client_procs <= 64 or args.warmup_s <= 0:
        p.error("--client-procs in [1, 64] and --warmup-s > 0")
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
    result = {"summary": summary, "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "commit": git_commit(), "models": models, "device": device_name(args.device),
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
