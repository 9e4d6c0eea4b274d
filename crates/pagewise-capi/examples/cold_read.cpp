// cold_read FILE: shows FILE held in the cache by a lock, then evicts it and reads it cold
// through an O_DIRECT handle into an aligned buffer: the read leaves nothing cached.
//
//   c++ -std=c++17 cold_read.cpp -o cold_read $(pkg-config --cflags --libs pagewise)
//   ./cold_read /data/model.bin
#include <pagewise.hpp>

#include <cstdint>
#include <iostream>

int main(int argc, char **argv) {
    if (argc != 2) {
        std::cerr << "usage: " << argv[0] << " FILE\n";
        return 2;
    }
    const std::vector<std::string> paths{argv[1]};
    try {
        {
            auto [loaded, lock] = pagewise::load_locked(paths);
            auto st = pagewise::stat(paths);
            std::cout << "locked_bytes=" << loaded.locked_bytes
                      << " cached_while_locked=" << st.cached_bytes << "\n";
        } // the Lock goes: the pages are unlocked (and still cached)

        auto ev = pagewise::evict(paths);
        std::cout << "evicted: dropped=" << ev.dropped_bytes << " stayed=" << ev.stayed_bytes
                  << "\n";

        pagewise::File f(argv[1], PAGEWISE_READ, PAGEWISE_DIRECT);
        pagewise::AlignedBuffer buf = f.buffer(4 << 20);
        std::uint64_t hash = 0xcbf29ce484222325ull, off = 0; // FNV-1a, 64 bits
        while (std::size_t n = f.pread(buf.data(), buf.size(), off)) {
            for (std::size_t i = 0; i < n; i++) hash = (hash ^ buf[i]) * 0x100000001b3ull;
            off += n;
        }
        auto st = pagewise::stat(paths);
        std::cout << "policy=" << pagewise::policy_name(f.policy()) << " read_bytes=" << off
                  << " fnv1a64=" << std::hex << hash << std::dec
                  << " cached_after_read=" << st.cached_bytes << "\n";
        f.close();
        return st.cached_bytes == 0 ? 0 : 1;
    } catch (const pagewise::error &e) {
        std::cerr << "cold_read: " << e.what() << " (errno " << e.code().value() << ")\n";
        return 1;
    }
}
