/*
 * Bank transfers from several threads, checked after a reopen.
 *
 *   cc bank.c $(pkg-config --cflags --libs pmtx) -lpthread -o bank
 *   ./bank /dev/shm/bank.pool [THREADS [TRANSFERS [ENGINE]]]
 *
 * Creates a pool with ACCOUNTS accounts of 1000 each, runs TRANSFERS random
 * transfers per thread with pmtx_run (conflicts are retried by pmtx), checks
 * that the total is unchanged, closes, reopens the pool from the file alone
 * and checks the total and every balance again. Exits 0 if both checks
 * hold. Removes an existing pool file first.
 */
#include <pmtx.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ACCOUNTS 64
#define INITIAL 1000

static uint32_t accounts_table;

static void account_key(uint64_t id, uint8_t key[8]) {
    for (int i = 0; i < 8; i++) key[i] = (uint8_t)(id >> (56 - 8 * i)); /* big-endian: scans in id order */
}

static int read_balance(pmtx_txn *txn, uint64_t id, int64_t *balance) {
    uint8_t key[8];
    size_t len = 0;
    account_key(id, key);
    pmtx_status status = pmtx_txn_get(txn, accounts_table, key, 8, (uint8_t *)balance, sizeof *balance, &len);
    if (status == PMTX_OK && len != sizeof *balance) return PMTX_ERR_CORRUPT;
    return status;
}

static int write_balance(pmtx_txn *txn, uint64_t id, int64_t balance) {
    uint8_t key[8];
    account_key(id, key);
    return pmtx_txn_put(txn, accounts_table, key, 8, (const uint8_t *)&balance, sizeof balance);
}

struct transfer {
    uint64_t from, to;
    int64_t amount;
};

/* A pmtx_run body: returns 0 to commit, non-zero to roll back. */
static int transfer_body(pmtx_txn *txn, void *ctx) {
    const struct transfer *t = ctx;
    int64_t from, to;
    int status;
    if ((status = read_balance(txn, t->from, &from)) != PMTX_OK) return status;
    if ((status = read_balance(txn, t->to, &to)) != PMTX_OK) return status;
    if (from < t->amount) return PMTX_ROLLBACK; /* insufficient funds */
    if ((status = write_balance(txn, t->from, from - t->amount)) != PMTX_OK) return status;
    return write_balance(txn, t->to, to + t->amount);
}

struct totals {
    int64_t sum;
    int64_t count;
};

static int total_body(pmtx_txn *txn, void *ctx) {
    struct totals *totals = ctx;
    pmtx_iter *iter;
    int status = pmtx_txn_scan(txn, accounts_table, NULL, 0, NULL, 0, 0, &iter);
    if (status != PMTX_OK) return status;
    totals->sum = 0;
    totals->count = 0;
    const uint8_t *value;
    size_t value_len;
    while ((status = pmtx_iter_next(iter, NULL, NULL, &value, &value_len)) == PMTX_OK) {
        int64_t balance;
        if (value_len != sizeof balance) break;
        memcpy(&balance, value, sizeof balance);
        totals->sum += balance;
        totals->count++;
    }
    pmtx_iter_free(iter);
    return status == PMTX_END ? 0 : status;
}

struct worker {
    pmtx_db *db;
    unsigned seed;
    long transfers;
    long committed, rolled_back;
    int failed;
};

static void *run_worker(void *arg) {
    struct worker *w = arg;
    for (long i = 0; i < w->transfers; i++) {
        struct transfer t;
        t.from = (uint64_t)rand_r(&w->seed) % ACCOUNTS;
        do t.to = (uint64_t)rand_r(&w->seed) % ACCOUNTS; while (t.to == t.from);
        t.amount = 1 + rand_r(&w->seed) % 100;
        pmtx_status status = pmtx_run(w->db, transfer_body, &t);
        if (status == PMTX_OK) {
            w->committed++;
        } else if (status == PMTX_ROLLBACK) {
            w->rolled_back++;
        } else {
            fprintf(stderr, "transfer failed: %s: %s\n", pmtx_status_name(status), pmtx_errmsg());
            w->failed = 1;
            break;
        }
    }
    return NULL;
}

