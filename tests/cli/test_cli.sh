#!/bin/sh
# test_cli.sh STOF SOURCE_DIR [GROUP] — the stof command end to end: each
# subcommand's --help, its option errors (exit 2 and the exact message), and
# small real runs on the CPU backend whose figures only a real run prints.
# GROUP is one of general, run, tune, demo, mask, embed, score (default: all). Needs no
# GPU: every run that picks a device says --device cpu, and tune is only asked
# for its help and option errors.
# Prints "FAIL <case>: <why>" for each failing case and exits 1 if there was one.

if [ $# -lt 2 ]; then
    echo "usage: $0 STOF SOURCE_DIR [general|run|tune|demo|mask|embed|score]" >&2
    exit 2
fi
STOF=$1
SRC=$2
GROUP=${3:-all}
TINY=$SRC/tests/data/tiny_bert

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cases=0
failures=0
name=

fail()
{
    failures=$((failures + 1))
    printf 'FAIL %s: %s\n' "$name" "$1"
    printf '  stdout: %s\n' "$(head -c 600 "$tmp/out")"
    printf '  stderr: %s\n' "$(head -c 600 "$tmp/err")"
}

# run_case RC ARGS...: runs stof ARGS, checks the exit code; the case is named by its arguments.
run_case()
{
    want=$1
    shift
    name="stof $*"
    cases=$((cases + 1))
    "$STOF" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq "$want" ] || fail "exit $rc, want $want"
}

out_has() { grep -qF -- "$1" "$tmp/out" || fail "stdout lacks '$1'"; }
out_lacks() { ! grep -qF -- "$1" "$tmp/out" || fail "stdout holds '$1'"; }
err_has() { grep -qF -- "$1" "$tmp/err" || fail "stderr lacks '$1'"; }
err_line() { grep -qxF -- "$1" "$tmp/err" || fail "stderr lacks the line '$1'"; }
out_empty() { [ ! -s "$tmp/out" ] || fail "stdout is not empty"; }
err_empty() { [ ! -s "$tmp/err" ] || fail "stderr is not empty"; }
out_lines() { [ "$(wc -l <"$tmp/out")" -eq "$1" ] || fail "stdout has $(wc -l <"$tmp/out") lines, want $1"; }

# usage_error MESSAGE ARGS...: stof ARGS exits 2, prints nothing on stdout and MESSAGE as a line on stderr.
usage_error()
{
    msg=$1
    shift
    run_case 2 "$@"
    out_empty
    err_line "$msg"
}

# help CMD: --help exits 0 with the usage on stdout and nothing on stderr, wherever it stands.
help()
{
    run_case 0 "$1" --help
    out_has "usage: stof $1"
    err_empty
    run_case 0 "$1" --batch 1 --help --bogus
    out_has "usage: stof $1"
}

# common_errors CMD MAX_SEQ ARGS...: errors of the options run, tune, demo and mask share, after ARGS.
common_errors()
{
    cmd=$1
    max=$2
    shift 2
    usage_error "stof $cmd: unknown option '--bogus'" "$cmd" "$@" --bogus 1
    usage_error "stof $cmd: unknown option '--Seq'" "$cmd" "$@" --Seq 1
    # An unknown option is named as such wherever it stands (it takes no value).
    usage_error "stof $cmd: unknown option '--bogus'" "$cmd" "$@" --bogus --help
    usage_error "stof $cmd: unknown option '--bogus'" "$cmd" "$@" --bogus
    usage_error "stof $cmd: --seq needs a value" "$cmd" "$@" --seq
    usage_error "stof $cmd: --seq: 'x' is not an integer in [1, $max]" "$cmd" "$@" --seq x
    usage_error "stof $cmd: --seq: '' is not an integer in [1, $max]" "$cmd" "$@" --seq ''
    usage_error "stof $cmd: --seq: '0' is not an integer in [1, $max]" "$cmd" "$@" --seq 0
    usage_error "stof $cmd: --seq: '$((max + 1))' is not an integer in [1, $max]" "$cmd" "$@" \
        --seq $((max + 1))
    usage_error "stof $cmd: --seq: '12abc' is not an integer in [1, $max]" "$cmd" "$@" \
        --seq 12abc
    usage_error "stof $cmd: --seq: '99999999999999999999' is not an integer in [1, $max]" \
        "$cmd" "$@" --seq 99999999999999999999
    usage_error "stof $cmd: --batch: '4097' is not an integer in [1, 4096]" "$cmd" "$@" \
        --batch 4097
    usage_error "stof $cmd: --lengths: 'x' is not an integer in [0, $max]" "$cmd" "$@" \
        --lengths 3,x
    usage_error "stof $cmd: --lengths: '-1' is not an integer in [0, $max]" "$cmd" "$@" \
        --lengths -1
    usage_error "stof $cmd: --lengths: empty list" "$cmd" "$@" --lengths ,
    usage_error "stof $cmd: --lengths: list too long" "$cmd" "$@" --lengths "$long_list"
    # The first error stops the parse.
    usage_error "stof $cmd: --batch: '0' is not an integer in [1, 4096]" "$cmd" "$@" \
        --batch 0 --bogus 1
}

