/*
 * A persistent key-value store, one command per run, with explicit
 * transactions (pmtx_txn_begin ... pmtx_txn_commit, retried on conflict).
 *
 *   cc kv.c $(pkg-config --cflags --libs pmtx) -o kv
 *   ./kv /tmp/kv.pool put apple red
 *   ./kv /tmp/kv.pool get apple
 *   ./kv /tmp/kv.pool scan [FROM [TO]]
 *   ./kv /tmp/kv.pool delete apple
 *
 * The first put creates the pool (engine zen); every other run reopens it
 * from what the pool stores. Exit status: 0 done, 1 not found, 2 usage, 3
 * an error (its message on stderr).
 */
#include <pmtx.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *what, pmtx_status status) {
    fprintf(stderr, "kv: %s: %s: %s\n", what, pmtx_status_name(status), pmtx_errmsg());
    return 3;
}

static pmtx_status open_db(const char *path, int create, pmtx_db **db) {
    if (!create || access(path, F_OK) == 0) return pmtx_open(path, NULL, db);
    pmtx_table_def table = {.name = "kv", .kind = PMTX_ORDERED, .max_key_len = 64, .max_value_len = 1024};
    pmtx_options options;
    pmtx_options_init(&options);
    options.tables = &table;
    options.table_count = 1;
    options.flags = PMTX_CREATE;
    options.pool_size = 64u << 20;
    return pmtx_open(path, &options, db);
}

/* put or delete in an explicit transaction, retried while it conflicts. */
static pmtx_status write_one(pmtx_db *db, uint32_t table, const char *key, const char *value) {
    pmtx_txn *txn;
    pmtx_status status = pmtx_txn_begin(db, 0, &txn);
    if (status != PMTX_OK) return status;
    for (;;) {
        if (value)
            status = pmtx_txn_put(txn, table, (const uint8_t *)key, strlen(key), (const uint8_t *)value,
                                  strlen(value));
        else
            status = pmtx_txn_delete(txn, table, (const uint8_t *)key, strlen(key));
        pmtx_status done = status;
        if (status == PMTX_OK || status == PMTX_NOT_FOUND) status = pmtx_txn_commit(txn);
        if (status == PMTX_CONFLICT) {
            status = pmtx_txn_retry(txn);
            if (status == PMTX_OK) continue;
        }
        if (status == PMTX_OK) status = done;
        break;
    }
    pmtx_txn_free(txn);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: kv POOL put KEY VALUE | get KEY | delete KEY | scan [FROM [TO]]\n");
        return 2;
    }
    const char *path = argv[1], *command = argv[2];
    pmtx_db *db;
    pmtx_status status = open_db(path, strcmp(command, "put") == 0, &db);
    if (status != PMTX_OK) return fail("open", status);
    uint32_t table;
    if ((status = pmtx_table(db, "kv", &table)) != PMTX_OK) return fail("table", status);
    int code = 0;

    if (strcmp(command, "put") == 0 && argc == 5) {
        status = write_one(db, table, argv[3], argv[4]);
        if (status != PMTX_OK) code = fail("put", status);
        else printf("%s = %s\n", argv[3], argv[4]);
    } else if (strcmp(command, "delete") == 0 && argc == 4) {
        status = write_one(db, table, argv[3], NULL);
        if (status == PMTX_NOT_FOUND) printf("%s: not found\n", argv[3]), code = 1;
        else if (status != PMTX_OK) code = fail("delete", status);
        else printf("%s: deleted\n", argv[3]);
    } else if (strcmp(command, "get") == 0 && argc == 4) {
        pmtx_txn *txn;
        char value[1025];
        size_t len = 0;
        if ((status = pmtx_txn_begin(db, PMTX_READ_ONLY, &txn)) != PMTX_OK) return fail("begin", status);
        status = pmtx_txn_get(txn, table, (const uint8_t *)argv[3], strlen(argv[3]), (uint8_t *)value,
                              sizeof value - 1, &len);
        pmtx_status committed = pmtx_txn_commit(txn); /* a read-only commit validates the read */
        pmtx_txn_free(txn);
        if (status == PMTX_OK && committed != PMTX_OK) status = committed;
        if (status == PMTX_OK) value[len] = '\0', printf("%s\n", value);
        else if (status == PMTX_NOT_FOUND) printf("%s: not found\n", argv[3]), code = 1;
        else code = fail("get", status);
    } else if (strcmp(command, "scan") == 0 && argc <= 5) {
        const char *from = argc > 3 ? argv[3] : NULL, *to = argc > 4 ? argv[4] : NULL;
        pmtx_txn *txn;
        pmtx_iter *iter;
        if ((status = pmtx_txn_begin(db, PMTX_READ_ONLY, &txn)) != PMTX_OK) return fail("begin", status);
        status = pmtx_txn_scan(txn, table, (const uint8_t *)from, from ? strlen(from) : 0, (const uint8_t *)to,
                               to ? strlen(to) : 0, 0, &iter);
        const uint8_t *key, *value;
        size_t key_len, value_len;
        while (status == PMTX_OK && (status = pmtx_iter_next(iter, &key, &key_len, &value, &value_len)) == PMTX_OK)
            printf("%.*s = %.*s\n", (int)key_len, (const char *)key, (int)value_len, (const char *)value);
        pmtx_iter_free(iter);
        if (status == PMTX_END) status = pmtx_txn_commit(txn);
        pmtx_txn_free(txn);
        if (status != PMTX_OK) code = fail("scan", status);
    } else {
        fprintf(stderr, "usage: kv POOL put KEY VALUE | get KEY | delete KEY | scan [FROM [TO]]\n");
        code = 2;
    }
    if ((status = pmtx_close(&db)) != PMTX_OK && code == 0) code = fail("close", status);
    return code;
}
