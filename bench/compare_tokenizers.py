#!/usr/bin/env python3
"""compare_tokenizers.py — stof's tokenizers against Hugging Face `tokenizers` on the CPU.

For each tokenizer folder (the committed family tokenizers of tests/data/tok and the
all-MiniLM-L6-v2 WordPiece folder when models/ has it), 100,000 sentences of mixed
length (3 to 300 words, mostly English with accents, CJK, emoji and digits) go through
HF's Tokenizer.encode_batch and stof's stof_tokenizer_encode_batch, single-threaded and
with every core. HF runs in a child process per thread count, since its thread pool
(RAYON_NUM_THREADS) is fixed at first use. The ids of both are compared, sentence for
sentence, in the same run. Times are the best of --repeats runs, each timing the call
from Python str list to ids (HF's Encoding objects; stof's flat id array).

    PYTHONPATH=python python3 bench/compare_tokenizers.py [--sentences N] [--out FILE]

Writes bench/results/tokenizers-<date>-<machine>.json with {"device", "date", "commit",
"command", "cases", "summary": {"min_vs_hf_1t", "min_vs_hf_all", "mismatches"}}.
"""

import argparse
import datetime
import json
import os
import platform
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPO, git_commit  # noqa: E402

WORDS = ("the of and to in a is that for it as was with be by on not he I this are or his from at "
         "which but have an they you were her she there one all we their can has more do if will "
         "would about when so no time up out them some what only its into other than then new "
         "people could two first these may like over our well also years way even most after "
         "state work world school still system where between government every however during "
         "don't it's I'm we'll they've can't won't naïve café résumé Zürich São Paulo straße "
         "Kraków Dvořák Москва Ελλάδα 北京 東京 서울 中文 日本語 😀 👍🏽 1999 2024 3.14 42 100,000 "
         "e-mail U.S. Dr. Mr. etc. (see) [1] \"quoted\" — ; : ! ? ...").split()


def sentences(n, seed=7):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = int(round(3 * (100 ** rng.random())))  # 3..300 words, log-uniform
        s = " ".join(rng.choice(WORDS) for _ in range(k))
        out.append(s[0].upper() + s[1:] + ".")
    return out


def folders():
    base = os.path.join(REPO, "tests", "data", "tok")
    out = [(name, os.path.join(base, name)) for name in
           ("gpt2", "llama3", "qwen2", "modernbert", "llama2", "mistral", "t5")]
    bert = os.path.join(REPO, "models", "all-MiniLM-L6-v2")
    if os.path.exists(os.path.join(bert, "tokenizer.json")):
        out.append(("bert-minilm", bert))
    return out


def hf_child(folder, n, repeats, want_ids):
    """Runs in a child whose RAYON_NUM_THREADS is set: HF's best time, and the ids."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok.no_truncation()  # a folder's tokenizer.json may carry its own; stof's call has none
    tok.no_padding()
    texts = sentences(n)
    tok.encode_batch(texts[:1000])
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        enc = tok.encode_batch(texts)
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    res = {"seconds": best, "tokens": sum(len(e.ids) for e in enc)}
    if want_ids:
        res["ids"] = [e.ids for e in enc]
    json.dump(res, sys.stdout)


def run_hf(folder, n, repeats, threads, want_ids):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    code = ("import sys; sys.path.insert(0, %r); import compare_tokenizers as c; "
            "c.hf_child(%r, %d, %d, %r)" % (os.path.dirname(os.path.abspath(__file__)), folder, n,
                                            repeats, want_ids))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def run_stof(tok, texts, threads, repeats):
    tok.encode_batch(texts[:1000], threads=threads, as_numpy=True)
    best, res = None, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = tok.encode_batch(texts, threads=threads, as_numpy=True)
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return best, res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sentences", type=int, default=100000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--machine", default="cpu2", help="results file name tag")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import stof
    cores = os.cpu_count() or 1
    texts = sentences(args.sentences)
    cases, mismatches = [], 0
    for name, folder in folders():
        tok = stof.Tokenizer(folder)
        hf1 = run_hf(folder, args.sentences, args.repeats, 1, False)
        hfa = run_hf(folder, args.sentences, args.repeats, cores, True)
        s1, _ = run_stof(tok, texts, 1, args.repeats)
        sa, (flat, offs) = run_stof(tok, texts, 0, args.repeats)
        bad = 0
        for i, ref in enumerate(hfa["ids"]):
            if flat[offs[i]:offs[i + 1]].tolist() != ref:
                bad += 1
        mismatches += bad
        case = {"tokenizer": name, "model": tok.info["model"], "sentences": args.sentences,
                "tokens": int(offs[-1]), "hf_1t_s": round(hf1["seconds"], 4),
                "hf_all_s": round(hfa["seconds"], 4), "stof_1t_s": round(s1, 4),
                "stof_all_s": round(sa, 4), "vs_hf_1t": round(hf1["seconds"] / s1, 3),
                "vs_hf_all": round(hfa["seconds"] / sa, 3), "mismatches": bad}
        cases.append(case)
        print(f"{name:12s} {case['tokens']:>9d} tokens  HF 1t {hf1['seconds']:.3f}s  stof 1t {s1:.3f}s "
              f"({case['vs_hf_1t']:.2f}x)  HF {cores}t {hfa['seconds']:.3f}s  stof {cores}t {sa:.3f}s "
              f"({case['vs_hf_all']:.2f}x)  mismatches {bad}", flush=True)
        tok.close()
    date = datetime.date.today().isoformat()
    result = {
        "device": f"{platform.processor() or platform.machine()}, {cores} cores ({_cpu_name()})",
        "date": date, "commit": git_commit(),
        "command": "PYTHONPATH=python python3 bench/compare_tokenizers.py " + " ".join(sys.argv[1:]),
        "cases": cases,
        "summary": {"min_vs_hf_1t": min(c["vs_hf_1t"] for c in cases),
                    "min_vs_hf_all": min(c["vs_hf_all"] for c in cases),
                    "mismatches": mismatches}}
    out = args.out or os.path.join(REPO, "bench", "results", f"tokenizers-{date}-{args.machine}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result["summary"]), "->", out)


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