device_errors()
{
    cmd=$1
    shift
    usage_error "stof $cmd: --device: 'tpu' is not one of auto, cpu, gpu" "$cmd" "$@" --device tpu
    usage_error "stof $cmd: --device: 'CPU' is not one of auto, cpu, gpu" "$cmd" "$@" --device CPU
}

dtype_errors()
{
    cmd=$1
    shift
    usage_error "stof $cmd: --dtype: 'f8' is not one of f16, bf16, f32" "$cmd" "$@" --dtype f8
}

seed_errors()
{
    cmd=$1
    shift
    usage_error "stof $cmd: --seed: '-1' is not an integer in [0, 1073741824]" "$cmd" "$@" \
        --seed -1
    usage_error "stof $cmd: --seed: '1073741825' is not an integer in [0, 1073741824]" "$cmd" \
        "$@" --seed 1073741825
}

# 2,049 values: more than the 4,095 characters a list may have.
long_list=1
i=0
while [ $i -lt 2048 ]; do
    long_list=$long_list,1
    i=$((i + 1))
done

test_general()
{
    run_case 0 --help
    out_has "usage: stof COMMAND"
    run_case 2
    err_has "usage: stof COMMAND"
    run_case 2 frobnicate
    err_has "stof: unknown command 'frobnicate'"
    run_case 0 version
    out_has "stof 0."
}

test_run()
{
    help run
    common_errors run 1048576 --model "$TINY"
    device_errors run --model "$TINY"
    dtype_errors run --model "$TINY"
    seed_errors run --model "$TINY"
    usage_error "stof run: unexpected argument 'extra'" run --model "$TINY" extra
    usage_error "stof run: unexpected argument '--'" run --model "$TINY" --
    usage_error "stof run: unexpected argument '-x'" run --model "$TINY" -x
    usage_error "stof run: --iters: '0' is not an integer in [1, 100000]" run --iters 0
    usage_error "stof run: unknown option '--eager=1'" run --model "$TINY" --eager=1 --iters 1
    usage_error "stof run: --model DIR is required" run --batch 2
    usage_error "stof run: --model DIR is required" run --eager
    usage_error "stof run: --lengths has 1 values but --batch is 2" \
        run --device cpu --model "$TINY" --batch 2 --lengths 16
    usage_error "stof run: --lengths: 17 is longer than --seq 16" \
        run --device cpu --model "$TINY" --batch 2 --seq 16 --lengths 3,17
    run_case 1 run --device cpu --model "$tmp/no_such_model"
    err_has "stof run: loading the model: "

    # Lengths from the seed (1): 30 real tokens of 2 x 16.
    run_case 0 run --device cpu --model "$TINY" --batch 2 --seq 16 --iters 1
    out_has "on cpu (no GPU in use: CPU backend)"
    out_has "2 layers, hidden 64, 4 heads (dim 16), intermediate 128, vocab 100, run dtype f32"
    out_has "batch         B=2 L=16, 30 real tokens of 32 (94%), mask dense"
    out_has " over 1 runs, "
    # Five forwards on the CPU unless --iters says otherwise; lengths as given.
    run_case 0 run --device cpu --model "$TINY" --batch 2 --seq 16 --lengths 3,16 --seed 9 \
        --mask window:4 --eager
    out_has "batch         B=2 L=16, 19 real tokens of 32 (59%), mask window:4"
    out_has " over 5 runs, "
    run_case 0 run --device cpu --model "$TINY" --iters 2 --seq 8 --seed 7 --dtype f32
    out_has "batch         B=1 L=8, "
    out_has " over 2 runs, "
    out_has "family        bert (model_type bert), 4 kv heads, encoder"
    # Any family: a sharded Mistral (GQA, sliding window) under a mask.
    run_case 0 run --device cpu --model "$SRC/tests/data/families/mistral" --batch 2 --seq 16 \
        --iters 1 --mask window:4
    out_has "family        llama (model_type mistral), 2 kv heads, decoder"
    out_has "batch         B=2 L=16, 30 real tokens of 32 (94%), mask window:4"
    # A batch that cannot fit is refused before anything is allocated.
    run_case 1 run --device cpu --model "$SRC/tests/data/families/gpt2" --batch 4096 \
        --seq 1048576
    err_has "stof run: checking the batch size: "
    err_has "use a smaller --batch or --seq"
}

