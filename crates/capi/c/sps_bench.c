/*
 * SPS (SP^3's micro benchmark: swap two random entries of a persistent
 * array) from C, through pmtx and through libpmemobj transactions, in one
 * run: same pool directory, same thread counts, same entries.
 *
 *   cc -O2 sps_bench.c $(pkg-config --cflags --libs pmtx) -lpthread -o sps_bench
 *   cc -O2 -DPMTX_HAVE_PMEMOBJ sps_bench.c $(pkg-config --cflags --libs pmtx) -lpmemobj -lpthread -o sps_bench
 *   ./sps_bench [--dir /dev/shm] [--threads 1,2] [--seconds 5] [--entries 100000]
 *               [--entry-size 128] [--engines zen,sp3] [--rounds 3]
 *
 * pmtx: a hash table of `entries` rows (key: the index, 8 bytes big-endian);
 * a swap is pmtx_run with two gets and two puts, on the `direct` backend
 * (real flushes and fences on the mapped pool file, no latency model).
 * libpmemobj: one array object; a swap locks the two entries (a mutex per
 * entry, in index order), snapshots both with pmemobj_tx_add_range and
 * swaps them in a TX_BEGIN/TX_END undo-log transaction. On a file that is
 * not real persistent memory libpmemobj would msync; the program runs
 * itself again with PMEM_IS_PMEM_FORCE=1 so that it flushes with cache-line
 * flushes and fences as pmtx does. Each entry holds its id in its first
 * word and a filler derived from the id; after each run both check that
 * the ids are a permutation and no entry is torn. Rounds alternate the
 * systems; the table gives each one's median and range of swaps/s.
 */
#define _GNU_SOURCE
#include <pmtx.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef PMTX_HAVE_PMEMOBJ
#include <libpmemobj.h>
#endif

#define MAX_THREADS 64
#define MAX_ROUNDS 15

static struct {
    const char *dir;
    int threads[8], thread_counts;
    double seconds;
    uint64_t entries;
    size_t entry_size;
    char engines[8][64];
    int engine_count;
    int rounds;
} config = {"/dev/shm", {1, 2}, 2, 5.0, 100000, 128, {"zen", "sp3"}, 2, 3};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t next_random(uint64_t *state) { /* xorshift64* */
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 2685821657736338717ull;
}

static void two_indices(uint64_t *state, uint64_t *a, uint64_t *b) {
    *a = next_random(state) % config.entries;
    do *b = next_random(state) % config.entries; while (*b == *a);
}

static void fill_entry(uint8_t *entry, uint64_t id) {
    memcpy(entry, &id, 8);
    for (size_t i = 8; i < config.entry_size; i++) entry[i] = (uint8_t)(id * 31 + i);
}

/* Checks one entry; records its id in `seen`. Returns 0 if it is whole and new. */
static int check_entry(const uint8_t *entry, size_t len, uint8_t *seen) {
    uint64_t id;
    if (len != config.entry_size) return -1;
    memcpy(&id, entry, 8);
    if (id >= config.entries || seen[id]) return -1;
    for (size_t i = 8; i < len; i++)
        if (entry[i] != (uint8_t)(id * 31 + i)) return -1;
    seen[id] = 1;
    return 0;
}

static void key_of(uint64_t index, uint8_t key[8]) {
    for (int i = 0; i < 8; i++) key[i] = (uint8_t)(index >> (56 - 8 * i));
}

/* A system under test: set up, run a thread's swaps until a deadline, check. */
struct system {
    char name[80];
    int (*setup)(struct system *);
    long (*run)(struct system *, int thread, double deadline);
    int (*check)(struct system *);
    void (*teardown)(struct system *);
    const char *engine;
    pmtx_db *db;
    uint32_t table;
#ifdef PMTX_HAVE_PMEMOBJ
    PMEMobjpool *pop;
    PMEMoid array;
    pthread_mutex_t *locks;
#endif
    char path[1024];
};

/* ---- pmtx ---- */

