"""test_serve.py — `stof serve` over loopback on the CPU: its embeddings against `stof embed`
for the same texts (the real all-MiniLM-L6-v2 under models/, and a tiny BERT folder built
from tests/data/tiny_bert with a 100-token vocabulary), every kind of bad input with its
status and JSON error body, a full queue, 32 concurrent clients, SIGTERM draining the
requests in flight, and the connection threads' lower priority. Servers listen on a free
loopback port (--port 0). Skipped only when the stof tool was built without libmicrohttpd;
the MiniLM checks skip, as the project's other golden tests do, when
models/all-MiniLM-L6-v2 is absent.
"""

import base64
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import threading
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))
from serve_load import Server  # noqa: E402

STOF = os.environ.get("STOF_CLI", os.path.join(REPO, "build", "stof"))
MINILM = os.path.join(REPO, "models", "all-MiniLM-L6-v2")
TINY_WORDS = ("the of to and in is was for on that with as by at from it an are this be or "
              "has had one new who two she all man plays music guitar his her they were "
              "their been more some when there into after first").split()


def _serve_built():
    if not os.path.exists(STOF):
        return False
    out = subprocess.run([STOF, "serve", "--help"], capture_output=True, text=True, timeout=60)
    return out.returncode == 0 and "without libmicrohttpd" not in out.stdout


pytestmark = pytest.mark.skipif(not _serve_built(),
                                reason="stof was built without libmicrohttpd (no stof serve)")
needs_minilm = pytest.mark.skipif(not os.path.isdir(MINILM),
                                  reason="models/all-MiniLM-L6-v2 is missing "
                                         "(run scripts/fetch_model.sh)")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """tests/data/tiny_bert (64 hidden, 32 positions, 100 ids) with a WordPiece vocabulary
    of exactly 100 tokens: specials, letters, ##letters and a few words."""
    d = tmp_path_factory.mktemp("tiny_bert_vocab")
    src = os.path.join(REPO, "tests", "data", "tiny_bert")
    for name in ("config.json", "model.safetensors"):
        os.symlink(os.path.join(src, name), d / name)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + letters + ["##" + c for c in letters]
    vocab += [w for w in TINY_WORDS if w not in vocab][:100 - len(vocab)]
    assert len(vocab) == 100
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return str(d)


def stof_embed(model, texts):
    out = subprocess.run([STOF, "embed", "--model", model, "--device", "cpu", "--", *texts],
                         capture_output=True, text=True, check=True, timeout=600)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["text"] for r in rows] == texts
    return [r["embedding"] for r in rows]


def assert_close(got, want, tol=2e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w)
        worst = max(abs(a - b) for a, b in zip(g, w))
        assert worst <= tol, f"embeddings differ by {worst}"


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def assert_error(status, body, want_status, want_code):
    assert status == want_status, body
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "code"}, body
    assert err["code"] == want_code and err["message"], body
    assert err["type"] == ("server_error" if want_status >= 500 else "invalid_request_error")


def concurrent_clients(server, n, rounds, texts_of, want):
    """n client threads, each sending `rounds` requests of texts_of(client, round) to
    /v1/embeddings; every row is checked against want[text]. The failures."""
    failures = []

    def client(c):
        for r in range(rounds):
            texts = texts_of(c, r)
            status, body = server.post("/v1/embeddings", {"input": texts})
            if status != 200:
                failures.append((c, r, status, body))
                continue
            for d in body["data"]:
                w = want[texts[d["index"]]]
                if max(abs(a - b) for a, b in zip(d["embedding"], w)) > 2e-6:
                    failures.append((c, r, "wrong row", d["index"]))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    return failures


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    s = Server(STOF, tiny_dir, ["--max-body-bytes", "16384"])
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def minilm():
    if not os.path.isdir(MINILM):
        pytest.skip("models/all-MiniLM-L6-v2 is missing (run scripts/fetch_model.sh)")
    s = Server(STOF, MINILM, ["--max-wait-ms", "20"])
    yield s
    assert s.stop() == 0


LONG = " ".join(["embedding"] * 400)  # over MiniLM's 256 tokens and tiny's 32
TEXTS = ["A man is playing a guitar.", "Someone plays music.", "hello", "  spaces  around  ",
         "Ünïcödé and emoji 🙂 and 中文字符", "The quick brown fox jumps over the lazy dog " * 5,
         LONG]


# ---------------------------------------------------------------- results


