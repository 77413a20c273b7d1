"""test_mask.py — stof.Mask on the CPU: parsing, the canonical text form, the
builder, dense masks, compiled statistics, and agreement of every BENCH.md mask
(bench/masks.py's visibility function) with stof's own compiled mask, decoded."""

import gc
import weakref

import pytest

import masks as bench_masks
import stof
from stof import mask as stof_mask

VALID = ["full", "causal", "window:128", "window:3:5", "dilated:4x2", "global:32",
         "global:[0,5,9]", "random:64x3@7", "window:128,global:32",
         "causal,window:16,random:32x2@99", "blocks:16:10/01", "blocks:32:110/011/001",
         "window:8,global:2,within:causal", "full,within:4:0,topleft"]

INVALID = ["", "window", "window:", "window:abc", "window:-3", "dilated:4", "dilated:4x0",
           "global:[1,2", "random:64x3", "blocks:16:10/0", "causal,", ",causal", "bogus:3",
           "window:128;global:32", "random:0x3@1", "within:causal", "full,within:",
           "full,within:-1"]


@pytest.mark.parametrize("text", VALID)
def test_parse_valid_round_trips(text):
    canonical = str(stof.Mask.parse(text))
    assert canonical
    assert str(stof.Mask.parse(canonical)) == canonical


@pytest.mark.parametrize("text", INVALID)
def test_parse_invalid_raises_parse_error(text):
    with pytest.raises(stof.StofError) as info:
        stof.Mask.parse(text)
    assert info.value.status_name == "STOF_ERR_PARSE"
    assert info.value.message


def test_parse_error_names_the_position():
    text = "window:128,global:32,bogus:3"
    with pytest.raises(stof.StofError) as info:
        stof.Mask.parse(text)
    msg = info.value.message
    pos = text.index("bogus")
    assert str(pos) in msg or str(pos + 1) in msg, msg


def test_parse_rejects_non_text():
    with pytest.raises(TypeError):
        stof.Mask.parse(128)


def test_builder_matches_text_form():
    built = stof.Mask().window(128).global_(32).random(64, 3, seed=7)
    assert str(built) == str(stof.Mask.parse("window:128,global:32,random:64x3@7"))
    assert str(stof.Mask().window(3, 5)) == str(stof.Mask.parse("window:3:5"))
    assert str(stof.Mask().dilated(4, 2)) == str(stof.Mask.parse("dilated:4x2"))
    assert str(stof.Mask().global_([0, 5, 9])) == str(stof.Mask.parse("global:[0,5,9]"))
    assert str(stof.Mask().causal().full()) == str(stof.Mask.parse("causal,full"))
    assert str(stof.Mask().blocks(16, [[1, 0], [0, 1]])) == str(stof.Mask.parse("blocks:16:10/01"))


def test_builder_rejects_bad_values_with_stof_error():
    with pytest.raises(stof.StofError):
        stof.Mask().window(-1, 2)
    with pytest.raises(stof.StofError):
        stof.Mask().dilated(4, 0)
    with pytest.raises(stof.StofError):
        stof.Mask().random(0, 3, 1)
    with pytest.raises(ValueError):
        stof.Mask().blocks(16, [[1, 0], [1]])
    # values a C int cannot hold are refused, not wrapped around
    with pytest.raises(ValueError):
        stof.Mask().window(2**32)
    with pytest.raises(ValueError):
        stof.Mask().random(64, 3, seed=-1)
    with pytest.raises(ValueError):
        stof.Mask.parse("causal").compile(1, 1, 2**32 + 8, 8)


def test_repr_and_cache_key_follow_edits():
    m = stof.Mask().causal()
    key = m.cache_key
    m.window(4)
    assert m.cache_key != key
    assert "causal" in repr(m)


def test_compile_rejects_impossible_shapes():
    m = stof.Mask.parse("causal")
    for shape in [(0, 1, 8, 8), (1, 0, 8, 8), (1, 1, 0, 8), (1, 1, 8, -4)]:
        with pytest.raises(stof.StofError):
            m.compile(*shape)
    with pytest.raises(stof.StofError):
        m.compile(2, 1, 64, 64, lengths=[64, 65])  # longer than L
    with pytest.raises(stof.StofError):
        m.compile(2, 1, 64, 64, lengths=[10, 20, 30])  # three lengths for B = 2
    with pytest.raises(ValueError):
        m.compile(1, 1, 8, 8, builder="gpu-please")


def test_causal_stats_are_exact():
    L = 200
    cm = stof.Mask.parse("causal").compile(2, 3, L, L)
    st = cm.stats()
    assert st.nnz == L * (L + 1) // 2 * st.instances
    assert st.instances == 1
    assert abs(st.density - (L + 1) / (2 * L)) < 1e-12
    assert st.tiles_full + st.tiles_partial <= st.tiles_total
    assert cm.compile_time >= 0 and cm.device == "cpu"