struct swap_ctx {
    uint32_t table;
    uint64_t a, b;
    uint8_t *first, *second;
};

static int swap_body(pmtx_txn *txn, void *raw) {
    struct swap_ctx *c = raw;
    uint8_t ka[8], kb[8];
    size_t la, lb;
    int status;
    key_of(c->a, ka);
    key_of(c->b, kb);
    if ((status = pmtx_txn_get(txn, c->table, ka, 8, c->first, config.entry_size, &la)) != PMTX_OK) return status;
    if ((status = pmtx_txn_get(txn, c->table, kb, 8, c->second, config.entry_size, &lb)) != PMTX_OK) return status;
    if ((status = pmtx_txn_put(txn, c->table, ka, 8, c->second, lb)) != PMTX_OK) return status;
    return pmtx_txn_put(txn, c->table, kb, 8, c->first, la);
}

struct load_ctx {
    uint32_t table;
    uint64_t first, last;
    uint8_t *entry;
};

static int load_body(pmtx_txn *txn, void *raw) {
    struct load_ctx *c = raw;
    for (uint64_t id = c->first; id < c->last; id++) {
        uint8_t key[8];
        key_of(id, key);
        fill_entry(c->entry, id);
        int status = pmtx_txn_put(txn, c->table, key, 8, c->entry, config.entry_size);
        if (status != PMTX_OK) return status;
    }
    return 0;
}

static int pmtx_failed(const char *what, pmtx_status status) {
    fprintf(stderr, "sps_bench: pmtx: %s: %s: %s\n", what, pmtx_status_name(status), pmtx_errmsg());
    return -1;
}

static int pmtx_setup(struct system *s) {
    snprintf(s->path, sizeof s->path, "%s/sps-pmtx.pool", config.dir);
    unlink(s->path);
    pmtx_table_def table = {.name = "sps_array", .kind = PMTX_HASHED, .max_key_len = 8,
                            .max_value_len = (uint32_t)config.entry_size};
    pmtx_options options;
    pmtx_options_init(&options);
    options.engine = s->engine;
    options.tables = &table;
    options.table_count = 1;
    options.flags = PMTX_CREATE;
    uint32_t most = 1;
    for (int t = 0; t < config.thread_counts; t++)
        if ((uint32_t)config.threads[t] > most) most = (uint32_t)config.threads[t];
    options.workers = most;
    options.pool_size = (uint64_t)config.entries * (config.entry_size + 256) * 4 + (256u << 20);
    pmtx_status status = pmtx_open(s->path, &options, &s->db);
    if (status != PMTX_OK) return pmtx_failed("open", status);
    if ((status = pmtx_table(s->db, "sps_array", &s->table)) != PMTX_OK) return pmtx_failed("table", status);
    uint8_t *entry = malloc(config.entry_size);
    for (uint64_t first = 0; first < config.entries; first += 1000) {
        struct load_ctx c = {s->table, first, first + 1000 < config.entries ? first + 1000 : config.entries, entry};
        if ((status = pmtx_run(s->db, load_body, &c)) != PMTX_OK) {
            free(entry);
            return pmtx_failed("load", status);
        }
    }
    free(entry);
    return 0;
}

static long pmtx_swaps(struct system *s, int thread, double deadline) {
    uint64_t state = 0x9E3779B97F4A7C15ull * (uint64_t)(thread + 1);
    struct swap_ctx c = {s->table, 0, 0, malloc(config.entry_size), malloc(config.entry_size)};
    long swaps = 0;
    while (now() < deadline) {
        for (int i = 0; i < 64; i++) {
            two_indices(&state, &c.a, &c.b);
            pmtx_status status = pmtx_run(s->db, swap_body, &c);
            if (status != PMTX_OK) {
                pmtx_failed("swap", status);
                swaps = -1;
                goto done;
            }
            swaps++;
        }
    }
done:
    free(c.first);
    free(c.second);
    return swaps;
}