@needs_minilm
def test_minilm_equals_stof_embed(minilm):
    want = stof_embed(MINILM, TEXTS)
    status, body = minilm.post("/v1/embeddings", {"input": TEXTS, "model": "all-MiniLM-L6-v2"})
    assert status == 200, body
    assert body["object"] == "list" and body["model"] == "all-MiniLM-L6-v2"
    assert [d["index"] for d in body["data"]] == list(range(len(TEXTS)))
    assert_close([d["embedding"] for d in body["data"]], want)
    # one text at a time, /embed, and base64 give the same rows
    status, one = minilm.post("/v1/embeddings", {"input": TEXTS[4]})
    assert status == 200 and body["usage"]["prompt_tokens"] > one["usage"]["prompt_tokens"] > 2
    assert_close([one["data"][0]["embedding"]], [want[4]])
    status, tei = minilm.post("/embed", {"inputs": TEXTS})
    assert status == 200
    assert_close(tei, want)
    status, b64 = minilm.post("/v1/embeddings", {"input": TEXTS, "encoding_format": "base64"})
    assert status == 200
    rows = [list(struct.unpack("<384f", base64.b64decode(d["embedding"]))) for d in b64["data"]]
    assert_close(rows, want)


@needs_minilm
def test_minilm_token_ids_and_usage(minilm):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(os.path.join(MINILM, "tokenizer.json"))
    tok.no_padding()  # the folder's tokenizer.json pads to 128
    texts = TEXTS[:3]
    ids = [tok.encode(t).ids for t in texts]
    want = stof_embed(MINILM, texts)
    status, body = minilm.post("/v1/embeddings", {"input": ids})
    assert status == 200, body
    assert_close([d["embedding"] for d in body["data"]], want)
    assert body["usage"] == {"prompt_tokens": sum(map(len, ids)), "total_tokens": sum(map(len, ids))}
    status, body = minilm.post("/v1/embeddings", {"input": ids[0]})  # one list of ints
    assert status == 200 and len(body["data"]) == 1
    assert_close([body["data"][0]["embedding"]], want[:1])
    status, body = minilm.post("/v1/embeddings", {"input": texts})
    assert body["usage"]["prompt_tokens"] == sum(map(len, ids))


@needs_minilm
def test_minilm_unnormalised(minilm):
    """/embed with normalize false on a model that normalises: the pooling before its
    Normalize module, as stof.Model.encode(normalize=False) computes it."""
    status, raw = minilm.post("/embed", {"inputs": TEXTS[:4], "normalize": False})
    assert status == 200
    want = stof_embed(MINILM, TEXTS[:4])
    for r, w in zip(raw, want):
        assert abs(norm(r) - 1) > 1e-2  # really not normalised
        assert_close([[x / norm(r) for x in r]], [w])
    if os.environ.get("STOF_LIBRARY") and pytest.importorskip("torch"):
        sys.path.insert(0, os.path.join(REPO, "python"))
        import stof
        model = stof.Model.from_pretrained(MINILM, device="cpu")
        assert_close(raw, model.encode(TEXTS[:4], normalize=False).tolist(), 2e-5)


def test_tiny_equals_stof_embed(tiny, tiny_dir):
    texts = ["the man plays music", "she has a new guitar", "xyz qqq", "a " * 40]
    want = stof_embed(tiny_dir, texts)
    status, body = tiny.post("/v1/embeddings", {"input": texts})
    assert status == 200, body
    assert_close([d["embedding"] for d in body["data"]], want)
    # tiny_bert has no Normalize module: /embed normalises by default, and not when asked
    status, normed = tiny.post("/embed", {"inputs": texts})
    assert status == 200
    assert_close(normed, [[x / norm(w) for x in w] for w in want])
    status, raw = tiny.post("/embed", {"inputs": texts, "normalize": False})
    assert_close(raw, want)