# scores_match EXPECTED: each stdout line's log_likelihood and perplexity within 1e-4
# (relative) of the "ll ppl" line of EXPECTED (Hugging Face's, gen_family_golden.py).
scores_match()
{
    sed -e 's/.*"log_likelihood": \([^,]*\), "perplexity": \([^}]*\)}/\1 \2/' "$tmp/out" \
        >"$tmp/got"
    paste -d ' ' "$tmp/got" "$1" | awk '
        function rel(a, b) { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; return d / b }
        NF != 4 || rel($1, $3) > 1e-4 || rel($2, $4) > 1e-4 { bad = 1 }
        END { exit bad || NR == 0 }' || fail "scores differ from $1"
}

test_score()
{
    FAM=$SRC/tests/data/families
    run_case 0 score --help
    out_has "usage: stof score --model DIR (--ids FILE | --file FILE)"
    err_empty
    usage_error "stof score: --model DIR and one of --ids FILE or --file FILE are required" \
        score --model "$FAM/gpt2"
    usage_error "stof score: --model DIR and one of --ids FILE or --file FILE are required" \
        score --model "$FAM/gpt2" --ids x --file y
    for fam in gpt2 llama mistral qwen2; do
        run_case 0 score --device cpu --model "$FAM/$fam" --ids "$FAM/$fam.ids"
        out_lines 3
        out_has '{"line": 1, "tokens": 12, "log_likelihood": '
        scores_match "$FAM/$fam.score"
    done
    printf '5 6\n\n7\n' >"$tmp/ids"
    run_case 0 score --device cpu --model "$FAM/gpt2" --ids "$tmp/ids"
    out_has '{"line": 3, "tokens": 1, "log_likelihood": 0, "perplexity": null}'
    printf '1 2 x7\n' >"$tmp/ids"
    run_case 1 score --device cpu --model "$FAM/gpt2" --ids "$tmp/ids"
    err_has "$tmp/ids:1: 'x7' is not a token id"
    printf '1 2 900\n' >"$tmp/ids"
    run_case 1 score --device cpu --model "$FAM/gpt2" --ids "$tmp/ids"
    err_has "$tmp/ids:1: ids[0, 2] = 900 is outside the vocabulary [0, 512)"
    run_case 1 score --device cpu --model "$FAM/modernbert" --ids "$FAM/gpt2.ids"
    err_has "scoring needs a decoder"
    run_case 1 score --device cpu --model "$FAM/gpt2" --ids "$tmp/no_such_file"
    err_has "no_such_file: no such file"
    # Text: the folder's tokenizer gives the ids (the tiny GPT-2 with the golden GPT-2
    # tokenizer, whose ids for these texts fit its vocabulary); the scores equal those of
    # the same ids given with --ids.
    mkdir -p "$tmp/gpt2_text"
    cp "$FAM/gpt2/config.json" "$FAM/gpt2/model.safetensors" "$tmp/gpt2_text/"
    cp "$SRC/tests/data/tok/gpt2/tokenizer.json" "$SRC/tests/data/tok/gpt2/tokenizer_config.json" \
        "$tmp/gpt2_text/"
    printf 'a b c\n\nHello\n' >"$tmp/text"
    run_case 0 tokenize --model "$tmp/gpt2_text" --file "$tmp/text"
    sed -e 's/.*\[\(.*\)\].*/\1/' -e 's/,/ /g' "$tmp/out" >"$tmp/ids"
    run_case 0 score --device cpu --model "$tmp/gpt2_text" --ids "$tmp/ids"
    cp "$tmp/out" "$tmp/by_ids"
    run_case 0 score --device cpu --model "$tmp/gpt2_text" --file "$tmp/text"
    out_lines 2
    sed -e 's/"line": [0-9]*, //' "$tmp/out" >"$tmp/a"
    sed -e 's/"line": [0-9]*, //' "$tmp/by_ids" >"$tmp/b"
    cmp -s "$tmp/a" "$tmp/b" || fail "score --file differs from score --ids of the same ids"
    run_case 1 score --device cpu --model "$FAM/gpt2" --file "$tmp/text"
    err_has "loading the tokenizer"
}

