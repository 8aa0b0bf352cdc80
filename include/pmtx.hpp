/*
 * pmtx.hpp: a header-only C++17 wrapper over pmtx.h: RAII handles, errors
 * as exceptions, lambdas as transaction bodies. Hand-written (pmtx.h is
 * generated); see docs/c-api.md.
 *
 *   pmtx::db db = pmtx::db::open("/dev/shm/app.pool", options);
 *   uint32_t kv = db.table("kv");
 *   db.run([&](pmtx::txn &tx) { tx.put(kv, "apple", "red"); });
 *
 * A step that meets a conflict throws pmtx::conflict; db::run catches it and
 * runs the body again, so a body needs no retry code. Any other exception
 * from a body rolls the transaction back and leaves db::run.
 */
#ifndef PMTX_HPP
#define PMTX_HPP

#include "pmtx.h"

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pmtx {

/// A failed call: its status code and pmtx's message.
class error : public std::runtime_error {
  public:
    error(pmtx_status status, const std::string &message)
        : std::runtime_error(std::string(pmtx_status_name(status)) + ": " + message), status_(status) {}
    pmtx_status status() const noexcept { return status_; }

  private:
    pmtx_status status_;
};

/// The attempt met a conflict (PMTX_CONFLICT): db::run retries the body; an
/// explicit transaction calls txn::retry and runs its steps again.
class conflict : public error {
  public:
    using error::error;
};

/// Thrown by a body to roll its transaction back (db::run returns false).
struct rollback {};

namespace detail {
/// Throws for an error status (and for PMTX_CONFLICT); returns the others.
inline pmtx_status check(pmtx_status status) {
    if (status == PMTX_CONFLICT) throw conflict(status, pmtx_errmsg());
    if (status < 0) throw error(status, pmtx_errmsg());
    return status;
}
inline const uint8_t *bytes(std::string_view text) { return reinterpret_cast<const uint8_t *>(text.data()); }
} // namespace detail

/// One table of a new database.
struct table {
    std::string name;
    bool ordered = true;
    uint32_t max_key_len = 0;   ///< 0: 64 bytes
    uint32_t max_value_len = 0; ///< 0: 1024 bytes
};

/// How db::open opens a database (see pmtx_options in pmtx.h).
struct options {
    std::string engine;         ///< empty: the pool's, or "zen"
    std::vector<table> tables;  ///< empty: the pool's (which must exist)
    bool create = false;        ///< PMTX_CREATE
    uint32_t flags = 0;         ///< more of pmtx_options.flags (PMTX_EADR, PMTX_MSYNC)
    uint32_t workers = 0;       ///< 0: the number of CPUs, at least 4
    uint64_t pool_size = 0;     ///< 0: 1 GiB
    std::string pm;             ///< empty: "direct"
};

/// A scan's rows, read in batches as it goes (move-only).
class iterator {
  public:
    explicit iterator(pmtx_iter *handle) noexcept : handle_(handle) {}
    iterator(iterator &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    iterator &operator=(iterator &&other) noexcept {
        std::swap(handle_, other.handle_);
        return *this;
    }
    iterator(const iterator &) = delete;
    iterator &operator=(const iterator &) = delete;
    ~iterator() { pmtx_iter_free(handle_); }

    /// Moves to the next row; false at the end of the range.
    bool next() {
        const uint8_t *key, *value;
        size_t key_len, value_len;
        if (detail::check(pmtx_iter_next(handle_, &key, &key_len, &value, &value_len)) == PMTX_END) return false;
        key_ = std::string_view(reinterpret_cast<const char *>(key), key_len);
        value_ = std::string_view(reinterpret_cast<const char *>(value), value_len);
        return true;
    }
    /// The current row, valid until the next call of next().
    std::string_view key() const noexcept { return key_; }
    std::string_view value() const noexcept { return value_; }

  private:
    pmtx_iter *handle_;
    std::string_view key_, value_;
};

/// A transaction: the one a db::run body gets, or one from db::begin
/// (move-only; freed, and rolled back if still running, by its destructor).
class txn {
  public:
    txn(pmtx_txn *handle, bool owned) noexcept : handle_(handle), owned_(owned) {}
    txn(txn &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)), owned_(other.owned_) {}
    txn &operator=(txn &&other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(owned_, other.owned_);
        return *this;
    }
    txn(const txn &) = delete;
    txn &operator=(const txn &) = delete;
    ~txn() {
        if (owned_) pmtx_txn_free(handle_);
    }

    /// The value of `key`, or nothing if it is absent.
    std::optional<std::string> get(uint32_t table, std::string_view key) {
        std::string value(64, '\0');
        size_t len = 0;
        for (;;) {
            pmtx_status status = pmtx_txn_get(handle_, table, detail::bytes(key), key.size(),
                                              reinterpret_cast<uint8_t *>(value.data()), value.size(), &len);
            if (status == PMTX_NOT_FOUND) return std::nullopt;
            if (status == PMTX_ERR_BUFFER_TOO_SMALL) {
                value.resize(len);
                continue;
            }
            detail::check(status);
            value.resize(len);
            return value;
        }
    }
    /// Inserts or overwrites.
    void put(uint32_t table, std::string_view key, std::string_view value) {
        detail::check(pmtx_txn_put(handle_, table, detail::bytes(key), key.size(), detail::bytes(value), value.size()));
    }
    /// Inserts if absent; false if the key exists.
    bool insert(uint32_t table, std::string_view key, std::string_view value) {
        return detail::check(pmtx_txn_insert(handle_, table, detail::bytes(key), key.size(), detail::bytes(value),
                                             value.size())) == PMTX_OK;
    }
    /// Overwrites if present; false if the key is absent.
    bool update(uint32_t table, std::string_view key, std::string_view value) {
        return detail::check(pmtx_txn_update(handle_, table, detail::bytes(key), key.size(), detail::bytes(value),
                                             value.size())) == PMTX_OK;
    }
    /// Deletes; false if the key is absent.
    bool erase(uint32_t table, std::string_view key) {
        return detail::check(pmtx_txn_delete(handle_, table, detail::bytes(key), key.size())) == PMTX_OK;
    }
    /// The rows of an ordered table from `from` (included) to `to` (excluded).
    iterator scan(uint32_t table, std::optional<std::string_view> from = std::nullopt,
                  std::optional<std::string_view> to = std::nullopt, bool reverse = false) {
        pmtx_iter *handle = nullptr;
        detail::check(pmtx_txn_scan(handle_, table, from ? detail::bytes(*from) : nullptr, from ? from->size() : 0,
                                    to ? detail::bytes(*to) : nullptr, to ? to->size() : 0,
                                    reverse ? PMTX_SCAN_REVERSE : 0, &handle));
        return iterator(handle);
    }
    /// Commits and waits for durability; throws pmtx::conflict if
    /// validation failed (then retry() and run the steps again).
    void commit() { detail::check(pmtx_txn_commit(handle_)); }
    /// Begins the next attempt after a conflict.
    void retry() { detail::check(pmtx_txn_retry(handle_)); }
    /// Rolls back (nothing it wrote is kept).
    void abort() { detail::check(pmtx_txn_abort(handle_)); }
    pmtx_txn *handle() const noexcept { return handle_; }

  private:
    pmtx_txn *handle_;
    bool owned_;
};

/// A database (move-only; closed by its destructor, whose errors are lost:
/// call close() to see them).
class db {
  public:
    /// Opens or creates the database in `path` as `opts` say.
    static db open(const std::string &path, const options &opts) {
        std::vector<pmtx_table_def> defs;
        for (const pmtx::table &t : opts.tables)
            defs.push_back({t.name.c_str(), static_cast<uint32_t>(t.ordered ? PMTX_ORDERED : PMTX_HASHED),
                            t.max_key_len, t.max_value_len});
        pmtx_options raw;
        pmtx_options_init(&raw);
        raw.engine = opts.engine.empty() ? nullptr : opts.engine.c_str();
        raw.tables = defs.empty() ? nullptr : defs.data();
        raw.table_count = defs.size();
        raw.flags = opts.flags | (opts.create ? PMTX_CREATE : 0);
        raw.workers = opts.workers;
        raw.pool_size = opts.pool_size;
        raw.pm = opts.pm.empty() ? nullptr : opts.pm.c_str();
        pmtx_db *handle = nullptr;
        detail::check(pmtx_open(path.c_str(), &raw, &handle));
        return db(handle);
    }
    /// Reopens the pool file `path` with the engine and tables it stores.
    static db open(const std::string &path) {
        pmtx_db *handle = nullptr;
        detail::check(pmtx_open(path.c_str(), nullptr, &handle));
        return db(handle);
    }
    db(db &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    db &operator=(db &&other) noexcept {
        std::swap(handle_, other.handle_);
        return *this;
    }
    db(const db &) = delete;
    db &operator=(const db &) = delete;
    ~db() { pmtx_close(&handle_); }

    /// Makes everything durable and closes; throws what the close met.
    void close() { detail::check(pmtx_close(&handle_)); }
    /// The id of table `name`.
    uint32_t table(const std::string &name) const {
        uint32_t id = 0;
        detail::check(pmtx_table(handle_, name.c_str(), &id));
        return id;
    }
    /// Runs `body(txn &)` as a transaction, again after each conflict;
    /// true once committed and durable, false if the body threw
    /// pmtx::rollback. Another exception rolls back and is rethrown.
    template <class Body> bool run(Body &&body, bool read_only = false) {
        context<Body> ctx{&body, nullptr};
        pmtx_status status = read_only ? pmtx_run_read_only(handle_, &trampoline<Body>, &ctx)
                                       : pmtx_run(handle_, &trampoline<Body>, &ctx);
        if (ctx.error) std::rethrow_exception(ctx.error);
        return detail::check(status) == PMTX_OK;
    }
    /// Begins an explicit transaction on this thread.
    txn begin(bool read_only = false) {
        pmtx_txn *handle = nullptr;
        detail::check(pmtx_txn_begin(handle_, read_only ? PMTX_READ_ONLY : 0, &handle));
        return txn(handle, true);
    }
    pmtx_db *handle() const noexcept { return handle_; }

  private:
    explicit db(pmtx_db *handle) noexcept : handle_(handle) {}

    template <class Body> struct context {
        Body *body;
        std::exception_ptr error;
    };
    template <class Body> static int trampoline(pmtx_txn *handle, void *raw) noexcept {
        auto *ctx = static_cast<context<Body> *>(raw);
        ctx->error = nullptr;
        txn tx(handle, false);
        try {
            (*ctx->body)(tx);
            return 0;
        } catch (const conflict &) {
            return PMTX_CONFLICT;
        } catch (const rollback &) {
            return PMTX_ROLLBACK;
        } catch (...) {
            ctx->error = std::current_exception();
            return PMTX_ROLLBACK;
        }
    }

    pmtx_db *handle_;
};

} // namespace pmtx

#endif
