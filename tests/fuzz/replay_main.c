/* Plain driver for the libFuzzer targets when they are built without libFuzzer (the default gcc
 * build): runs LLVMFuzzerTestOneInput once over every file of the corpus directories (or files)
 * given, so ctest replays the committed corpora. Fails when no input was found, so a missing corpus
 * cannot pass. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, n;

    if (!f) {
        perror(path);
        return -1;
    }
    do {
        if (cap - len < 65536) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc(buf, cap);
            if (!buf)
                abort();
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int i, runs = 0;

    for (i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            char **names = NULL;
            size_t n = 0, k;
            while (d && (e = readdir(d))) {
                if (e->d_name[0] == '.')
                    continue;
                names = realloc(names, (n + 1) * sizeof(*names));
                if (!names)
                    abort();
                names[n++] = strdup(e->d_name);
            }
            if (d)
                closedir(d);
            qsort(names, n, sizeof(*names), cmp);
            for (k = 0; k < n; k++) {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]);
                if (run_file(path) == 0)
                    runs++;
                free(names[k]);
            }
            free(names);
        } else if (run_file(argv[i]) == 0) {
            runs++;
        }
    }
    printf("replayed %d inputs\n", runs);
    return runs > 0 ? 0 : 1;
}
