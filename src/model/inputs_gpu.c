/*
 * inputs_gpu.c — a forward's inputs on the device: the packed ids, types
 * and positions with cu_seqlens (one copy from a pinned stage, or packed on
 * the device by inputs.cu), and the scan of device inputs that checks them
 * and reads the lengths back.
 */
#include "model/engine_gpu.h"

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

/* The pinned stage, at least n words, free of pending copies. */
static stof_status stage_reserve(enc_gpu *g, int64_t n)
{
    if (g->stage_busy) {
        STOF_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)g->stage_event));
        g->stage_busy = false;
    }
    if (n <= g->stage_cap) return STOF_OK;
    if (g->stage) cudaFreeHost(g->stage);
    g->stage = NULL;
    g->stage_cap = 0;
    if (n < 4096) n = 4096;
    STOF_CUDA_TRY(cudaMallocHost((void **)&g->stage, (size_t)n * sizeof(int32_t)));
    g->stage_cap = n;
    return STOF_OK;
}

/* dst <- the stage's first n words, asynchronously; the stage is busy until then. */
static stof_status stage_upload(stof_model *m, void *dst, int64_t n)
{
    enc_gpu *g = m->gpu;
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    STOF_TRY(eng_event_once(&g->stage_event));
    STOF_CUDA_TRY(
        cudaMemcpyAsync(dst, g->stage, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    STOF_CUDA_TRY(cudaEventRecord((cudaEvent_t)g->stage_event, s));
    g->stage_busy = true;
    return STOF_OK;
}

/* The parts of g->in for a batch of B sequences of L tokens: cu [B + 1] |
 * lens [B] | ids | types | positions, the last three B * L rows apart (a
 * forward uses the first Tb of each), every part on 16 bytes; rows is 0. */
static dev_inputs input_views(const enc_gpu *g, int B, int L)
{
    int64_t n = align4((int64_t)B * L);
    dev_inputs v;
    memset(&v, 0, sizeof v);
    v.cu = g->in;
    v.lens = v.cu + align4(B + 1);
    v.ids = v.lens + align4(B);
    v.types = v.ids + n;
    v.pos = v.types + n;
    return v;
}

/*
 * cu_seqlens, the lengths, and the packed ids, types and positions of host
 * tensors go up in one asynchronous copy from pinned memory; ids or types in
 * device memory are packed there (I64 narrowed to I32; their values were
 * checked by the input scan), or were packed with everything else by the scan
 * (r->packed). Rows past T hold token 0, type 0 at position 0.
 */
stof_status eng_upload_inputs(stof_model *m, const enc_request *r, int64_t rows, dev_inputs *in)
{
    enc_gpu *g = m->gpu;
    int B = r->batch;
    int64_t T = r->tokens;
    *in = input_views(g, B, r->len);
    in->rows = rows;
    /* word offsets in the stage, which mirrors g->in (types staged as zeros without types) */
    int64_t o_lens = in->lens - g->in, o_ids = in->ids - g->in, o_types = in->types - g->in,
            o_pos = in->pos - g->in;
    if (!r->types) in->types = NULL;
    if (r->packed) return STOF_OK;
    int64_t end = o_pos + rows;
    STOF_TRY(stage_reserve(g, end));
    int32_t *st = g->stage;
    memcpy(st, r->cu_seqlens, (size_t)(B + 1) * sizeof(int32_t));
    memcpy(st + o_lens, r->lengths, (size_t)B * sizeof(int32_t));
    bool host_ids = r->ids->memory == STOF_MEM_HOST;
    bool host_types = r->types && r->types->memory == STOF_MEM_HOST;
    for (int b = 0; b < B; b++) {
        int64_t t0 = r->cu_seqlens[b];
        for (int i = 0; i < r->lengths[b]; i++) {
            if (host_ids) st[o_ids + t0 + i] = (int32_t)enc_token_at(r->ids, b, i);
            if (host_types) st[o_types + t0 + i] = (int32_t)enc_token_at(r->types, b, i);
            st[o_pos + t0 + i] = i;
        }
    }
    for (int64_t t = T; t < rows; t++)
        st[o_ids + t] = st[o_types + t] = st[o_pos + t] = 0;
    STOF_TRY(stage_upload(m, g->in, end));
    if (!host_ids)
        STOF_TRY(enc_pack_tokens(m->ctx, r->ids->data, r->ids->dtype, in->cu, B, r->len, in->ids,
                                 T));
    if (r->types && !host_types)
        STOF_TRY(enc_pack_tokens(m->ctx, r->types->data, r->types->dtype, in->cu, B, r->len,
                                 in->types, T));
    return STOF_OK;
}

static long long get64(const int32_t *w)
{
    return (long long)(((uint64_t)(uint32_t)w[1] << 32) | (uint32_t)w[0]);
}

/* The first problem the scan of sequence b reports, as an error; OK when none. */
static stof_status scan_problem(const stof_model *m, const enc_request *r, int b, const int32_t *w)
{
    const stof_model_info *info = &m->info;
    STOF_REQUIRE(w[ENC_SCAN_MASK_VALUE] == INT32_MAX, STOF_ERR_INVALID_ARG,
                 "attention_mask[%d, %d] = %lld; it must hold only 0 and 1", b,
                 (int)w[ENC_SCAN_MASK_VALUE], get64(w + ENC_SCAN_MASK_VALUE_AT));
    STOF_REQUIRE(w[ENC_SCAN_MASK_ONE_AFTER_ZERO] == INT32_MAX, STOF_ERR_INVALID_ARG,
                 "attention_mask row %d has a 1 at %d after a 0 at %d: stof runs right-padded "
                 "batches (re-pad left-padded input on the right)",
                 b, (int)w[ENC_SCAN_MASK_ONE_AFTER_ZERO], (int)w[ENC_SCAN_LENGTH]);
    int32_t len = w[ENC_SCAN_LENGTH];
    STOF_REQUIRE(len >= 0 && len <= r->len, STOF_ERR_INVALID_ARG,
                 "lengths[%d] = %d is outside [0, L = %d]", b, (int)len, r->len);
    STOF_REQUIRE(w[ENC_SCAN_ID] == INT32_MAX, STOF_ERR_INVALID_ARG,
                 "ids[%d, %d] = %lld is outside the vocabulary [0, %d)", b, (int)w[ENC_SCAN_ID],
                 get64(w + ENC_SCAN_ID_VALUE), info->vocab);
    STOF_REQUIRE(w[ENC_SCAN_TYPE] == INT32_MAX, STOF_ERR_INVALID_ARG,
                 "token_types[%d, %d] = %lld is outside [0, type_vocab_size = %d)", b,
                 (int)w[ENC_SCAN_TYPE], get64(w + ENC_SCAN_TYPE_VALUE), info->type_vocab);
    return STOF_OK;
}

stof_status enc_gpu_scan(stof_model *m, const enc_request *r, const stof_tensor *mask,
                         const stof_tensor *lengths, int32_t *lens, bool *packed, bool *computed)
{
    enc_gpu *g = m->gpu;
    int B = r->batch;
    *packed = false;
    *computed = false;
    STOF_REQUIRE(B <= 65535, STOF_ERR_UNSUPPORTED,
                 "batch %d: the GPU encoder takes at most 65535 sequences", B);
    if (B == 0) return STOF_OK;
    STOF_TRY(eng_ws_reserve(m, B, r->len));
    cudaStream_t s = (cudaStream_t)m->ctx->stream;
    enc_scan_args a;
    memset(&a, 0, sizeof a);
    a.batch = B;
    a.len = r->len;
    a.report = g->report;
    if (mask) {
        a.mask = mask->data;
        a.mask_dtype = mask->dtype;
    } else if (lengths) {
        a.lengths = (const int32_t *)lengths->data;
    } else { /* host lengths: up through the stage */
        int32_t *dev = g->report + (int64_t)g->cap_batch * ENC_SCAN_WORDS;
        STOF_TRY(stage_reserve(g, B));
        memcpy(g->stage, lens, (size_t)B * sizeof(int32_t));
        STOF_TRY(stage_upload(m, dev, B));
        a.lengths = dev;
    }
    if (r->ids->memory == STOF_MEM_DEVICE) {
        a.ids = r->ids->data;
        a.ids_dtype = r->ids->dtype;
    }
    if (r->types && r->types->memory == STOF_MEM_DEVICE) {
        a.types = r->types->data;
        a.types_dtype = r->types->dtype;
    }
    a.vocab = m->info.vocab;
    a.type_vocab = m->info.type_vocab;
    a.report_host = g->host_report_dev;
    /* With every token input on the device, the inputs are packed there from
     * the scan's lengths, queued ahead of the read back: the host waits for
     * the report alone. */
    bool pack =
        r->ids->memory == STOF_MEM_DEVICE && (!r->types || r->types->memory == STOF_MEM_DEVICE);
    enc_pack_args p;
    memset(&p, 0, sizeof p);
    if (pack) {
        dev_inputs v = input_views(g, B, r->len);
        p.batch = B;
        p.len = r->len;
        p.report = g->report;
        p.ids = a.ids;
        p.ids_dtype = a.ids_dtype;
        p.types = a.types;
        p.types_dtype = a.types_dtype;
        p.vocab = a.vocab;
        p.type_vocab = a.type_vocab;
        p.cu = v.cu;
        p.lens = v.lens;
        p.out_ids = v.ids;
        p.out_types = v.types;
        p.out_pos = v.pos;
    }
    bool one = pack && enc_scan_pack_fits(B, r->len);
    STOF_TRY(one ? enc_scan_pack(m->ctx, &a, &p) : enc_scan_inputs(m->ctx, &a));
    if (!a.report_host) {
        size_t bytes = (size_t)B * ENC_SCAN_WORDS * sizeof(int32_t);
        STOF_CUDA_TRY(cudaMemcpyAsync(g->host_report, g->report, bytes, cudaMemcpyDeviceToHost, s));
    }
    STOF_TRY(eng_event_once(&g->report_event));
    STOF_CUDA_TRY(cudaEventRecord((cudaEvent_t)g->report_event, s));
    if (pack && !one) STOF_TRY(enc_pack_inputs(m->ctx, &p));
    if (pack) STOF_TRY(eng_launch_ahead(m, r, computed));
    STOF_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)g->report_event));
    for (int b = 0; b < B; b++) {
        const int32_t *w = g->host_report + (int64_t)b * ENC_SCAN_WORDS;
        STOF_TRY(scan_problem(m, r, b, w));
        lens[b] = w[ENC_SCAN_LENGTH];
    }
    *packed = pack;
    return STOF_OK;
}