static int check_total(pmtx_db *db, const char *when) {
    struct totals totals;
    pmtx_status status = pmtx_run_read_only(db, total_body, &totals);
    if (status != PMTX_OK) {
        fprintf(stderr, "%s: total: %s: %s\n", when, pmtx_status_name(status), pmtx_errmsg());
        return 1;
    }
    printf("%s: %" PRId64 " accounts, total %" PRId64 "\n", when, totals.count, totals.sum);
    if (totals.count != ACCOUNTS || totals.sum != (int64_t)ACCOUNTS * INITIAL) {
        fprintf(stderr, "%s: expected %d accounts totalling %d\n", when, ACCOUNTS, ACCOUNTS * INITIAL);
        return 1;
    }
    return 0;
}

static int load(pmtx_txn *txn, void *ctx) {
    (void)ctx;
    for (uint64_t id = 0; id < ACCOUNTS; id++) {
        uint8_t key[8];
        int64_t balance = INITIAL;
        account_key(id, key);
        int status = pmtx_txn_insert(txn, accounts_table, key, 8, (const uint8_t *)&balance, sizeof balance);
        if (status != PMTX_OK) return status;
    }
    return 0;
}

#define CHECK(call)                                                                                      \
    do {                                                                                                 \
        pmtx_status status_ = (call);                                                                    \
        if (status_ != PMTX_OK) {                                                                        \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, pmtx_status_name(status_), \
                    pmtx_errmsg());                                                                      \
            return 1;                                                                                    \
        }                                                                                                \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s POOL [THREADS [TRANSFERS [ENGINE]]]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    long transfers = argc > 3 ? atol(argv[3]) : 10000;
    const char *engine = argc > 4 ? argv[4] : "zen";
    if (threads < 1 || threads > 64 || transfers < 0) {
        fprintf(stderr, "THREADS must be 1-64 and TRANSFERS non-negative\n");
        return 2;
    }
    unlink(path);

    pmtx_table_def table = {.name = "accounts", .kind = PMTX_ORDERED, .max_key_len = 8, .max_value_len = 8};
    pmtx_options options;
    pmtx_options_init(&options);
    options.engine = engine;
    options.tables = &table;
    options.table_count = 1;
    options.flags = PMTX_CREATE;
    options.workers = (uint32_t)threads;
    options.pool_size = 64u << 20;

    pmtx_db *db;
    CHECK(pmtx_open(path, &options, &db));
    CHECK(pmtx_table(db, "accounts", &accounts_table));
    CHECK(pmtx_run(db, load, NULL));

    pthread_t ids[64];
    struct worker workers[64];
    for (int i = 0; i < threads; i++) {
        workers[i] = (struct worker){.db = db, .seed = 17u + (unsigned)i, .transfers = transfers};
        if (pthread_create(&ids[i], NULL, run_worker, &workers[i]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    long committed = 0, rolled_back = 0;
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        committed += workers[i].committed;
        rolled_back += workers[i].rolled_back;
        failed |= workers[i].failed;
    }
    printf("%s, %d threads: %ld transfers committed, %ld rolled back (insufficient funds)\n", engine, threads,
           committed, rolled_back);
    if (failed || committed + rolled_back != threads * transfers) return 1;
    if (check_total(db, "before close")) return 1;
    CHECK(pmtx_close(&db));

    /* Reopen from the file alone: the pool stores its engine and tables. */
    CHECK(pmtx_open(path, NULL, &db));
    CHECK(pmtx_table(db, "accounts", &accounts_table));
    if (check_total(db, "after reopen")) return 1;
    CHECK(pmtx_close(&db));
    return 0;
}