def test_lengths_change_the_stats():
    cm = stof.Mask.parse("full").compile(3, 1, 100, 100, lengths=[100, 50, 7])
    st = cm.stats()
    assert st.nnz == 100 * 100 + 50 * 50 + 7 * 7


def test_decode_window_plane():
    np = pytest.importorskip("numpy")
    L = 150
    plane = stof.Mask.parse("window:3:5").compile(1, 1, L, L).decode(0, 0)
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    assert plane.dtype == np.uint8 and plane.shape == (L, L)
    assert np.array_equal(plane.astype(bool), (j >= i - 3) & (j <= i + 5))


def test_alignment_bottom_right_by_default_and_top_left_on_request():
    np = pytest.importorskip("numpy")
    Lq, Lk = 5, 12
    i, j = np.arange(Lq)[:, None], np.arange(Lk)[None, :]
    default = stof.Mask().causal()
    top_left = stof.Mask().causal().top_left()
    assert str(default) == "causal" and str(top_left) == "causal,topleft"
    assert str(stof.Mask.parse("causal,topleft")) == "causal,topleft"
    assert default.cache_key != top_left.cache_key
    br = default.compile(1, 1, Lq, Lk).decode(0, 0).astype(bool)
    tl = top_left.compile(1, 1, Lq, Lk).decode(0, 0).astype(bool)
    assert np.array_equal(br, j <= i + (Lk - Lq)) and np.array_equal(tl, j <= i)
    assert str(stof.Mask().causal().top_left().top_left(False)) == "causal"


def test_decode_out_of_range_instance_is_an_error():
    cm = stof.Mask.parse("causal").compile(2, 2, 16, 16)
    with pytest.raises(stof.StofError):
        cm.decode(2, 0)
    with pytest.raises(stof.StofError):
        cm.decode(0, -1)


def test_from_dense_numpy_round_trip(rng):
    np = pytest.importorskip("numpy")
    B, H, Lq, Lk = 2, 3, 70, 90
    dense = rng.random((B, H, Lq, Lk)) < 0.3
    m = stof.Mask.from_dense(dense)
    assert m.has_dense and "dense" in str(m)
    cm = m.compile(B, H, Lq, Lk)
    for b in range(B):
        for h in range(H):
            assert np.array_equal(cm.decode(b, h).astype(bool), dense[b, h])
    assert cm.stats().nnz == int(dense.sum())


def test_from_dense_broadcasts_and_accepts_uint8(rng):
    np = pytest.importorskip("numpy")
    dense = (rng.random((40, 50)) < 0.5).astype(np.uint8)
    cm = stof.Mask.from_dense(dense).compile(2, 2, 40, 50)
    for b in range(2):
        for h in range(2):
            assert np.array_equal(cm.decode(b, h), dense)


def test_from_dense_union_with_causal(rng):
    np = pytest.importorskip("numpy")
    L = 64
    dense = rng.random((1, 1, L, L)) < 0.1
    cm = stof.Mask.from_dense(dense).causal().compile(1, 1, L, L)
    want = dense[0, 0] | np.tri(L, dtype=bool)
    assert np.array_equal(cm.decode().astype(bool), want)


def test_from_dense_torch_cpu(seed):
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(seed)
    dense = torch.rand(1, 2, 33, 47, generator=gen) < 0.4
    cm = stof.Mask.from_dense(dense).compile(1, 2, 33, 47)
    for h in range(2):
        assert torch.equal(torch.from_numpy(cm.decode(0, h)).bool(), dense[0, h])


def test_from_dense_rejects_bad_input():
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError):
        stof.Mask.from_dense(np.zeros((4, 4), dtype=np.float32))
    with pytest.raises(ValueError):
        stof.Mask.from_dense(np.zeros((4,), dtype=bool))
    with pytest.raises(TypeError):
        stof.Mask.from_dense([[1, 0], [0, 1]])


def test_dense_shape_mismatch_is_a_stof_error():
    np = pytest.importorskip("numpy")
    m = stof.Mask.from_dense(np.ones((1, 1, 16, 16), dtype=bool))
    with pytest.raises(stof.StofError):
        m.compile(1, 1, 32, 32)


# Every BENCH.md mask, as bench/masks.py defines it, against stof's decode of the
# same spec: the benchmark's torch side and stof must see the same mask.
@pytest.mark.parametrize("name", bench_masks.ALL_MASKS)
@pytest.mark.parametrize("B,L", [(2, 320), (3, 200)])
def test_bench_masks_match_stof(name, B, L):
    np = pytest.importorskip("numpy")
    bm = bench_masks.make_mask(name, B, L, seed=L + 17)
    cm = stof.Mask.parse(bm.spec).compile(B, 2, L, L, lengths=bm.lengths)
    want = bm.dense_numpy()
    lengths = bm.valid_rows()
    for b in range(B):
        plane = want[b if bm.per_batch else 0, 0].copy()
        n = lengths[b]
        plane[n:, :] = False
        plane[:, n:] = False
        got = cm.decode(b, 1).astype(bool)
        bad = np.argwhere(got != plane)
        assert bad.size == 0, f"{name} b={b}: {len(bad)} elements differ, first (i, j) {bad[0]}"


