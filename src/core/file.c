/*
 * file.c — opening the files stof reads (model folders, vocabularies, text
 * inputs) with errors that name the problem: no such file, is a folder, not a
 * regular file (a FIFO, socket or device where a file belongs), permission
 * denied. A plain fopen() opens a folder "successfully" and fails at the first
 * read, and blocks forever on a FIFO with no writer; here the path is opened
 * without blocking and checked with fstat before anything is read.
 */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool stof_file_exists(const char *path)
{
    struct stat sb;
    return path && stat(path, &sb) == 0;
}

static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode)) return "is a folder, not a file";
    if (S_ISFIFO(mode)) return "is a FIFO (named pipe), not a regular file";
    if (S_ISSOCK(mode)) return "is a socket, not a regular file";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "is a device, not a regular file";
    return "is not a regular file";
}

static stof_status open_error(const char *path, int err)
{
    if (err == ENOENT) return stof_error(STOF_ERR_IO, "%s: no such file", path);
    if (err == EACCES) return stof_error(STOF_ERR_IO, "%s: permission denied", path);
    if (err == EISDIR) return stof_error(STOF_ERR_IO, "%s: is a folder, not a file", path);
    return stof_error(STOF_ERR_IO, "%s: cannot open: %s", path, strerror(err));
}

stof_status stof_file_check_regular(const char *path)
{
    STOF_REQUIRE(path, STOF_ERR_INVALID_ARG, "file path is NULL");
    struct stat sb;
    if (stat(path, &sb) != 0) return open_error(path, errno);
    STOF_REQUIRE(S_ISREG(sb.st_mode), STOF_ERR_IO, "%s: %s", path, file_kind(sb.st_mode));
    return STOF_OK;
}

stof_status stof_file_open(const char *path, bool allow_stream, FILE **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_file_open: out is NULL");
    *out = NULL;
    STOF_REQUIRE(path, STOF_ERR_INVALID_ARG, "file path is NULL");
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before it is checked. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return open_error(path, errno);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return open_error(path, err);
    }
    bool stream = S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode);
    if (!S_ISREG(sb.st_mode) && !(allow_stream && stream)) {
        close(fd);
        return stof_error(STOF_ERR_IO, "%s: %s", path, file_kind(sb.st_mode));
    }
    /* Reads block as usual from here on (a FIFO waits for its data). */
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        return open_error(path, err);
    }
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        close(fd);
        return stof_error(STOF_ERR_OOM, "%s: out of memory opening it", path);
    }
    *out = fp;
    return STOF_OK;
}

stof_status stof_read_file(const char *path, size_t max_bytes, char **out, size_t *len)
{
    STOF_REQUIRE(out && len, STOF_ERR_INVALID_ARG, "stof_read_file: NULL argument");
    *out = NULL;
    *len = 0;
    FILE *fp;
    STOF_TRY(stof_file_open(path, false, &fp));
    char *buf = NULL;
    size_t used = 0, cap = 0;
    stof_status st = STOF_OK;
    for (;;) {
        if (used == cap) {
            if (cap > max_bytes) {
                st = stof_error(STOF_ERR_FORMAT, "%s: larger than the %zu-byte limit", path,
                                max_bytes);
                break;
            }
            size_t ncap = cap ? cap * 2 : 4096;
            char *grown = realloc(buf, ncap + 1);
            if (!grown) {
                st = stof_error(STOF_ERR_OOM, "%s: out of memory reading %zu bytes", path, ncap);
                break;
            }
            buf = grown;
            cap = ncap;
        }
        size_t r = fread(buf + used, 1, cap - used, fp);
        used += r;
        if (r == 0) {
            if (ferror(fp))
                st = stof_error(STOF_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            break;
        }
    }
    fclose(fp);
    if (st == STOF_OK && used > max_bytes)
        st = stof_error(STOF_ERR_FORMAT, "%s: larger than the %zu-byte limit", path, max_bytes);
    if (st != STOF_OK) {
        free(buf);
        return st;
    }
    buf[used] = '\0';
    *out = buf;
    *len = used;
    return STOF_OK;
}