def test_tiny_dimensions(tiny, tiny_dir):
    status, body = tiny.post("/v1/embeddings", {"input": "the man", "dimensions": 64})
    assert status == 200 and len(body["data"][0]["embedding"]) == 64
    assert_error(*tiny.post("/v1/embeddings", {"input": "the man", "dimensions": 16}), 400,
                 "invalid_dimensions")
    m = Server(STOF, tiny_dir, ["--matryoshka"])
    try:
        want = stof_embed(tiny_dir, ["the man"])[0][:16]
        status, body = m.post("/v1/embeddings", {"input": "the man", "dimensions": 16})
        assert status == 200
        assert_close([body["data"][0]["embedding"]], [[x / norm(want) for x in want]])
        # base64 of 4 n bytes: every remainder mod 3 (the '=' padding), against the floats
        for dims in (1, 2, 3, 5, 16):
            got = {}
            for fmt in ("float", "base64"):
                status, body = m.post("/v1/embeddings", {"input": "the man", "dimensions": dims,
                                                         "encoding_format": fmt})
                assert status == 200
                got[fmt] = body["data"][0]["embedding"]
            raw = base64.b64decode(got["base64"], validate=True)
            assert len(raw) == 4 * dims
            assert struct.pack(f"<{dims}f", *got["float"]) == raw, dims  # %.9g round-trips
    finally:
        assert m.stop() == 0


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("path,body,code", [
    ("/v1/embeddings", {}, "missing_input"),
    ("/v1/embeddings", {"input": 3}, "invalid_type"),
    ("/v1/embeddings", {"input": {"a": 1}}, "invalid_type"),
    ("/v1/embeddings", {"input": None}, "invalid_type"),
    ("/v1/embeddings", {"input": ["a", 1]}, "invalid_type"),
    ("/v1/embeddings", {"input": ["a", [5, 6]]}, "invalid_type"),
    ("/v1/embeddings", {"input": [["a"]]}, "invalid_token"),
    ("/v1/embeddings", {"input": [1.5, 2]}, "invalid_token"),
    ("/v1/embeddings", {"input": [2, 100]}, "invalid_token"),
    ("/v1/embeddings", {"input": [[2, -1]]}, "invalid_token"),
    ("/v1/embeddings", {"input": ""}, "empty_input"),
    ("/v1/embeddings", {"input": []}, "empty_input"),
    ("/v1/embeddings", {"input": [[]]}, "empty_input"),
    ("/v1/embeddings", {"input": ["the", ""]}, "empty_input"),
    ("/v1/embeddings", {"input": ["a"] * 2049}, "too_many_inputs"),
    ("/v1/embeddings", {"input": "a", "model": 5}, "invalid_type"),
    ("/v1/embeddings", {"input": "a", "encoding_format": "int8"}, "invalid_encoding_format"),
    ("/v1/embeddings", {"input": "a", "dimensions": 0}, "invalid_dimensions"),
    ("/v1/embeddings", {"input": "a", "dimensions": 65}, "invalid_dimensions"),
    ("/v1/embeddings", {"input": "a", "dimensions": "64"}, "invalid_dimensions"),
    ("/embed", {"inputs": [[2, 3]]}, "invalid_type"),
    ("/embed", {"input": "a"}, "missing_input"),
    ("/embed", {"inputs": "a", "normalize": "yes"}, "invalid_type"),
    ("/embed", {"inputs": "a", "truncate": 1}, "invalid_type"),
    ("/embed", [1, 2], "invalid_type"),
])
def test_bad_json_fields(tiny, path, body, code):
    status, reply = tiny.post(path, body)
    assert_error(status, reply, 400, code)


@pytest.mark.parametrize("raw", [b"", b"{", b"{\"input\": \"a\",}", b"{\"input\": \"a\"} x",
                                 b"nul\x00l", b"\xff\xfe"])
def test_malformed_json(tiny, raw):
    status, _, body = tiny.request("POST", "/v1/embeddings", raw)
    assert_error(status, json.loads(body), 400, "invalid_json")


def test_routes_and_methods(tiny):
    status, _, body = tiny.request("GET", "/nope")
    assert_error(status, json.loads(body), 404, "not_found")
    status, _, body = tiny.request("GET", "/v1/embeddings")
    assert_error(status, json.loads(body), 405, "method_not_allowed")
    status, _, body = tiny.request("POST", "/health", b"{}")
    assert_error(status, json.loads(body), 405, "method_not_allowed")
    status, _, body = tiny.request("GET", "/health")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    status, _, body = tiny.request("GET", "/v1/models")
    models = json.loads(body)["data"]
    assert status == 200 and len(models) == 1 and models[0]["dimensions"] == 64
    assert models[0]["max_input_tokens"] == 32


