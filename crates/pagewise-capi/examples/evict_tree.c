/* evict_tree: drops files and trees from the page cache and prints what the kernel shows
 * before and after.
 *
 *   cc evict_tree.c -o evict_tree $(pkg-config --cflags --libs pagewise)
 *   ./evict_tree /var/lib/db /data/model.bin
 */
#include <pagewise.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH...\n", argv[0]);
        return 2;
    }
    const char *const *paths = (const char *const *)(argv + 1);
    size_t n = (size_t)(argc - 1);

    /* Zero means the default for every field: write dirty pages back first, all files. The
     * walk options (which files, how, which part of each) are one struct, `walk`, the same in
     * pagewise_stat_options and pagewise_load_options: here, leave access times alone. */
    pagewise_evict_options opts = {.size = sizeof opts, .walk = {.flags = PAGEWISE_NOATIME}};
    pagewise_evict_report rep = {.size = sizeof rep};
    int failed = pagewise_evict(paths, n, &opts, &rep);
    if (failed < 0) {
        fprintf(stderr, "evict_tree: %s\n", pagewise_last_error());
        return 1;
    }
    if (failed > 0)
        fprintf(stderr, "evict_tree: %d files failed, the first: %s\n", failed,
                pagewise_last_error());

    /* Measure again, independently of what evict reported. */
    pagewise_stat_report st = {.size = sizeof st};
    if (pagewise_stat(paths, n, NULL, &st) < 0) {
        fprintf(stderr, "evict_tree: %s\n", pagewise_last_error());
        return 1;
    }
    printf("pagewise %s\n", pagewise_version());
    printf("files=%llu cached_before=%llu cached_after=%llu dropped=%llu stayed=%llu\n",
           (unsigned long long)rep.files, (unsigned long long)rep.cached_bytes_before,
           (unsigned long long)rep.cached_bytes_after, (unsigned long long)rep.dropped_bytes,
           (unsigned long long)rep.stayed_bytes);
    printf("stat: cached_bytes=%llu of %llu\n", (unsigned long long)st.cached_bytes,
           (unsigned long long)st.bytes);
    return failed > 0 ? 2 : 0;
}