def test_bigbird_random_blocks_differ_per_entry_and_seed():
    t1 = bench_masks.random_column_table(5, 2, 8, 8, 3)
    t2 = bench_masks.random_column_table(6, 2, 8, 8, 3)
    assert t1[0] != t1[1] and t1 != t2
    for plane in t1:
        assert len(plane) == 8
        for row in plane:
            assert len(row) == 3 and all(0 <= c < 8 for c in row)


def test_spec_cache_reuses_compiled_masks():
    np = pytest.importorskip("numpy")
    stof.clear_cache()
    q = np.random.default_rng(0).standard_normal((1, 1, 32, 16)).astype(np.float32)
    stof.attention(q, q, q, mask="window:4")
    stof.attention(q, q, q, mask=stof.Mask().window(4))  # same text: same entry
    hits, misses, entries = stof.cache_info()
    assert (hits, misses, entries) == (1, 1, 1)
    stof.attention(q, q, q, mask="window:4", lengths=[20])
    assert stof.cache_info()[1] == 2


def test_fed_lengths_identity_is_weak_and_versioned():
    """A GPU entry fed from CUDA lengths skips the copy only for the very tensor it holds,
    unchanged; it keeps no reference, so a dead tensor's id reused by another never
    matches (the cache must not keep a CUDA graph pool's tensors alive either)."""
    torch = pytest.importorskip("torch")
    fed = stof_mask._Fed(None, ())
    t = torch.tensor([3, 4], dtype=torch.int32)
    fed.held = stof_mask._identity((t,))
    assert fed.holds((t,))
    assert not fed.holds((t.clone(),))  # the same values in another tensor
    assert not fed.holds((t, t))
    t.add_(1)  # changed in place: its version moves
    assert not fed.holds((t,))
    fed.held = stof_mask._identity((t,))
    gone = weakref.ref(t)
    del t
    gc.collect()
    assert gone() is None
    for _ in range(20):  # ids of freed tensors come back: none matches
        assert not fed.holds((torch.tensor([4, 5], dtype=torch.int32),))


def test_masks_used_under_capture_are_kept(monkeypatch):
    """Masks a CUDA graph captured are never evicted nor cleared (the graph replays them),
    and a miss under capture is built off the capture; simulated here on the CPU."""
    np = pytest.importorskip("numpy")
    # Graphs captured by earlier tests in this process (CUDA cases) keep their masks pinned:
    # set them aside, so that this test counts its own, and put them back after.
    earlier = dict(stof_mask.cache.pinned)
    stof_mask.cache.pinned.clear()
    try:
        masks_under_capture(np, monkeypatch)
    finally:
        stof_mask.cache.pinned.clear()
        stof_mask.cache.pinned.update(earlier)


def masks_under_capture(np, monkeypatch):
    stof.clear_cache()
    q = np.random.default_rng(0).standard_normal((1, 1, 32, 16)).astype(np.float32)
    want = stof.attention(q, q, q, mask="window:4")
    built = []

    def off_capture(ctx, build):
        built.append(ctx.kind)
        return build()

    monkeypatch.setattr(stof_mask, "_capturing", lambda ctx: True)
    monkeypatch.setattr(stof_mask, "_off_capture", off_capture)
    assert np.array_equal(stof.attention(q, q, q, mask="window:4"), want)  # a hit, now kept
    captured = stof.attention(q, q, q, mask="window:5")  # a miss, built off the capture
    assert built == ["cpu"]
    assert len(stof_mask.cache.pinned) == 2 and not stof_mask.cache.entries
    monkeypatch.undo()
    stof.clear_cache()
    for w in range(6, 6 + stof_mask.cache.capacity + 1):  # the LRU overflows
        stof.attention(q, q, q, mask=f"window:{w}")
    assert len(stof_mask.cache.pinned) == 2
    assert np.array_equal(stof.attention(q, q, q, mask="window:5"), captured)
    assert stof.cache_info()[:2] == (1, stof_mask.cache.capacity + 1)


def test_within_cuts_the_union_to_the_band():
    np = pytest.importorskip("numpy")
    L = 40
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    m = stof.Mask().window(3).global_(2).within("causal")
    assert str(m) == "window:3,global:2,within:causal"
    assert str(m) == str(stof.Mask.parse("within:causal,window:3,global:2"))
    plane = m.compile(1, 1, L, L).decode(0, 0).astype(bool)
    union = (abs(i - j) <= 3) | (i < 2) | (j < 2)
    assert np.array_equal(plane, union & (j <= i))
    banded = stof.Mask().full().within(5, 1).within(2, 9)  # bands intersect
    assert str(banded) == "full,within:2:1"
    plane = banded.compile(1, 1, L, L).decode(0, 0).astype(bool)
    assert np.array_equal(plane, (j >= i - 2) & (j <= i + 1))
    with pytest.raises(stof.StofError):
        stof.Mask().full().within(-1, 2)
