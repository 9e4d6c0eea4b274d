/* arguments FILE DIR: calls the C API with sizes, alignments, offsets and counts no call can
 * honour, as a C program would, and prints one line per call: `name=-ERRNO message`. A call
 * that aborts kills this program, which tests/examples.rs reports. Ends with "alive".
 * FILE is an existing file of 10 bytes; DIR a directory copies may be attempted into. */
#include <pagewise.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void line(const char *name, long long r)
{
    const char *m = pagewise_last_error();
    printf("%s=%lld %s\n", name, r, r < 0 && m ? m : "");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s FILE DIR\n", argv[0]);
        return 2;
    }
    const char *paths[1] = {argv[1]};

    /* The allocator: NULL and errno. */
    size_t align = 4096;
    void *p = pagewise_aligned_alloc((size_t)1 << 62, &align);
    line("alloc_huge", p ? 0 : -errno);
    align = 4096;
    p = pagewise_aligned_alloc(SIZE_MAX, &align);
    line("alloc_max", p ? 0 : -errno);
    align = (size_t)1 << 40;
    p = pagewise_aligned_alloc(16, &align);
    line("alloc_align", p ? 0 : -errno);
    align = SIZE_MAX;
    p = pagewise_aligned_alloc(16, &align);
    line("alloc_align_max", p ? 0 : -errno);

    /* A file: offsets past the largest file offset, a huge truncate. */
    pagewise_file *f = pagewise_open(argv[1], PAGEWISE_READ | PAGEWISE_WRITE, PAGEWISE_DIRECT);
    if (!f) {
        fprintf(stderr, "open: %s\n", pagewise_last_error());
        return 1;
    }
    char buf[16];
    line("pread_max", pagewise_pread(f, buf, sizeof buf, UINT64_MAX));
    line("pread_i64", pagewise_pread(f, buf, sizeof buf, INT64_MAX));
    line("pwrite_max", pagewise_pwrite(f, buf, sizeof buf, UINT64_MAX));
    line("pwrite_i64", pagewise_pwrite(f, buf, sizeof buf, (uint64_t)INT64_MAX - 5));
    line("truncate_max", pagewise_file_truncate(f, UINT64_MAX));
    line("policy_after", pagewise_file_policy(f));
    line("close", pagewise_close(f));

    /* The verbs: counts and sizes beyond the most allowed. */
    pagewise_load_options lo;
    memset(&lo, 0, sizeof lo);
    lo.size = sizeof lo;
    lo.depth = UINT32_MAX;
    line("load_depth", pagewise_load(paths, 1, &lo, NULL, NULL));
    lo.depth = 0;
    lo.walk.threads = UINT32_MAX;
    line("load_threads", pagewise_load(paths, 1, &lo, NULL, NULL));
    pagewise_stat_options so;
    memset(&so, 0, sizeof so);
    so.size = sizeof so;
    so.walk.threads = 1u << 30;
    line("stat_threads", pagewise_stat(paths, 1, &so, NULL));
    pagewise_copy_options co;
    memset(&co, 0, sizeof co);
    co.size = sizeof co;
    co.chunk = (uint64_t)1 << 40;
    line("copy_chunk", pagewise_copy(paths, 1, argv[2], &co, NULL));
    co.chunk = 0;
    co.depth = UINT32_MAX;
    line("copy_depth", pagewise_copy(paths, 1, argv[2], &co, NULL));
    co.depth = 0;
    co.threads = UINT32_MAX;
    line("copy_threads", pagewise_copy(paths, 1, argv[2], &co, NULL));
    printf("alive\n");
    return 0;
}