struct check_ctx {
    uint32_t table;
    uint8_t *seen, *entry;
    int bad;
};

static int check_body(pmtx_txn *txn, void *raw) {
    struct check_ctx *c = raw;
    memset(c->seen, 0, config.entries);
    c->bad = 0;
    for (uint64_t id = 0; id < config.entries; id++) {
        uint8_t key[8];
        size_t len;
        key_of(id, key);
        int status = pmtx_txn_get(txn, c->table, key, 8, c->entry, config.entry_size, &len);
        if (status != PMTX_OK) return status;
        if (check_entry(c->entry, len, c->seen)) c->bad++;
    }
    return 0;
}

static int pmtx_check(struct system *s) {
    struct check_ctx c = {s->table, calloc(config.entries, 1), malloc(config.entry_size), 0};
    pmtx_status status = pmtx_run_read_only(s->db, check_body, &c);
    free(c.seen);
    free(c.entry);
    if (status != PMTX_OK) return pmtx_failed("check", status);
    return c.bad ? -1 : 0;
}

static void pmtx_teardown(struct system *s) {
    pmtx_status status = pmtx_close(&s->db);
    if (status != PMTX_OK) pmtx_failed("close", status);
    unlink(s->path);
}

/* ---- libpmemobj ---- */
#ifdef PMTX_HAVE_PMEMOBJ

struct root {
    PMEMoid array;
};

static int obj_setup(struct system *s) {
    snprintf(s->path, sizeof s->path, "%s/sps-pmemobj.pool", config.dir);
    unlink(s->path);
    size_t size = config.entries * config.entry_size * 2 + (64u << 20);
    s->pop = pmemobj_create(s->path, "pmtx-sps", size, 0600);
    if (!s->pop) {
        fprintf(stderr, "sps_bench: pmemobj_create %s: %s\n", s->path, pmemobj_errormsg());
        return -1;
    }
    PMEMoid root = pmemobj_root(s->pop, sizeof(struct root));
    struct root *r = pmemobj_direct(root);
    volatile int failed = 0; /* set after TX_BEGIN's setjmp */
    TX_BEGIN(s->pop) {
        pmemobj_tx_add_range(root, 0, sizeof *r);
        r->array = pmemobj_tx_alloc(config.entries * config.entry_size, 1);
        uint8_t *array = pmemobj_direct(r->array);
        /* Allocated in this transaction: no snapshot needed. */
        for (uint64_t id = 0; id < config.entries; id++) fill_entry(array + id * config.entry_size, id);
        pmemobj_persist(s->pop, array, config.entries * config.entry_size);
    }
    TX_ONABORT { failed = 1; }
    TX_END
    if (failed) {
        fprintf(stderr, "sps_bench: libpmemobj load: %s\n", pmemobj_errormsg());
        return -1;
    }
    s->array = r->array;
    s->locks = malloc(config.entries * sizeof *s->locks);
    for (uint64_t i = 0; i < config.entries; i++) pthread_mutex_init(&s->locks[i], NULL);
    return 0;
}

/* One swap in an undo-log transaction; 0 if it committed. */
static int obj_swap_pair(struct system *s, uint8_t *array, uint8_t *tmp, uint64_t low, uint64_t high) {
    volatile int failed = 0; /* set after TX_BEGIN's setjmp */
    TX_BEGIN(s->pop) {
        pmemobj_tx_add_range(s->array, low * config.entry_size, config.entry_size);
        pmemobj_tx_add_range(s->array, high * config.entry_size, config.entry_size);
        memcpy(tmp, array + low * config.entry_size, config.entry_size);
        memcpy(array + low * config.entry_size, array + high * config.entry_size, config.entry_size);
        memcpy(array + high * config.entry_size, tmp, config.entry_size);
    }
    TX_ONABORT { failed = 1; }
    TX_END
    return failed;
}

