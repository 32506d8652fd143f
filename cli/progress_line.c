/* tidectl's progress line (see progress_line.h). Invariant: `shown` is the display width of what
 * the terminal shows on the line now, so the next draw or clear blanks exactly that much. */
#include "progress_line.h"

#include <stdlib.h>

#include "table.h"

void tide_cli_progress_init(tide_cli_progress_t *pl, FILE *f)
{
    pl->f = f;
    pl->shown = 0;
}

void tide_cli_progress_draw(tide_cli_progress_t *pl, const char *text)
{
    char *line;
    size_t cut = 0, cols = 0, w;

    if (!pl->f)
        return;
    line = tide_cli_sanitize(text);
    /* Cut at a character boundary (a long job id, a long pending reason). */
    for (; line[cut] && cols <= TIDE_CLI_PROGRESS_MAX_COLS; cut++)
        if (((unsigned char)line[cut] & 0xC0) != 0x80 && ++cols > TIDE_CLI_PROGRESS_MAX_COLS)
            break;
    while (cut > 0 && line[cut - 1] == ' ')
        cut--;
    line[cut] = '\0';
    w = tide_cli_display_width(line);
    fprintf(pl->f, "\r%s%*s", line, pl->shown > w ? (int)(pl->shown - w) : 0, "");
    fflush(pl->f);
    pl->shown = w;
    free(line);
}

void tide_cli_progress_clear(tide_cli_progress_t *pl)
{
    if (!pl->f || !pl->shown)
        return;
    fprintf(pl->f, "\r%*s\r", (int)pl->shown, "");
    fflush(pl->f);
    pl->shown = 0;
}