def test_body_limit(tiny):
    big = json.dumps({"input": ["the man " * 3000]}).encode()  # over --max-body-bytes 16384
    assert len(big) > 16384
    status, _, body = tiny.request("POST", "/v1/embeddings", big)
    assert_error(status, json.loads(body), 413, "body_too_large")
    # without Content-Length (chunked): cut while reading
    status, _, body = tiny.request("POST", "/v1/embeddings", iter([big[:3000], big[3000:]]),
                                   {"Transfer-Encoding": "chunked"})
    assert_error(status, json.loads(body), 413, "body_too_large")
    status, _, body = tiny.request("POST", "/v1/embeddings", iter([b'{"input": ', b'"the"}']),
                                   {"Transfer-Encoding": "chunked"})
    assert status == 200 and len(json.loads(body)["data"]) == 1


def test_too_long(tiny, tiny_dir):
    long_text = "the " * 40  # 42 tokens with [CLS] and [SEP]; the model takes 32
    status, body = tiny.post("/v1/embeddings", {"input": long_text})  # --truncate by default
    assert status == 200 and body["usage"]["prompt_tokens"] == 32
    assert_close([body["data"][0]["embedding"]], stof_embed(tiny_dir, [long_text]))
    assert_error(*tiny.post("/embed", {"inputs": long_text, "truncate": False}), 413,
                 "input_too_long")
    status, body = tiny.post("/v1/embeddings", {"input": [list(range(5, 45))]})
    assert status == 200 and body["usage"]["prompt_tokens"] == 32
    strict = Server(STOF, tiny_dir, ["--no-truncate"])
    try:
        assert_error(*strict.post("/v1/embeddings", {"input": ["the", long_text]}), 413,
                     "input_too_long")
        assert_error(*strict.post("/v1/embeddings", {"input": [list(range(5, 45))]}), 413,
                     "input_too_long")
        status, body = strict.post("/embed", {"inputs": long_text, "truncate": True})
        assert status == 200 and len(body) == 1
        status, _ = strict.post("/embed", {"inputs": "the " * 30})  # exactly 32 tokens
        assert status == 200
    finally:
        assert strict.stop() == 0