test_tune()
{
    help tune
    common_errors tune 1048576 --model "$TINY"
    dtype_errors tune --model "$TINY"
    seed_errors tune --model "$TINY"
    usage_error "stof tune: unknown option '--device'" tune --model "$TINY" --device cpu
    usage_error "stof tune: unexpected argument 'extra'" tune --model "$TINY" extra
    usage_error "stof tune: --budget: '0' is not an integer in [1, 4096]" tune --budget 0
    usage_error "stof tune: --budget: '4097' is not an integer in [1, 4096]" tune --budget 4097
    usage_error "stof tune: --cache needs a value" tune --model "$TINY" --cache
    usage_error "stof tune: --model DIR is required" tune --no-store --cache x.json --budget 2
    usage_error "stof tune: --lengths has 1 values but --batch is 2" \
        tune --model "$TINY" --batch 2 --lengths 16 --no-store
    usage_error "stof tune: --lengths: 9 is longer than --seq 8" \
        tune --model "$TINY" --seq 8 --lengths 9
}

test_demo()
{
    help demo
    common_errors demo 131072
    device_errors demo
    dtype_errors demo
    seed_errors demo
    usage_error "stof demo: unexpected argument 'extra'" demo extra
    usage_error "stof demo: --heads: '257' is not an integer in [1, 256]" demo --heads 257
    usage_error "stof demo: --dim: '0' is not an integer in [1, 256]" demo --dim 0
    usage_error "stof demo: --iters: '100001' is not an integer in [1, 100000]" demo --iters 100001
    usage_error "stof demo: unknown option '--eager'" demo --eager 1
    usage_error "stof demo: --lengths has 1 values but --batch is 2" demo --lengths 3
    usage_error "stof demo: --lengths: 65 is longer than --seq 64" \
        demo --seq 64 --batch 1 --lengths 65
    run_case 1 demo --device cpu --seq 64 --batch 1 --mask window:
    err_has "stof demo: parsing --mask: "

    # f32 on the CPU unless --dtype says otherwise.
    run_case 0 demo --device cpu --seq 64 --batch 1 --heads 2 --dim 32 --iters 1
    out_has "on cpu (no GPU in use: CPU backend)"
    out_has "window:128,global:32: 4096 visible pairs (density 1.000), 1 tiles of 64x64"
    out_has "attention     B=1 H=2 L=64 D=32 f32, cpu kernel"
    run_case 0 demo --device cpu --seq 64 --batch 2 --heads 2 --dim 32 --iters 1 \
        --lengths 10,64 --mask causal --seed 3 --dtype f16
    out_has "mask          causal: 2135 visible pairs (density 0.261), 2 tiles of 64x64 (2 partial)"
    out_has "attention     B=2 H=2 L=64 D=32 f16, cpu kernel"
}

