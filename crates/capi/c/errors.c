/*
 * The C interface's error paths, each checked for its status code and a
 * message: a missing pool, a foreign file, a schema mismatch, oversized
 * keys and values, misuse (wrong thread, after close, calls a body must not
 * make), and a conflict retried by hand.
 *
 *   cc errors.c $(pkg-config --cflags --libs pmtx) -lpthread -o errors
 *   ./errors DIR        (a scratch directory; exits 0 if every check holds)
 */
#include <pmtx.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
static int checks;

/* Checks that `call` returned `expected`, and that an error left a message. */
#define EXPECT(call, expected)                                                                                 \
    do {                                                                                                       \
        pmtx_status got_ = (call);                                                                             \
        checks++;                                                                                              \
        if (got_ != (expected)) {                                                                              \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, #call,            \
                    pmtx_status_name(got_), pmtx_status_name(expected), got_ < 0 ? pmtx_errmsg() : "");       \
            failures++;                                                                                        \
        } else if (got_ < 0 && pmtx_errmsg()[0] == '\0') {                                                     \
            fprintf(stderr, "%s:%d: %s failed with an empty message\n", __FILE__, __LINE__, #call);           \
            failures++;                                                                                        \
        }                                                                                                      \
    } while (0)

#define TRUE(condition)                                                                  \
    do {                                                                                 \
        checks++;                                                                        \
        if (!(condition)) {                                                              \
            fprintf(stderr, "%s:%d: %s is false\n", __FILE__, __LINE__, #condition);     \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

static char dir[900];

static const char *pool_path(const char *name) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

#define K(text) (const uint8_t *)(text), strlen(text)

static pmtx_table_def tables[] = {
    {.name = "t", .kind = PMTX_ORDERED, .max_key_len = 8, .max_value_len = 16},
    {.name = "h", .kind = PMTX_HASHED, .max_key_len = 8, .max_value_len = 16},
};

static pmtx_status create(const char *path, const char *engine, pmtx_db **db) {
    pmtx_options options;
    pmtx_options_init(&options);
    options.engine = engine;
    options.tables = tables;
    options.table_count = 2;
    options.flags = PMTX_CREATE;
    options.workers = 4;
    options.pool_size = 32u << 20;
    return pmtx_open(path, &options, db);
}

static void opening(void) {
    pmtx_db *db = (pmtx_db *)1;
    pmtx_options options;

    /* A pool that does not exist, reopened or declared without PMTX_CREATE. */
    EXPECT(pmtx_open(pool_path("missing.pool"), NULL, &db), PMTX_ERR_POOL_NOT_FOUND);
    TRUE(db == NULL);
    TRUE(strstr(pmtx_errmsg(), "missing.pool") != NULL);
    pmtx_options_init(&options);
    options.tables = tables;
    options.table_count = 1;
    EXPECT(pmtx_open(pool_path("missing.pool"), &options, &db), PMTX_ERR_POOL_NOT_FOUND);

    /* Bad options. */
    EXPECT(pmtx_open(NULL, NULL, &db), PMTX_ERR_ARGUMENT);
    EXPECT(pmtx_open(pool_path("x.pool"), NULL, NULL), PMTX_ERR_ARGUMENT);
    options.engine = "no-such-engine";
    options.flags = PMTX_CREATE;
    EXPECT(pmtx_open(pool_path("x.pool"), &options, &db), PMTX_ERR_ARGUMENT);
    TRUE(strstr(pmtx_errmsg(), "no-such-engine") != NULL);
    options.engine = "zen";
    options.flags = 1u << 20;
    EXPECT(pmtx_open(pool_path("x.pool"), &options, &db), PMTX_ERR_ARGUMENT);
    options.flags = PMTX_CREATE;
    options.pm = "quantum";
    EXPECT(pmtx_open(pool_path("x.pool"), &options, &db), PMTX_ERR_ARGUMENT);
    options.pm = NULL;
    pmtx_table_def bad = {.name = "bad", .kind = 7};
    options.tables = &bad;
    EXPECT(pmtx_open(pool_path("x.pool"), &options, &db), PMTX_ERR_ARGUMENT);
    options.tables = NULL;
    options.table_count = 3;
    EXPECT(pmtx_open(pool_path("x.pool"), &options, &db), PMTX_ERR_ARGUMENT);

    /* A file that is not a pool. */
    FILE *foreign = fopen(pool_path("foreign.pool"), "w");
    for (int i = 0; i < 1 << 20; i++) fputc('x', foreign);
    fclose(foreign);
    EXPECT(pmtx_open(pool_path("foreign.pool"), NULL, &db), PMTX_ERR_FORMAT);

    /* A pool of other tables or another engine. */
    EXPECT(create(pool_path("schema.pool"), "zen", &db), PMTX_OK);
    pmtx_db *second;
    EXPECT(pmtx_open(pool_path("schema.pool"), NULL, &second), PMTX_ERR_LOCKED);
    EXPECT(pmtx_close(&db), PMTX_OK);
    pmtx_table_def other = {.name = "other", .kind = PMTX_ORDERED};
    pmtx_options_init(&options);
    options.tables = &other;
    options.table_count = 1;
    EXPECT(pmtx_open(pool_path("schema.pool"), &options, &db), PMTX_ERR_SCHEMA_MISMATCH);
    pmtx_options_init(&options);
    options.engine = "silo";
    EXPECT(pmtx_open(pool_path("schema.pool"), &options, &db), PMTX_ERR_SCHEMA_MISMATCH);
    EXPECT(pmtx_open(pool_path("schema.pool"), NULL, &db), PMTX_OK);
    EXPECT(pmtx_close(&db), PMTX_OK);
    TRUE(db == NULL);
    EXPECT(pmtx_close(&db), PMTX_OK); /* a closed handle is NULL: closing it again does nothing */
    EXPECT(pmtx_close(NULL), PMTX_ERR_ARGUMENT);
}

struct other_thread {
    pmtx_txn *txn;
    pmtx_iter *iter;
    pmtx_status get, put, commit, next, free_txn;
};

static void *use_from_other_thread(void *arg) {
    struct other_thread *t = arg;
    uint8_t buf[16];
    size_t len;
    t->get = pmtx_txn_get(t->txn, 0, K("a"), buf, sizeof buf, &len);
    t->put = pmtx_txn_put(t->txn, 0, K("a"), K("x"));
    t->commit = pmtx_txn_commit(t->txn);
    t->next = pmtx_iter_next(t->iter, NULL, NULL, NULL, NULL);
    t->free_txn = pmtx_txn_free(t->txn);
    return NULL;
}

static int body_commits_itself(pmtx_txn *txn, void *ctx) {
    pmtx_status *seen = ctx;
    seen[0] = pmtx_txn_commit(txn);
    seen[1] = pmtx_txn_free(txn);
    seen[2] = pmtx_txn_abort(txn);
    return 0;
}

static int body_writes_then_rolls_back(pmtx_txn *txn, void *ctx) {
    (void)ctx;
    pmtx_status status = pmtx_txn_put(txn, 0, K("rb"), K("never"));
    return status == PMTX_OK ? PMTX_ROLLBACK : status;
}

static int body_value_too_large(pmtx_txn *txn, void *ctx) {
    (void)ctx;
    return pmtx_txn_put(txn, 0, K("big"), K("seventeen bytes!!"));
}

static void transactions(void) {
    pmtx_db *db;
    EXPECT(create(pool_path("txn.pool"), NULL, &db), PMTX_OK);
    uint32_t table = 99, hash = 99;
    EXPECT(pmtx_table(db, "t", &table), PMTX_OK);
    EXPECT(pmtx_table(db, "h", &hash), PMTX_OK);
    TRUE(table == 0 && hash == 1);
    EXPECT(pmtx_table(db, "nope", &table), PMTX_ERR_UNKNOWN_TABLE);
    TRUE(strstr(pmtx_errmsg(), "nope") != NULL);

    pmtx_txn *txn;
    uint8_t buf[16];
    size_t len = 0;
    pmtx_txn *bad = (pmtx_txn *)1;
    EXPECT(pmtx_txn_begin(db, 0x80, &bad), PMTX_ERR_ARGUMENT);
    TRUE(bad == NULL);
    EXPECT(pmtx_txn_begin(db, 0, &txn), PMTX_OK);
    EXPECT(pmtx_txn_put(txn, 0, K("a"), K("hello, world")), PMTX_OK);
    EXPECT(pmtx_txn_insert(txn, 0, K("a"), K("again")), PMTX_EXISTS);
    EXPECT(pmtx_txn_update(txn, 0, K("zz"), K("absent")), PMTX_NOT_FOUND);
    EXPECT(pmtx_txn_delete(txn, 0, K("zz")), PMTX_NOT_FOUND);
    EXPECT(pmtx_txn_put(txn, 42, K("a"), K("b")), PMTX_ERR_UNKNOWN_TABLE);
    EXPECT(pmtx_txn_put(txn, 0, NULL, 3, K("b")), PMTX_ERR_ARGUMENT);
    /* A short buffer: the length is reported and the transaction goes on. */
    EXPECT(pmtx_txn_get(txn, 0, K("a"), buf, 2, &len), PMTX_ERR_BUFFER_TOO_SMALL);
    TRUE(len == 12);
    EXPECT(pmtx_txn_get(txn, 0, K("a"), NULL, 0, &len), PMTX_ERR_BUFFER_TOO_SMALL);
    EXPECT(pmtx_txn_get(txn, 0, K("a"), buf, sizeof buf, &len), PMTX_OK);
    TRUE(len == 12 && memcmp(buf, "hello, world", 12) == 0);
    EXPECT(pmtx_txn_get(txn, 0, K("b"), buf, sizeof buf, &len), PMTX_NOT_FOUND);
    pmtx_iter *iter;
    EXPECT(pmtx_txn_scan(txn, hash, NULL, 0, NULL, 0, 0, &iter), PMTX_ERR_MISUSE);
    TRUE(iter == NULL);
    /* Close refuses while a transaction runs. */
    EXPECT(pmtx_close(&db), PMTX_ERR_BUSY);
    EXPECT(pmtx_txn_retry(txn), PMTX_ERR_ARGUMENT);
    EXPECT(pmtx_txn_commit(txn), PMTX_OK);
    EXPECT(pmtx_txn_commit(txn), PMTX_ERR_ENDED);
    EXPECT(pmtx_txn_put(txn, 0, K("a"), K("late")), PMTX_ERR_ENDED);
    EXPECT(pmtx_txn_abort(txn), PMTX_OK);
    EXPECT(pmtx_txn_free(txn), PMTX_OK);

    /* Oversized keys and values end the transaction. */
    EXPECT(pmtx_txn_begin(db, 0, &txn), PMTX_OK);
    EXPECT(pmtx_txn_put(txn, 0, K("a"), K("seventeen bytes!!")), PMTX_ERR_VALUE_TOO_LARGE);
    TRUE(strstr(pmtx_errmsg(), "17 bytes") != NULL);
    EXPECT(pmtx_txn_put(txn, 0, K("a"), K("ok")), PMTX_ERR_ENDED);
    EXPECT(pmtx_txn_free(txn), PMTX_OK);
    EXPECT(pmtx_txn_begin(db, 0, &txn), PMTX_OK);
    EXPECT(pmtx_txn_put(txn, 0, K("nine byte"), K("v")), PMTX_ERR_KEY_TOO_LONG);
    EXPECT(pmtx_txn_free(txn), PMTX_OK);
    EXPECT(pmtx_run(db, body_value_too_large, NULL), PMTX_ERR_VALUE_TOO_LARGE);

    /* Read-only transactions refuse writes and go on. */
    EXPECT(pmtx_txn_begin(db, PMTX_READ_ONLY, &txn), PMTX_OK);
    EXPECT(pmtx_txn_put(txn, 0, K("a"), K("x")), PMTX_ERR_MISUSE);
    EXPECT(pmtx_txn_get(txn, 0, K("a"), buf, sizeof buf, &len), PMTX_OK);
    /* Another thread may not touch it. */
    struct other_thread other = {.txn = txn};
    EXPECT(pmtx_txn_scan(txn, table, NULL, 0, NULL, 0, 0, &other.iter), PMTX_OK);
    pthread_t thread;
    pthread_create(&thread, NULL, use_from_other_thread, &other);
    pthread_join(thread, NULL);
    EXPECT(other.get, PMTX_ERR_WRONG_THREAD);
    EXPECT(other.put, PMTX_ERR_WRONG_THREAD);
    EXPECT(other.commit, PMTX_ERR_WRONG_THREAD);
    EXPECT(other.next, PMTX_ERR_WRONG_THREAD);
    EXPECT(other.free_txn, PMTX_ERR_WRONG_THREAD);
    const uint8_t *key;
    size_t key_len;
    EXPECT(pmtx_iter_next(other.iter, &key, &key_len, NULL, NULL), PMTX_OK);
    TRUE(key_len == 1 && key[0] == 'a');
    EXPECT(pmtx_iter_next(other.iter, &key, &key_len, NULL, NULL), PMTX_END);
    EXPECT(pmtx_txn_commit(txn), PMTX_OK);
    /* The iterator outlives its transaction's end, but reads no more. */
    EXPECT(pmtx_iter_free(other.iter), PMTX_OK);
    EXPECT(pmtx_txn_scan(txn, table, NULL, 0, NULL, 0, 0, &iter), PMTX_OK);
    EXPECT(pmtx_iter_next(iter, &key, &key_len, NULL, NULL), PMTX_ERR_ENDED);
    EXPECT(pmtx_txn_free(txn), PMTX_OK);
    EXPECT(pmtx_iter_next(iter, &key, &key_len, NULL, NULL), PMTX_ERR_ENDED);
    EXPECT(pmtx_iter_free(iter), PMTX_OK);

    /* A body may not end its own transaction; non-zero rolls back. */
    pmtx_status seen[3];
    EXPECT(pmtx_run(db, body_commits_itself, seen), PMTX_OK);
    EXPECT(seen[0], PMTX_ERR_MISUSE);
    EXPECT(seen[1], PMTX_ERR_MISUSE);
    EXPECT(seen[2], PMTX_ERR_MISUSE);
    EXPECT(pmtx_run(db, body_writes_then_rolls_back, NULL), PMTX_ROLLBACK);
    EXPECT(pmtx_run(db, NULL, NULL), PMTX_ERR_ARGUMENT);
    EXPECT(pmtx_txn_begin(db, 0, &txn), PMTX_OK);
    EXPECT(pmtx_txn_get(txn, 0, K("rb"), buf, sizeof buf, &len), PMTX_NOT_FOUND);

    /* A conflict, retried by hand: `txn` read "a" before `other` changed it. */
    EXPECT(pmtx_txn_get(txn, 0, K("a"), buf, sizeof buf, &len), PMTX_OK);
    pmtx_txn *writer;
    EXPECT(pmtx_txn_begin(db, 0, &writer), PMTX_OK);
    EXPECT(pmtx_txn_put(writer, 0, K("a"), K("changed")), PMTX_OK);
    EXPECT(pmtx_txn_commit(writer), PMTX_OK);
    EXPECT(pmtx_txn_free(writer), PMTX_OK);
    EXPECT(pmtx_txn_put(txn, 0, K("b"), K("from a")), PMTX_OK);
    EXPECT(pmtx_txn_commit(txn), PMTX_CONFLICT);
    EXPECT(pmtx_txn_put(txn, 0, K("b"), K("x")), PMTX_CONFLICT);
    EXPECT(pmtx_txn_retry(txn), PMTX_OK);
    EXPECT(pmtx_txn_get(txn, 0, K("a"), buf, sizeof buf, &len), PMTX_OK);
    TRUE(len == 7 && memcmp(buf, "changed", 7) == 0);
    EXPECT(pmtx_txn_put(txn, 0, K("b"), K("from a")), PMTX_OK);
    EXPECT(pmtx_txn_commit(txn), PMTX_OK);

    /* A pipelined commit, waited for. */
    pmtx_txn *piped;
    pmtx_pending *pending;
    bool durable = false;
    EXPECT(pmtx_txn_begin(db, 0, &piped), PMTX_OK);
    EXPECT(pmtx_txn_put(piped, 0, K("c"), K("piped")), PMTX_OK);
    EXPECT(pmtx_txn_commit_nowait(piped, &pending), PMTX_OK);
    EXPECT(pmtx_pending_is_durable(pending, &durable), PMTX_OK);
    EXPECT(pmtx_pending_wait(pending), PMTX_OK);
    EXPECT(pmtx_txn_free(piped), PMTX_OK);

    /* Misuse after close: the handle is NULL, the ended transaction's says so. */
    EXPECT(pmtx_close(&db), PMTX_OK);
    TRUE(db == NULL);
    EXPECT(pmtx_txn_begin(db, 0, &writer), PMTX_ERR_ARGUMENT);
    TRUE(strstr(pmtx_errmsg(), "closed") != NULL);
    EXPECT(pmtx_run(db, body_writes_then_rolls_back, NULL), PMTX_ERR_ARGUMENT);
    EXPECT(pmtx_table(db, "t", &table), PMTX_ERR_ARGUMENT);
    EXPECT(pmtx_txn_get(txn, 0, K("a"), buf, sizeof buf, &len), PMTX_ERR_CLOSED);
    EXPECT(pmtx_txn_commit(txn), PMTX_ERR_CLOSED);
    EXPECT(pmtx_txn_free(txn), PMTX_OK);

    /* What was committed is there after a reopen; what was not is not. */
    EXPECT(pmtx_open(pool_path("txn.pool"), NULL, &db), PMTX_OK);
    EXPECT(pmtx_txn_begin(db, PMTX_READ_ONLY, &txn), PMTX_OK);
    EXPECT(pmtx_txn_get(txn, 0, K("b"), buf, sizeof buf, &len), PMTX_OK);
    TRUE(len == 6 && memcmp(buf, "from a", 6) == 0);
    EXPECT(pmtx_txn_get(txn, 0, K("c"), buf, sizeof buf, &len), PMTX_OK);
    EXPECT(pmtx_txn_get(txn, 0, K("rb"), buf, sizeof buf, &len), PMTX_NOT_FOUND);
    EXPECT(pmtx_txn_get(txn, 0, K("big"), buf, sizeof buf, &len), PMTX_NOT_FOUND);
    EXPECT(pmtx_txn_free(txn), PMTX_OK);
    EXPECT(pmtx_close(&db), PMTX_OK);
}

/* Group commit acknowledges a commit once every transaction of its epoch
 * has ended: a thread holding a running transaction must not wait for
 * another of its commits (it would wait forever); pmtx refuses. */
static void epoch_waits(void) {
    pmtx_db *db;
    EXPECT(create(pool_path("epochs.pool"), "group-commit", &db), PMTX_OK);
    pmtx_txn *running, *other;
    pmtx_pending *pending;
    EXPECT(pmtx_txn_begin(db, 0, &running), PMTX_OK);
    EXPECT(pmtx_txn_put(running, 0, K("r"), K("running")), PMTX_OK);
    EXPECT(pmtx_run(db, body_writes_then_rolls_back, NULL), PMTX_ERR_MISUSE);
    TRUE(strstr(pmtx_errmsg(), "never end") != NULL);
    EXPECT(pmtx_txn_begin(db, 0, &other), PMTX_OK);
    EXPECT(pmtx_txn_put(other, 0, K("o"), K("other")), PMTX_OK);
    EXPECT(pmtx_txn_commit(other), PMTX_ERR_MISUSE);
    EXPECT(pmtx_txn_commit_nowait(other, &pending), PMTX_OK);
    EXPECT(pmtx_pending_wait(pending), PMTX_ERR_MISUSE);
    EXPECT(pmtx_txn_commit(running), PMTX_OK); /* no other running transaction of this thread now */
    EXPECT(pmtx_pending_wait(pending), PMTX_OK);
    EXPECT(pmtx_txn_free(other), PMTX_OK);
    EXPECT(pmtx_txn_free(running), PMTX_OK);
    EXPECT(pmtx_close(&db), PMTX_OK);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    TRUE(strcmp(pmtx_status_name(PMTX_CONFLICT), "PMTX_CONFLICT") == 0);
    TRUE(strcmp(pmtx_status_name(12345), "PMTX_UNKNOWN_STATUS") == 0);
    TRUE(pmtx_version()[0] != '\0');
    opening();
    transactions();
    epoch_waits();
    printf("%d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
