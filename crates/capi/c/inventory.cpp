// An inventory from C++ with pmtx.hpp: lambdas as transaction bodies, an
// explicit transaction, a scan, an error caught, and a reopen.
//
//   c++ -std=c++17 inventory.cpp $(pkg-config --cflags --libs pmtx) -o inventory
//   ./inventory /dev/shm/inventory.pool
#include <pmtx.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s POOL\n", argv[0]);
        return 2;
    }
    const std::string path = argv[1];
    unlink(path.c_str());
    try {
        pmtx::options options;
        options.tables = {{"stock", true, 32, 16}};
        options.create = true;
        options.pool_size = 32u << 20;
        {
            pmtx::db db = pmtx::db::open(path, options);
            const uint32_t stock = db.table("stock");
            db.run([&](pmtx::txn &tx) {
                tx.put(stock, "apples", "10");
                tx.put(stock, "pears", "4");
                tx.put(stock, "plums", "7");
            });
            // Sell 6 pears: not enough, so the body rolls back.
            bool sold = db.run([&](pmtx::txn &tx) {
                int left = std::stoi(tx.get(stock, "pears").value());
                if (left < 6) throw pmtx::rollback{};
                tx.put(stock, "pears", std::to_string(left - 6));
            });
            std::printf("sold 6 pears: %s\n", sold ? "yes" : "no (rolled back)");
            // An explicit transaction with its retry loop.
            pmtx::txn tx = db.begin();
            for (;;) {
                try {
                    int apples = std::stoi(tx.get(stock, "apples").value());
                    tx.put(stock, "apples", std::to_string(apples - 3));
                    tx.commit();
                    break;
                } catch (const pmtx::conflict &) {
                    tx.retry();
                }
            }
            // Too long a value is an error with a message; nothing is kept.
            try {
                db.run([&](pmtx::txn &tx) { tx.put(stock, "figs", "a value longer than 16 bytes"); });
                std::puts("error: an oversized value was accepted");
                return 1;
            } catch (const pmtx::error &e) {
                std::printf("refused: %s\n", e.what());
                if (e.status() != PMTX_ERR_VALUE_TOO_LARGE) return 1;
            }
            db.close();
        }
        pmtx::db db = pmtx::db::open(path);
        const uint32_t stock = db.table("stock");
        std::string listing;
        db.run(
            [&](pmtx::txn &tx) {
                listing.clear();
                pmtx::iterator rows = tx.scan(stock);
                while (rows.next()) listing += std::string(rows.key()) + "=" + std::string(rows.value()) + " ";
            },
            true);
        std::printf("after reopen: %s\n", listing.c_str());
        if (listing != "apples=7 pears=4 plums=7 ") return 1;
        db.close();
    } catch (const pmtx::error &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