static long obj_swaps(struct system *s, int thread, double deadline) {
    uint64_t state = 0x9E3779B97F4A7C15ull * (uint64_t)(thread + 1);
    uint8_t *array = pmemobj_direct(s->array);
    uint8_t *tmp = malloc(config.entry_size);
    long swaps = 0;
    while (now() < deadline) {
        for (int i = 0; i < 64; i++) {
            uint64_t a, b;
            two_indices(&state, &a, &b);
            uint64_t low = a < b ? a : b, high = a < b ? b : a;
            pthread_mutex_lock(&s->locks[low]);
            pthread_mutex_lock(&s->locks[high]);
            int failed = obj_swap_pair(s, array, tmp, low, high);
            pthread_mutex_unlock(&s->locks[high]);
            pthread_mutex_unlock(&s->locks[low]);
            if (failed) {
                fprintf(stderr, "sps_bench: libpmemobj swap: %s\n", pmemobj_errormsg());
                free(tmp);
                return -1;
            }
            swaps++;
        }
    }
    free(tmp);
    return swaps;
}

static int obj_check(struct system *s) {
    uint8_t *array = pmemobj_direct(s->array), *seen = calloc(config.entries, 1);
    int bad = 0;
    for (uint64_t id = 0; id < config.entries; id++)
        if (check_entry(array + id * config.entry_size, config.entry_size, seen)) bad++;
    free(seen);
    return bad ? -1 : 0;
}

static void obj_teardown(struct system *s) {
    for (uint64_t i = 0; i < config.entries; i++) pthread_mutex_destroy(&s->locks[i]);
    free(s->locks);
    pmemobj_close(s->pop);
    unlink(s->path);
}
#endif

/* ---- the runs ---- */

struct thread_arg {
    struct system *system;
    int thread;
    double deadline;
    long swaps;
};

static void *thread_main(void *raw) {
    struct thread_arg *arg = raw;
    arg->swaps = arg->system->run(arg->system, arg->thread, arg->deadline);
    return NULL;
}

/* One run: set up, swap with `threads` threads for the configured time, check. */
static double run_once(struct system *s, int threads) {
    if (s->setup(s)) return -1;
    pthread_t ids[MAX_THREADS];
    struct thread_arg args[MAX_THREADS];
    double start = now(), deadline = start + config.seconds;
    for (int t = 0; t < threads; t++) {
        args[t] = (struct thread_arg){s, t, deadline, 0};
        pthread_create(&ids[t], NULL, thread_main, &args[t]);
    }
    long swaps = 0;
    int failed = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(ids[t], NULL);
        if (args[t].swaps < 0) failed = 1;
        swaps += args[t].swaps;
    }
    double elapsed = now() - start;
    if (!failed && s->check(s)) {
        fprintf(stderr, "sps_bench: %s: the array is not a permutation of whole entries after the run\n", s->name);
        failed = 1;
    }
    s->teardown(s);
    return failed ? -1 : (double)swaps / elapsed;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void) {
    fprintf(stderr, "usage: sps_bench [--dir DIR] [--threads 1,2] [--seconds S] [--entries N] [--entry-size B]\n"
                    "                 [--engines zen,sp3] [--rounds R]\n");
    exit(2);
}

