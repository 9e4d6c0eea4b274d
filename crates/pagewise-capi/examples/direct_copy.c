/* direct_copy SRC DST: copies a file through two O_DIRECT handles. Neither file ends up in
 * the page cache; DST has exactly SRC's bytes and length (the unaligned tail included).
 *
 *   cc direct_copy.c -o direct_copy $(pkg-config --cflags --libs pagewise)
 *   ./direct_copy big.img /backup/big.img
 */
#include <pagewise.h>
#include <stdint.h>
#include <stdio.h>

#define CHUNK (8u << 20)

static const char *policy_name(int p)
{
    return p == PAGEWISE_DIRECT      ? "direct"
           : p == PAGEWISE_DONTCACHE ? "dontcache"
           : p == PAGEWISE_DROP_BEHIND ? "drop-behind"
                                       : "?";
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SRC DST\n", argv[0]);
        return 2;
    }
    int status = 1;
    void *buf = NULL;
    pagewise_file *out = NULL;
    pagewise_file *in = pagewise_open(argv[1], PAGEWISE_READ, PAGEWISE_DIRECT);
    if (!in)
        goto fail;
    out = pagewise_open(argv[2], PAGEWISE_WRITE | PAGEWISE_CREATE | PAGEWISE_TRUNC,
                        PAGEWISE_DIRECT);
    if (!out)
        goto fail;

    /* Aligned to what the source wants: its reads then go straight to the disk. */
    size_t align = 0;
    if (pagewise_file_alignment(in, &align, NULL) < 0)
        goto fail;
    buf = pagewise_aligned_alloc(CHUNK, &align);
    if (!buf)
        goto fail;

    uint64_t off = 0;
    for (;;) {
        ssize_t n = pagewise_pread(in, buf, CHUNK, off);
        if (n < 0)
            goto fail;
        if (n == 0)
            break;
        if (pagewise_pwrite(out, buf, (size_t)n, off) < 0)
            goto fail;
        off += (uint64_t)n;
    }
    printf("copied %llu bytes: read %s, written %s\n", (unsigned long long)off,
           policy_name(pagewise_file_policy(in)), policy_name(pagewise_file_policy(out)));
    const char *notice = pagewise_file_notice(out);
    if (notice)
        printf("notice: %s\n", notice);
    /* close writes the staged tail: check it like a write. */
    int r = pagewise_close(out);
    out = NULL;
    if (r < 0)
        goto fail;
    status = 0;
    goto done;

fail:
    fprintf(stderr, "direct_copy: %s\n", pagewise_last_error());
done:
    pagewise_close(out);
    pagewise_close(in);
    pagewise_aligned_free(buf);
    return status;
}
