// pagewise.hpp: a header-only C++17 wrapper of pagewise.h (RAII handles, exceptions).
//
// Over the C functions only: link with libpagewise as for C
// (c++ -std=c++17 prog.cpp $(pkg-config --cflags --libs pagewise)).
//
//   pagewise::File f("/data/x", PAGEWISE_READ, PAGEWISE_DIRECT);
//   pagewise::AlignedBuffer buf = f.buffer(8 << 20);
//   for (std::uint64_t off = 0;;) {
//       std::size_t n = f.pread(buf.data(), buf.size(), off);
//       if (n == 0) break;
//       off += n;
//   }
//   pagewise_stat_report st = pagewise::stat({"/data/x"});   // st.cached_bytes == 0
//
// A call that fails throws pagewise::error, a std::system_error whose code() is the errno
// (std::generic_category) and whose what() names the path and the call. Verbs that fail on
// some files only return their report (error_count > 0; pagewise_last_error() has the first).

#ifndef PAGEWISE_HPP
#define PAGEWISE_HPP

#include "pagewise.h"

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace pagewise {

// A failed call: code() is the errno, what() the message of pagewise_last_error().
class error : public std::system_error {
public:
    error(int errno_value, const std::string &message)
        : std::system_error(errno_value, std::generic_category(), message) {}
};

namespace detail {

inline std::string last_error() {
    const char *m = pagewise_last_error();
    return m ? std::string(m) : std::string("pagewise: unknown error");
}

[[noreturn]] inline void raise(long long negative_errno) {
    throw error(static_cast<int>(-negative_errno), last_error());
}

template <class T> T check(T result) {
    if (result < 0) raise(static_cast<long long>(result));
    return result;
}

// The C array of a list of strings (pointers into them: keep the list alive).
struct c_strings {
    std::vector<const char *> ptrs;
    explicit c_strings(const std::vector<std::string> &v) {
        ptrs.reserve(v.size());
        for (const auto &s : v) ptrs.push_back(s.c_str());
    }
    const char *const *data() const { return ptrs.data(); }
    std::size_t size() const { return ptrs.size(); }
};

} // namespace detail

// An option or report struct with its size set and every other field zero (the defaults).
template <class T> T defaults() {
    T v{};
    v.size = sizeof(T);
    return v;
}

// The library's version, e.g. "0.1.0".
inline std::string version() { return pagewise_version(); }
inline std::string build_info() { return pagewise_build_info(); }

// The name of a cache policy: "direct", "dontcache", "drop-behind".
inline const char *policy_name(int policy) {
    switch (policy) {
    case PAGEWISE_DIRECT: return "direct";
    case PAGEWISE_DONTCACHE: return "dontcache";
    case PAGEWISE_DROP_BEHIND: return "drop-behind";
    default: return "unknown";
    }
}

// A zeroed buffer aligned for O_DIRECT (pagewise_aligned_alloc), freed when it goes.
class AlignedBuffer {
public:
    AlignedBuffer() = default;
    // `size` bytes aligned to `alignment` (0: 4096).
    explicit AlignedBuffer(std::size_t size, std::size_t alignment = 0)
        : size_(size), alignment_(alignment) {
        data_ = pagewise_aligned_alloc(size, &alignment_);
        if (!data_) throw error(ENOMEM, detail::last_error());
    }
    AlignedBuffer(const AlignedBuffer &) = delete;
    AlignedBuffer &operator=(const AlignedBuffer &) = delete;
    AlignedBuffer(AlignedBuffer &&o) noexcept
        : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
          alignment_(o.alignment_) {}
    AlignedBuffer &operator=(AlignedBuffer &&o) noexcept {
        if (this != &o) {
            pagewise_aligned_free(data_);
            data_ = std::exchange(o.data_, nullptr);
            size_ = std::exchange(o.size_, 0);
            alignment_ = o.alignment_;
        }
        return *this;
    }
    ~AlignedBuffer() { pagewise_aligned_free(data_); }

    unsigned char *data() noexcept { return static_cast<unsigned char *>(data_); }
    const unsigned char *data() const noexcept { return static_cast<const unsigned char *>(data_); }
    std::size_t size() const noexcept { return size_; }
    std::size_t alignment() const noexcept { return alignment_; }
    unsigned char &operator[](std::size_t i) noexcept { return data()[i]; }
    unsigned char *begin() noexcept { return data(); }
    unsigned char *end() noexcept { return data() + size_; }

private:
    void *data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t alignment_ = 0;
};

// What zero-copy requests must be aligned to (pagewise_file_alignment).
struct Alignment {
    std::size_t memory;
    std::size_t offset;
};

// A file for cache-neutral I/O (pagewise_open), closed when it goes. The destructor cannot
// report a failure to write what is staged: call close() to see it.
class File {
public:
    File() = default;
    // Opens `path`; `flags`: PAGEWISE_READ | PAGEWISE_WRITE | PAGEWISE_CREATE | ...; `policy`:
    // PAGEWISE_DIRECT, PAGEWISE_DONTCACHE or PAGEWISE_DROP_BEHIND.
    explicit File(const std::string &path, std::uint32_t flags = PAGEWISE_READ,
                  std::uint32_t policy = PAGEWISE_DIRECT)
        : f_(pagewise_open(path.c_str(), flags, policy)) {
        if (!f_) throw error(errno, detail::last_error());
    }
    File(const File &) = delete;
    File &operator=(const File &) = delete;
    File(File &&o) noexcept : f_(std::exchange(o.f_, nullptr)) {}
    File &operator=(File &&o) noexcept {
        if (this != &o) {
            if (f_) pagewise_close(f_);
            f_ = std::exchange(o.f_, nullptr);
        }
        return *this;
    }
    ~File() {
        if (f_) pagewise_close(f_);
    }

    // Reads up to `len` bytes at `offset`; fewer only at the end of the file (0 there).
    std::size_t pread(void *buf, std::size_t len, std::uint64_t offset) {
        return static_cast<std::size_t>(detail::check(pagewise_pread(f_, buf, len, offset)));
    }
    // Writes all `len` bytes at `offset`.
    std::size_t pwrite(const void *buf, std::size_t len, std::uint64_t offset) {
        return static_cast<std::size_t>(detail::check(pagewise_pwrite(f_, buf, len, offset)));
    }
    // The policy in force (PAGEWISE_DIRECT, ...).
    int policy() const { return detail::check(pagewise_file_policy(f_)); }
    // Why the policy in force is not the one asked for ("" when it is).
    std::string notice() const {
        const char *n = pagewise_file_notice(f_);
        return n ? std::string(n) : std::string();
    }
    Alignment alignment() const {
        Alignment a{0, 0};
        detail::check(pagewise_file_alignment(f_, &a.memory, &a.offset));
        return a;
    }
    // A buffer for zero-copy requests on this file: `size` rounded up to the offset alignment.
    AlignedBuffer buffer(std::size_t size) const {
        Alignment a = alignment();
        std::size_t rounded = (size + a.offset - 1) / a.offset * a.offset;
        return AlignedBuffer(rounded, a.memory);
    }
    std::uint64_t size() const {
        return static_cast<std::uint64_t>(detail::check(pagewise_file_size(f_)));
    }
    void sync() { detail::check(pagewise_file_sync(f_)); }
    void truncate(std::uint64_t length) { detail::check(pagewise_file_truncate(f_, length)); }
    // Writes what is staged and closes; throws if that fails (the handle is gone either way).
    void close() {
        pagewise_file *f = std::exchange(f_, nullptr);
        detail::check(pagewise_close(f));
    }
    explicit operator bool() const noexcept { return f_ != nullptr; }
    pagewise_file *get() const noexcept { return f_; }

private:
    pagewise_file *f_ = nullptr;
};

// Pages locked by load_locked(); they stay resident until the Lock goes (or release()).
class Lock {
public:
    Lock() = default;
    explicit Lock(pagewise_lock *l) noexcept : l_(l) {}
    Lock(const Lock &) = delete;
    Lock &operator=(const Lock &) = delete;
    Lock(Lock &&o) noexcept : l_(std::exchange(o.l_, nullptr)) {}
    Lock &operator=(Lock &&o) noexcept {
        if (this != &o) {
            pagewise_lock_free(l_);
            l_ = std::exchange(o.l_, nullptr);
        }
        return *this;
    }
    ~Lock() { pagewise_lock_free(l_); }
    void release() noexcept { pagewise_lock_free(std::exchange(l_, nullptr)); }
    explicit operator bool() const noexcept { return l_ != nullptr; }

private:
    pagewise_lock *l_ = nullptr;
};

// How much of the files and trees is cached.
inline pagewise_stat_report stat(const std::vector<std::string> &paths,
                                 const pagewise_stat_options &opts = defaults<pagewise_stat_options>()) {
    detail::c_strings p(paths);
    auto r = defaults<pagewise_stat_report>();
    detail::check(pagewise_stat(p.data(), p.size(), &opts, &r));
    return r;
}

// Drops the files and trees from the cache.
inline pagewise_evict_report evict(const std::vector<std::string> &paths,
                                   const pagewise_evict_options &opts = defaults<pagewise_evict_options>()) {
    detail::c_strings p(paths);
    auto r = defaults<pagewise_evict_report>();
    detail::check(pagewise_evict(p.data(), p.size(), &opts, &r));
    return r;
}

// Brings the files and trees into the cache.
inline pagewise_load_report load(const std::vector<std::string> &paths,
                                 const pagewise_load_options &opts = defaults<pagewise_load_options>()) {
    detail::c_strings p(paths);
    auto r = defaults<pagewise_load_report>();
    detail::check(pagewise_load(p.data(), p.size(), &opts, &r, nullptr));
    return r;
}

// Brings the files and trees into the cache and keeps them there until the Lock goes.
inline std::pair<pagewise_load_report, Lock>
load_locked(const std::vector<std::string> &paths,
            const pagewise_load_options &opts = defaults<pagewise_load_options>()) {
    detail::c_strings p(paths);
    auto r = defaults<pagewise_load_report>();
    pagewise_lock *l = nullptr;
    detail::check(pagewise_load(p.data(), p.size(), &opts, &r, &l));
    return {r, Lock(l)};
}

// Copies the sources to `dest`, leaving the cache as it was.
inline pagewise_copy_report copy(const std::vector<std::string> &sources, const std::string &dest,
                                 const pagewise_copy_options &opts = defaults<pagewise_copy_options>()) {
    detail::c_strings p(sources);
    auto r = defaults<pagewise_copy_report>();
    detail::check(pagewise_copy(p.data(), p.size(), dest.c_str(), &opts, &r));
    return r;
}

} // namespace pagewise

#endif // PAGEWISE_HPP