test_mask()
{
    help mask
    common_errors mask 1048576 causal
    device_errors mask causal
    usage_error "stof mask: more than one SPEC ('window:8')" mask causal --seq 64 window:8 --seq x
    usage_error "stof mask: --heads: '1025' is not an integer in [1, 1024]" mask causal --heads 1025
    usage_error "stof mask: --tile: '129' is not an integer in [0, 128]" mask causal --tile 129
    usage_error "stof mask: --seq-k: '0' is not an integer in [1, 1048576]" mask causal --seq-k 0
    usage_error "stof mask: unknown option '--dtype'" mask causal --dtype f16
    usage_error "stof mask: --lengths has 2 values but --batch is 1" mask causal --lengths 3,4
    usage_error "stof mask: --lengths: 100 is longer than --seq 64" mask causal --seq 64 --lengths 100
    # No SPEC: the usage, on stdout, and exit 2.
    run_case 2 mask --seq 64
    out_has "usage: stof mask SPEC"
    run_case 1 mask "window:64,bogus:3" --device cpu
    err_has "stof mask: parsing the mask spec: "
    run_case 1 mask -- --device cpu
    err_has "stof mask: parsing the mask spec: "

    run_case 0 mask "window:64,random:64x3@7" --seq 1024 --device cpu
    out_has "spec          window:64,random:64x3@7"
    out_has "shape         B=1 H=1 Lq=1024 Lk=1024 on cpu"
    out_has "tiles         64x64: 82 listed of 256 (58 full, 24 partial), tile density 0.3203"
    out_has "visible pairs 287488, density 0.2742"
    out_lacks "FF"
    out_lines 6
    # The SPEC may stand after the options; --seq-k, --tile, --lengths and --map.
    run_case 0 mask --seq 256 --seq-k 128 --tile 32 --map --device cpu --batch 2 --heads 3 \
        --lengths 100,256 causal,topleft
    out_has "shape         B=2 H=3 Lq=256 Lk=128 on cpu"
    out_has "tiles         32x32: 36 listed of 64 (28 full, 8 partial), tile density 0.5625"
    out_has "visible pairs 29690, density 0.4530"
    out_lines 14
    grep -qx 'FFp\.' "$tmp/out" || fail "stdout lacks the tile map row 'FFp.'"
    # A map too wide to draw is refused before its dense decode (17 GB here) is made:
    # under a 2 GB address-space limit the command still succeeds. OPENBLAS_NUM_THREADS=1:
    # OpenBLAS's threaded build starts a server thread per core when it loads, each taking a
    # 128 MB buffer, and a server thread whose buffer does not fit retries for ever (16 cores
    # fill 2 GB before stof runs); one thread keeps the limit about stof's own memory.
    name="stof mask full --seq 131072 --map (2 GB address space)"
    cases=$((cases + 1))
    (ulimit -v 2000000 && OPENBLAS_NUM_THREADS=1 exec "$STOF" mask full --seq 131072 --map \
        --device cpu) \
        >"$tmp/out" 2>"$tmp/err" || fail "exit $?, want 0"
    out_has "(tile map omitted: 2048 tile columns, at most 128 are drawn)"
    err_empty
}

