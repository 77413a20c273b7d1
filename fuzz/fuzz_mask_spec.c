/*
 * fuzz_mask_spec.c — libFuzzer target for the mask spec text form: any input
 * either parses, or is refused with STOF_ERR_PARSE and a message that gives
 * a position; what parses formats to a canonical text that parses again and
 * formats identically. Anything else aborts (a finding).
 */
#include "stof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *format_spec(const stof_mask_spec *spec)
{
    size_t needed = 0;
    if (stof_mask_spec_format(spec, NULL, 0, &needed) != STOF_OK || needed == 0) abort();
    char *buf = malloc(needed);
    if (!buf) abort();
    size_t again = 0;
    if (stof_mask_spec_format(spec, buf, needed, &again) != STOF_OK || again != needed) abort();
    if (strlen(buf) + 1 != needed) abort();
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 14) return 0; /* long inputs add nothing but time */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    stof_mask_spec *spec = NULL;
    stof_status st = stof_mask_spec_parse(text, &spec);
    if (st != STOF_OK) {
        if (spec) abort();
        if (st == STOF_ERR_OOM) {
            free(text);
            return 0;
        }
        if (st != STOF_ERR_PARSE || !strstr(stof_last_error(), "position")) {
            fprintf(stderr, "unexpected refusal %s: %s\n", stof_status_str(st), stof_last_error());
            abort();
        }
        free(text);
        return 0;
    }
    char *canon = format_spec(spec);
    stof_mask_spec *again = NULL;
    if (stof_mask_spec_parse(canon, &again) != STOF_OK) {
        fprintf(stderr, "canonical \"%s\" does not parse: %s\n", canon, stof_last_error());
        abort();
    }
    char *canon2 = format_spec(again);
    if (strcmp(canon, canon2) != 0) {
        fprintf(stderr, "\"%s\" re-formats as \"%s\"\n", canon, canon2);
        abort();
    }
    free(canon2);
    free(canon);
    stof_mask_spec_destroy(again);
    stof_mask_spec_destroy(spec);
    free(text);
    return 0;
}
