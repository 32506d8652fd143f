/* Line-oriented logging to stderr for the daemons: "TIME LEVEL PROGRAM: message". Not for the scheduler
 * core, which reports through events it emits. */
#ifndef TIDE_LOG_H
#define TIDE_LOG_H

typedef enum tide_log_level {
    TIDE_LOG_DEBUG = 0,
    TIDE_LOG_INFO = 1,
    TIDE_LOG_WARN = 2,
    TIDE_LOG_ERROR = 3,
} tide_log_level_t;

/* Sets the program name shown on each line (borrowed; must outlive logging) and the minimum level. */
void tide_log_init(const char *program, tide_log_level_t min_level);
/* Parses "debug", "info", "warn", "error"; returns -EINVAL for anything else. */
int tide_log_level_parse(const char *s, tide_log_level_t *out);
void tide_log(tide_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define tide_debug(...) tide_log(TIDE_LOG_DEBUG, __VA_ARGS__)
#define tide_info(...) tide_log(TIDE_LOG_INFO, __VA_ARGS__)
#define tide_warn(...) tide_log(TIDE_LOG_WARN, __VA_ARGS__)
#define tide_err(...) tide_log(TIDE_LOG_ERROR, __VA_ARGS__)

#endif
