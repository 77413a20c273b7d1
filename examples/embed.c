/*
 * embed.c — sentence embeddings from C through the public API alone: load a
 * model folder, tokenize a list of texts into one padded batch, run one
 * forward for the pooled embeddings, and compare the texts by cosine
 * similarity. Runs on the GPU when there is one, else on the CPU.
 *
 *   embed MODEL_DIR [TEXT ...]
 */
#include <stof.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what, stof_status st)
{
    fprintf(stderr, "embed: %s: %s: %s\n", what, stof_status_str(st), stof_last_error());
    return 1;
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / (sqrt(aa * bb) + 1e-30);
}

int main(int argc, char **argv)
{
    static const char *const default_texts[] = {"A man is eating food.",
                                                "A man is eating a piece of bread.",
                                                "The girl is carrying a baby."};
    if (argc < 2) {
        fprintf(stderr, "usage: embed MODEL_DIR [TEXT ...]\n");
        return 2;
    }
    const char *const *texts = argc > 2 ? (const char *const *)argv + 2 : default_texts;
    int batch = argc > 2 ? argc - 2 : 3;

    stof_ctx *ctx = NULL;
    stof_model *model = NULL;
    stof_tokenizer *tok = NULL;
    int32_t *ids = NULL, *lengths = NULL;
    float *emb = NULL;
    int rc = 1;
    stof_status st;
    if ((st = stof_ctx_create(NULL, &ctx))) return fail("creating a context", st);
    stof_model_params mp = stof_model_default_params();
    if (stof_ctx_device(ctx) == STOF_DEVICE_CPU) mp.dtype = STOF_F32;
    if ((st = stof_model_load(ctx, argv[1], &mp, &model))) {
        rc = fail("loading the model", st);
        goto done;
    }
    if ((st = stof_tokenizer_open(argv[1], &tok))) {
        rc = fail("loading the tokenizer", st);
        goto done;
    }
    stof_model_info info;
    stof_model_get_info(model, &info);
    int max_len = stof_tokenizer_max_length(tok, info.max_positions);
    size_t cap = (size_t)batch * (size_t)max_len;
    ids = malloc(cap * sizeof *ids);
    lengths = malloc((size_t)batch * sizeof *lengths);
    emb = malloc((size_t)batch * (size_t)info.hidden * sizeof *emb);
    if (!ids || !lengths || !emb) {
        fprintf(stderr, "embed: out of memory\n");
        goto done;
    }
    int seq = 0;
    if ((st = stof_tokenize_batch(tok, texts, NULL, batch, max_len, ids, cap, lengths, &seq))) {
        rc = fail("tokenizing", st);
        goto done;
    }
    /* Inputs in host memory work on either device; the embeddings come back to the host. */
    int64_t ids_shape[2] = {batch, seq}, len_shape[1] = {batch},
            emb_shape[2] = {batch, info.hidden};
    stof_tensor t_ids = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, ids_shape);
    stof_tensor t_len = stof_tensor_make(lengths, STOF_I32, STOF_MEM_HOST, 1, len_shape);
    stof_tensor t_emb = stof_tensor_make(emb, STOF_F32, STOF_MEM_HOST, 2, emb_shape);
    if ((st = stof_model_forward(model, NULL, &t_ids, &t_len, NULL, NULL, &t_emb)) ||
        (st = stof_ctx_synchronize(ctx))) {
        rc = fail("running the model", st);
        goto done;
    }
    printf("%d texts -> %d-dim embeddings on %s\n", batch, info.hidden, stof_ctx_device_name(ctx));
    for (int i = 0; i < batch; i++) {
        const float *e = emb + (size_t)i * info.hidden;
        printf("[%d] %d tokens  [%+.4f %+.4f %+.4f ...]  %s\n", i, lengths[i], e[0], e[1], e[2],
               texts[i]);
    }
    for (int i = 0; i < batch; i++)
        for (int j = i + 1; j < batch; j++)
            printf(
                "cosine(%d, %d) = %.4f\n", i, j,
                cosine(emb + (size_t)i * info.hidden, emb + (size_t)j * info.hidden, info.hidden));
    rc = 0;
done:
    free(ids);
    free(lengths);
    free(emb);
    stof_tokenizer_destroy(tok);
    stof_model_destroy(model);
    stof_ctx_destroy(ctx);
    return rc;
}
