/*
 * test_core_file.c — src/core/file.c: what stands where a file belongs is
 * named (no such file, a folder, a FIFO), a FIFO is checked without waiting
 * for a writer, streams are accepted only when asked for, stof_read_file
 * reads whole files and enforces its size limit; and stof_check_finite.
 */
#include "core/core.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool last_error_has(const char *needle)
{
    return strstr(stof_last_error(), needle) != NULL;
}

int main(void)
{
    char dir[] = "/tmp/stof_test_file_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char file[256], fifo[256], missing[256], sub[256];
    snprintf(file, sizeof file, "%s/text.txt", dir);
    snprintf(fifo, sizeof fifo, "%s/pipe", dir);
    snprintf(missing, sizeof missing, "%s/missing.txt", dir);
    snprintf(sub, sizeof sub, "%s/folder", dir);
    FILE *w = fopen(file, "wb");
    CHECK(w && fputs("hello\nworld\n", w) >= 0 && fclose(w) == 0, "writing %s", file);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    CHECK(mkdir(sub, 0700) == 0, "mkdir");

    CHECK(stof_file_exists(file) && stof_file_exists(sub) && stof_file_exists(fifo) &&
              !stof_file_exists(missing) && !stof_file_exists(NULL),
          "stof_file_exists");
    CHECK(stof_file_check_regular(file) == STOF_OK, "a regular file");
    CHECK(stof_file_check_regular(missing) == STOF_ERR_IO &&
              last_error_has("missing.txt: no such file"),
          "missing: %s", stof_last_error());
    CHECK(stof_file_check_regular(sub) == STOF_ERR_IO && last_error_has("is a folder, not a file"),
          "folder: %s", stof_last_error());
    CHECK(stof_file_check_regular(fifo) == STOF_ERR_IO && last_error_has("is a FIFO"), "fifo: %s",
          stof_last_error());

    /* A FIFO with no writer: refused at once as a file, opened at once as a stream. */
    FILE *f = NULL;
    CHECK(stof_file_open(fifo, false, &f) == STOF_ERR_IO && !f && last_error_has("is a FIFO"),
          "fifo as a file: %s", stof_last_error());
    CHECK(stof_file_open(fifo, true, &f) == STOF_OK && f, "fifo as a stream: %s",
          stof_last_error());
    if (f) fclose(f);
    CHECK(stof_file_open(sub, true, &f) == STOF_ERR_IO && last_error_has("is a folder"),
          "folder as a stream: %s", stof_last_error());

    char *text = NULL;
    size_t len = 0;
    CHECK(stof_read_file(file, 100, &text, &len) == STOF_OK && len == 12 && text &&
              strcmp(text, "hello\nworld\n") == 0,
          "read_file: %s", stof_last_error());
    free(text);
    text = NULL;
    CHECK(stof_read_file(file, 5, &text, &len) == STOF_ERR_FORMAT && !text &&
              last_error_has("larger than the 5-byte limit"),
          "size limit: %s", stof_last_error());
    CHECK(stof_read_file(sub, 100, &text, &len) == STOF_ERR_IO && last_error_has("is a folder"),
          "read a folder: %s", stof_last_error());

    float x[5] = {0.0f, -1.0f, 3.5f, 2.0f, 1.0f};
    CHECK(stof_check_finite(x, 5, "m.safetensors", "w") == STOF_OK, "finite");
    x[3] = NAN;
    CHECK(stof_check_finite(x, 5, "m.safetensors", "w") == STOF_ERR_FORMAT &&
              last_error_has("m.safetensors: tensor 'w' holds NaN at element 3"),
          "NaN: %s", stof_last_error());
    x[3] = -INFINITY;
    CHECK(stof_check_finite(x, 5, "m.safetensors", "w") == STOF_ERR_FORMAT &&
              last_error_has("holds an infinity at element 3"),
          "Inf: %s", stof_last_error());

    unlink(file);
    unlink(fifo);
    rmdir(sub);
    rmdir(dir);
    return test_finish("test_core_file");
}
