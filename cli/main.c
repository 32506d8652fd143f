/* tidectl's process entry: wires stdout/stderr, the environment and the clock into a tide_cli_t and
 * hands over to tide_cli_main (dispatch.c). Nothing else lives here, so the tests run the whole
 * program minus this file. */
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"
#include "clock.h"
#include "token.h"
#include "xmalloc.h"

int main(int argc, char **argv)
{
    tide_cli_t cli = {0};
    char *cwd = getcwd(NULL, 0);
    char *data_dir = tide_default_data_dir();
    char *token_path = tide_xasprintf("%s/token", data_dir); /* the local scheduler's default token */
    int rc;

    cli.out = stdout;
    cli.err = stderr;
    cli.env_scheduler = getenv("TIDE_SCHEDULER");
    cli.env_token = getenv("TIDE_TOKEN");
    cli.env_token_file = getenv("TIDE_TOKEN_FILE");
    cli.env_tls_ca = getenv("TIDE_TLS_CA");
    cli.env_tls_cert = getenv("TIDE_TLS_CERT");
    cli.env_tls_key = getenv("TIDE_TLS_KEY");
    cli.env_insecure = getenv("TIDE_INSECURE");
    cli.default_token_path = token_path;
    cli.cwd = cwd;
    cli.now_ms = tide_clock_wall_ms;
    cli.err_tty = isatty(STDERR_FILENO) == 1;
    rc = tide_cli_main(&cli, argc, argv);
    tide_cli_cleanup(&cli);
    free(cwd);
    free(token_path);
    free(data_dir);
    if (fflush(stdout) != 0 && rc == 0)
        rc = 1; /* a full disk or closed pipe must not look like success */
    return rc;
}
