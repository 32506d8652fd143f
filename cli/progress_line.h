/* The progress line of tidectl's waits (checkpoint --wait, scale --wait): one line on a terminal,
 * redrawn in place with a carriage return and blanks (no escape sequences, so a dumb terminal shows
 * it right too), and erased before anything else is printed. Not a terminal: nothing is drawn. */
#ifndef TIDE_CLI_PROGRESS_LINE_H
#define TIDE_CLI_PROGRESS_LINE_H

#include <stddef.h>
#include <stdio.h>

/* Wider than this could wrap on an 80-column terminal, and a wrapped line cannot be redrawn. */
#define TIDE_CLI_PROGRESS_MAX_COLS 79

typedef struct tide_cli_progress {
    FILE *f;      /* borrowed; NULL: not a terminal, draw nothing */
    size_t shown; /* width of what is on the line now */
} tide_cli_progress_t;

/* A line on f (borrowed; NULL: draws nothing), empty. */
void tide_cli_progress_init(tide_cli_progress_t *pl, FILE *f);

/* Whether drawing shows anything (so callers can skip building the text). */
static inline int tide_cli_progress_active(const tide_cli_progress_t *pl)
{
    return pl->f != NULL;
}

/* Replaces the line with text (borrowed): sanitized (tide_cli_sanitize), cut to
 * TIDE_CLI_PROGRESS_MAX_COLS columns at a character boundary, trailing blanks dropped; blanks pad
 * over what a longer previous text left. */
void tide_cli_progress_draw(tide_cli_progress_t *pl, const char *text);

/* Erases the line and returns the cursor to its start; nothing when the line is empty. */
void tide_cli_progress_clear(tide_cli_progress_t *pl);

#endif
