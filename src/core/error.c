/*
 * error.c — status names, the thread-local last-error message and logging.
 */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *stof_status_str(stof_status status)
{
    switch (status) {
    case STOF_OK: return "STOF_OK";
    case STOF_ERR_INVALID_ARG: return "STOF_ERR_INVALID_ARG";
    case STOF_ERR_SHAPE: return "STOF_ERR_SHAPE";
    case STOF_ERR_PARSE: return "STOF_ERR_PARSE";
    case STOF_ERR_UNSUPPORTED: return "STOF_ERR_UNSUPPORTED";
    case STOF_ERR_OOM: return "STOF_ERR_OOM";
    case STOF_ERR_CUDA: return "STOF_ERR_CUDA";
    case STOF_ERR_IO: return "STOF_ERR_IO";
    case STOF_ERR_FORMAT: return "STOF_ERR_FORMAT";
    case STOF_ERR_NO_DEVICE: return "STOF_ERR_NO_DEVICE";
    case STOF_ERR_INTERNAL: return "STOF_ERR_INTERNAL";
    }
    return "STOF_ERR_UNKNOWN";
}

const char *stof_last_error(void) { return last_error; }

void stof_clear_error(void) { last_error[0] = '\0'; }

stof_status stof_error(stof_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    stof_log(STOF_LOG_DEBUG, "%s: %s", stof_status_str(status), last_error);
    return status;
}

static int log_threshold(void)
{
    static int level = -1;
    if (level < 0) {
        const char *s = getenv("STOF_LOG");
        level = STOF_LOG_WARN;
        if (s && strcmp(s, "debug") == 0) level = STOF_LOG_DEBUG;
        if (s && strcmp(s, "info") == 0) level = STOF_LOG_INFO;
    }
    return level;
}

bool stof_log_on(int level)
{
    return level >= log_threshold();
}

void stof_log(int level, const char *fmt, ...)
{
    if (!stof_log_on(level)) return;
    static const char *names[] = {"debug", "info", "warn"};
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "stof %s: ", names[level < 0 ? 0 : level > 2 ? 2 : level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

const char *stof_version(void) { return STOF_VERSION_STRING; }