static void parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!value) usage();
        if (strcmp(argv[i], "--dir") == 0) config.dir = value;
        else if (strcmp(argv[i], "--seconds") == 0) config.seconds = atof(value);
        else if (strcmp(argv[i], "--entries") == 0) config.entries = strtoull(value, NULL, 10);
        else if (strcmp(argv[i], "--entry-size") == 0) config.entry_size = strtoul(value, NULL, 10);
        else if (strcmp(argv[i], "--rounds") == 0) config.rounds = atoi(value);
        else if (strcmp(argv[i], "--threads") == 0) {
            char copy[256];
            snprintf(copy, sizeof copy, "%s", value);
            config.thread_counts = 0;
            for (char *part = strtok(copy, ","); part && config.thread_counts < 8; part = strtok(NULL, ","))
                config.threads[config.thread_counts++] = atoi(part);
        } else if (strcmp(argv[i], "--engines") == 0) {
            char copy[512];
            snprintf(copy, sizeof copy, "%s", value);
            config.engine_count = 0;
            for (char *part = strtok(copy, ","); part && config.engine_count < 8; part = strtok(NULL, ","))
                snprintf(config.engines[config.engine_count++], 64, "%s", part);
        } else usage();
        i++;
    }
    int bad = config.seconds <= 0 || config.entries < 2 || config.entry_size < 8 || config.entry_size > 65536 ||
              config.rounds < 1 || config.rounds > MAX_ROUNDS || config.thread_counts == 0;
    for (int i = 0; i < config.thread_counts; i++) bad |= config.threads[i] < 1 || config.threads[i] > MAX_THREADS;
    if (bad) {
        fprintf(stderr, "sps_bench: --seconds > 0, --entries >= 2, --entry-size 8-65536, --rounds 1-%d, "
                        "--threads 1-%d each\n", MAX_ROUNDS, MAX_THREADS);
        exit(2);
    }
}

int main(int argc, char **argv) {
#ifdef PMTX_HAVE_PMEMOBJ
    /* libpmem reads PMEM_IS_PMEM_FORCE when it loads: run again with it set. */
    const char *force = getenv("PMEM_IS_PMEM_FORCE");
    if (!force || strcmp(force, "1") != 0) {
        setenv("PMEM_IS_PMEM_FORCE", "1", 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "sps_bench: cannot run again with PMEM_IS_PMEM_FORCE=1: %s\n", strerror(errno));
        return 1;
    }
#endif
    parse_args(argc, argv);
    struct system systems[9];
    int count = 0;
    for (int e = 0; e < config.engine_count; e++) {
        systems[count] = (struct system){.setup = pmtx_setup, .run = pmtx_swaps, .check = pmtx_check,
                                         .teardown = pmtx_teardown, .engine = config.engines[e]};
        snprintf(systems[count].name, sizeof systems[count].name, "pmtx %s", config.engines[e]);
        count++;
    }
#ifdef PMTX_HAVE_PMEMOBJ
    systems[count] = (struct system){.setup = obj_setup, .run = obj_swaps, .check = obj_check,
                                     .teardown = obj_teardown};
    snprintf(systems[count].name, sizeof systems[count].name, "libpmemobj (undo log, a lock per entry)");
    count++;
#else
    fprintf(stderr, "sps_bench: built without libpmemobj (-DPMTX_HAVE_PMEMOBJ -lpmemobj): pmtx only\n");
#endif
    printf("SPS: %" PRIu64 " entries of %zu bytes, uniform random pairs, %.1f s per run, %d round(s), pools in %s\n",
           config.entries, config.entry_size, config.seconds, config.rounds, config.dir);
    printf("pmtx %s, direct backend (flushes and fences, no latency model)\n", pmtx_version());
    static double results[9][8][MAX_ROUNDS];
    for (int round = 0; round < config.rounds; round++)
        for (int t = 0; t < config.thread_counts; t++)
            for (int s = 0; s < count; s++) {
                double rate = run_once(&systems[s], config.threads[t]);
                if (rate < 0) return 1;
                results[s][t][round] = rate;
                fprintf(stderr, "round %d: %s, %d thread(s): %.0f swaps/s\n", round + 1, systems[s].name,
                        config.threads[t], rate);
            }
    printf("\n| system | threads | swaps/s (median) | min - max |\n|---|---|---|---|\n");
    for (int t = 0; t < config.thread_counts; t++)
        for (int s = 0; s < count; s++) {
            double sorted[MAX_ROUNDS];
            memcpy(sorted, results[s][t], sizeof(double) * config.rounds);
            qsort(sorted, config.rounds, sizeof(double), compare_doubles);
            int n = config.rounds;
            double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
            printf("| %s | %d | %.0f | %.0f - %.0f |\n", systems[s].name, config.threads[t], median, sorted[0],
                   sorted[n - 1]);
        }
    return 0;
}