test_embed()
{
    help embed
    # A folder the tokenizer can open: the tiny BERT with a vocabulary of its 100 ids.
    model=$tmp/tiny_vocab
    mkdir -p "$model" && cp "$TINY/config.json" "$TINY/model.safetensors" "$model/" || exit 1
    {
        printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]' hello world
        i=7
        while [ $i -lt 100 ]; do
            echo "w$i"
            i=$((i + 1))
        done
    } >"$model/vocab.txt"

    usage_error "stof embed: unknown option '--bogus' (see stof embed --help)" \
        embed --model "$model" --bogus 1 hi
    usage_error "stof embed: unknown option '--seq' (see stof embed --help)" \
        embed --model "$model" --seq 8 hi
    usage_error "stof embed: unknown option '--bogus' (see stof embed --help)" \
        embed --model "$model" hi --bogus
    usage_error "stof embed: --batch needs a value" embed --model "$model" hi --batch
    usage_error "stof embed: --batch: '0' is not an integer in [1, 4096]" \
        embed --model "$model" --batch 0 hi
    usage_error "stof embed: --max-length: '1' is not an integer in [2, 1048576]" \
        embed --model "$model" --max-length 1 hi
    usage_error "stof embed: --device: 'tpu' is not one of auto, cpu, gpu" \
        embed --model "$model" --device tpu hi
    usage_error "stof embed: --dtype: 'f8' is not one of f16, bf16, f32" \
        embed --model "$model" --dtype f8 hi
    usage_error "stof embed: --model DIR is required (see stof embed --help)" embed hi
    usage_error "stof embed: --format: 'csv' is not one of jsonl, npy" \
        embed --model "$model" --format csv hi
    usage_error "stof embed: give TEXT arguments or --file, not both" \
        embed --model "$model" --file x.txt hi
    run_case 1 embed --device cpu --model "$TINY" "hello world"
    err_has "stof embed: loading the tokenizer: "
    err_has "vocab.txt"

    # Texts in input order, 64 components each; after "--" an option is a text.
    run_case 0 embed --device cpu --model "$model" "hello world" -- --help w9
    err_empty
    out_lines 3
    [ "$(sed -n 1p "$tmp/out" | cut -c1-37)" = '{"text": "hello world", "embedding": ' ] ||
        fail "line 1 is not the embedding of 'hello world'"
    [ "$(sed -n 2p "$tmp/out" | cut -c1-18)" = '{"text": "--help",' ] ||
        fail "line 2 is not the embedding of '--help'"
    [ "$(sed -n 3p "$tmp/out" | tr -cd , | wc -c)" -eq 64 ] ||
        fail "line 3 does not hold 64 components"
    printf 'hello\n\nworld w9\n' >"$tmp/texts.txt"
    run_case 0 embed --device cpu --model "$model" --batch 1 --max-length 4 --file "$tmp/texts.txt"
    out_lines 2
    out_has '{"text": "world w9", "embedding": ['
    cp "$tmp/out" "$tmp/from_file"

    # No TEXT and no --file: the lines of standard input, the same embeddings.
    name="stof embed (texts on standard input)"
    cases=$((cases + 1))
    "$STOF" embed --device cpu --model "$model" --batch 1 --max-length 4 <"$tmp/texts.txt" \
        >"$tmp/out" 2>"$tmp/err" || fail "exit $?, want 0"
    cmp -s "$tmp/out" "$tmp/from_file" || fail "stdout differs from the --file run's"
    name="stof embed (empty standard input)"
    cases=$((cases + 1))
    "$STOF" embed --device cpu --model "$model" </dev/null >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 2 ] || fail "exit code, want 2"
    err_has "stof embed: no text to embed: standard input holds none"
    out_empty

    # --no-text drops the text, nothing else.
    run_case 0 embed --device cpu --model "$model" --batch 1 --max-length 4 --no-text \
        --file "$tmp/texts.txt"
    sed 's/^{"text": "[^"]*", /{/' "$tmp/from_file" >"$tmp/want"
    cmp -s "$tmp/out" "$tmp/want" || fail "stdout is not the --file run's lines without text"

    # --format npy: one float32 [2, 64] array holding the JSON lines' values.
    run_case 0 embed --device cpu --model "$model" --batch 1 --max-length 4 --format npy \
        --file "$tmp/texts.txt"
    [ "$(head -c 6 "$tmp/out" | tail -c 5)" = NUMPY ] || fail "stdout is not a .npy file"
    if python3 -c 'import numpy' 2>/dev/null; then
        python3 - "$tmp/out" "$tmp/from_file" <<'PY' || fail "the .npy array differs from the JSON lines"
import json, sys
import numpy as np
a = np.load(sys.argv[1])
want = np.array([json.loads(line)["embedding"] for line in open(sys.argv[2])], dtype=np.float32)
assert a.dtype == np.float32 and a.shape == want.shape == (2, 64), (a.dtype, a.shape)
assert np.allclose(a, want, rtol=1e-6, atol=1e-7)
PY
    fi

    # A folder or FIFO where a file belongs is named as such.
    mkdir -p "$tmp/folder"
    run_case 1 embed --device cpu --model "$model" --file "$tmp/folder"
    err_line "stof embed: --file $tmp/folder: is a folder, not a file"
    for what in config.json model.safetensors vocab.txt; do
        bad=$tmp/bad_$what
        rm -rf "$bad" && cp -r "$model" "$bad" && rm "$bad/$what" && mkdir "$bad/$what"
        run_case 1 embed --device cpu --model "$bad" hello
        err_has "$bad/$what: is a folder, not a file"
    done
    bad=$tmp/bad_fifo
    rm -rf "$bad" && cp -r "$model" "$bad" && rm "$bad/model.safetensors" &&
        mkfifo "$bad/model.safetensors"
    run_case 1 embed --device cpu --model "$bad" hello
    err_has "$bad/model.safetensors: is a FIFO (named pipe), not a regular file"
}

if [ ! -x "$STOF" ]; then
    echo "FAIL: $STOF is not an executable" >&2
    exit 1
fi
for g in general run tune demo mask embed score; do
    if [ "$GROUP" = all ] || [ "$GROUP" = "$g" ]; then
        "test_$g"
    fi
done
if [ "$cases" -eq 0 ]; then
    echo "FAIL: no case in group '$GROUP'" >&2
    exit 1
fi
echo "$failures of $cases cases failed (group $GROUP)"
[ "$failures" -eq 0 ]