def test_bad_input_leaves_others_alone(tiny):
    good = {"input": ["the man plays music", "a guitar"]}
    status, before = tiny.post("/v1/embeddings", good)
    assert status == 200
    errors = []

    def bad(i):
        s, _, _ = tiny.request("POST", "/v1/embeddings", b"{\"input\": [" + b"1," * i)
        errors.append(s)

    threads = [threading.Thread(target=bad, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    status, after = tiny.post("/v1/embeddings", good)
    for t in threads:
        t.join(60)
    assert errors == [400] * 16
    assert status == 200 and after["data"] == before["data"]
    assert tiny.metric("stof_serve_queue_requests") == 0


def test_queue_full(tiny_dir):
    s = Server(STOF, tiny_dir, ["--max-queue", "1", "--max-wait-ms", "3000"])
    try:
        first = {}
        t = threading.Thread(target=lambda: first.update(r=s.post("/embed", {"inputs": "the"})))
        t.start()
        deadline = time.monotonic() + 30
        while s.metric("stof_serve_queue_requests") < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        status, headers, body = s.request("POST", "/embed", b'{"inputs": "a"}')
        assert_error(status, json.loads(body), 503, "queue_full")
        assert headers.get("Retry-After") == "1"
        t.join(60)
        assert first["r"][0] == 200 and len(first["r"][1]) == 1
        text = s.request("GET", "/metrics")[2].decode()
        assert 'stof_serve_requests_total{status="503"} 1' in text
    finally:
        assert s.stop() == 0


def thread_nices(pid):
    """{thread name: set of nice values} of a process's threads (Linux /proc)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            nice = int(f.read().rsplit(")", 1)[1].split()[16])
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            out.setdefault(f.read().strip(), set()).add(nice)
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
@pytest.mark.parametrize("k", [None, 0, 4])
def test_connection_threads_yield_to_the_worker(tiny_dir, k):
    """The threads that parse, tokenize and encode run --connection-nice levels (default 10)
    below the batch worker and the rest of the process's start-up threads; with an open
    keep-alive connection its thread is there to see."""
    import http.client
    s = Server(STOF, tiny_dir, [] if k is None else ["--connection-nice", str(k)])
    try:
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/embed", b'{"inputs": "the man"}', {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200 and len(json.loads(r.read())) == 1
        base = os.getpriority(os.PRIO_PROCESS, 0)  # the server inherited it
        nices = thread_nices(s.proc.pid)
        mhd = set().union(*(v for name, v in nices.items() if name.startswith("MHD-")))
        want = base + (10 if k is None else k)
        assert mhd == {want}, nices
        assert base in set().union(*(v for name, v in nices.items() if not name.startswith("MHD-")))
        c.close()
    finally:
        assert s.stop() == 0


# ---------------------------------------------------------------- load and shutdown


def test_32_concurrent_clients(tiny, tiny_dir):
    pool = [" ".join(TINY_WORDS[(i * 7 + j) % len(TINY_WORDS)] for j in range(2 + i % 11))
            for i in range(64)]
    want = dict(zip(pool, stof_embed(tiny_dir, pool)))
    batches0 = tiny.metric("stof_serve_batches_total")
    seqs0 = tiny.metric("stof_serve_sequences_total")
    def texts(c, r):
        return [pool[(c * 5 + r * 3 + k) % len(pool)] for k in range(1 + (c + r) % 8)]

    assert concurrent_clients(tiny, 32, 6, texts, want) == []
    seqs = tiny.metric("stof_serve_sequences_total") - seqs0
    batches = tiny.metric("stof_serve_batches_total") - batches0
    assert seqs == sum(1 + (c + r) % 8 for c in range(32) for r in range(6))
    assert batches < 32 * 6, "concurrent requests were never merged into one batch"


@needs_minilm
def test_batch_time_budget(minilm):
    """--max-batch-ms steers the token budget: 1 ms is below any MiniLM forward on the CPU,
    so under concurrent load the budget falls from --max-batch-tokens towards its floor, and
    every result is still the one `stof embed` gives. Without the option the CPU keeps its
    token budget (the default aims at a time on a GPU only)."""
    assert minilm.metric("stof_serve_batch_token_budget") == 16384
    texts = [t for t in TEXTS if t is not LONG]
    want = dict(zip(texts, stof_embed(MINILM, texts)))
    s = Server(STOF, MINILM, ["--max-batch-ms", "1", "--max-batch-tokens", "4096"])
    try:
        assert s.metric("stof_serve_batch_token_budget") == 4096
        def pick(c, r):
            return [texts[(c + r + k) % len(texts)] for k in range(1 + (c + r) % 4)]

        assert concurrent_clients(s, 8, 3, pick, want) == []
        assert s.metric("stof_serve_batch_token_budget") < 4096
    finally:
        assert s.stop() == 0


def test_sigterm_drains(tiny_dir):
    s = Server(STOF, tiny_dir, ["--max-wait-ms", "1500"])
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        s.post("/v1/embeddings", {"input": ["the man"] * (i + 1)}))) for i in range(4)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while s.metric("stof_serve_queue_requests") < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        s.proc.send_signal(15)
        deadline = time.monotonic() + 30
        while not any("no new connections" in x for x in s.lines) and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(ConnectionRefusedError):
            s.request("GET", "/health", timeout=5)
        for t in threads:
            t.join(60)
        assert sorted(len(b["data"]) for st, b in results if st == 200) == [1, 2, 3, 4]
        assert s.proc.wait(timeout=60) == 0
        assert any("stopped" in x for x in s.lines)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


@needs_minilm
def test_readme_snippet(minilm):
    """The curl lines of README.md's Serving section, against this test's server."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    section = readme.split("## Serving", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    assert "build/stof serve --model models/all-MiniLM-L6-v2 --port 8080 &" in section
    commands = section.replace("\\\n", " ").splitlines()
    curls = [c for c in commands if c.startswith("curl ")]
    assert len(curls) == 2
    replies = [json.loads(subprocess.run(c.replace(":8080/", f":{minilm.port}/"), shell=True,
                                         check=True, capture_output=True, timeout=120).stdout)
               for c in curls]
    want = stof_embed(MINILM, ["A man is playing a guitar.", "Someone plays music."])
    assert_close([d["embedding"] for d in replies[0]["data"]], want)
    assert_close(replies[1], want[:1])


def test_sigterm_on_any_thread(tiny_dir):
    """SIGTERM taken by a thread started before main (OpenBLAS's pool does not block it)
    still stops the server gracefully rather than by the signal's default action."""
    s = Server(STOF, tiny_dir)
    try:
        pid = s.proc.pid
        target = pid
        for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                blocked = int(next(x for x in f if x.startswith("SigBlk:")).split()[1], 16)
            if tid != pid and not blocked & (1 << (15 - 1)):
                target = tid
        os.kill(target, 15)
        assert s.proc.wait(timeout=60) == 0
        assert any("stopped" in x for x in s.lines)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
