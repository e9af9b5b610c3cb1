#pragma once
// Compiled kernels, cached in memory by the expression's signature (looked up before any source is
// generated) and on disk by everything that decides the binary: kiln's version, NVRTC's version, the
// architecture, the options and the source. A second run of a program compiles nothing.
//
// Disk files live in KILN_CACHE_DIR (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln), one per program,
// named by a hash of that key and written atomically (io/atomic_file.hpp). A file holds its whole key, so
// a hash collision reads as a miss; one that is truncated, corrupt or from another key is ignored and
// rewritten. A failed compile throws and caches nothing. KILN_DEBUG=1 prints each generated program and
// each cache hit to stderr.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/cuda/nvrtc.hpp"
#include "kiln/cuda/profile.hpp"
#include "kiln/io/atomic_file.hpp"

namespace kiln::cuda {

namespace detail {

inline uint64_t fnv1a(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

inline bool debug_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_DEBUG");
    return v && *v && std::string_view(v) != "0";
  }();
  return on;
}

// File layout: magic, then four little-endian u64 (key size, binary size, checksum of key and binary,
// flags: bit 0 = cubin, bits 8.. = architecture), then the key, then the binary.
inline constexpr std::string_view kCacheMagic = "KILNKRN1";
inline constexpr size_t kCacheHeader = 8 + 4 * 8;

inline void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += char((v >> (8 * i)) & 0xff);
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

}  // namespace detail

class KernelCache {
 public:
  struct Stats {
    int64_t memory_hits = 0;
    int64_t disk_hits = 0;
    int64_t compiles = 0;
    int64_t disk_rejected = 0;       // files ignored: truncated, corrupt, or another key's
    int64_t disk_write_failures = 0;  // a read-only or full cache directory: the program still runs
  };

  explicit KernelCache(std::filesystem::path dir = default_directory()) : dir_(std::move(dir)) {}

  static std::filesystem::path default_directory() {
    if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::filesystem::path(x) / "kiln";
    if (const char* h = std::getenv("HOME"); h && *h) return std::filesystem::path(h) / ".cache" / "kiln";
    return std::filesystem::temp_directory_path() / "kiln-cache";
  }

  // The program for `signature` on `arch`: from memory when this signature was compiled before, else
  // generate() is called for its (source, name) and the result comes from disk or from NVRTC.
  std::shared_ptr<const CompiledProgram> get(const std::string& signature, int arch,
                                             const std::function<std::pair<std::string, std::string>()>& generate,
                                             const std::vector<std::string>& options = {}) {
    const std::string memory_key = kiln::detail::cat(signature, "|sm_", arch);
    {
      std::lock_guard lock(mutex_);
      if (auto it = memory_.find(memory_key); it != memory_.end()) {
        ++stats_.memory_hits;
        return it->second;
      }
    }
    const auto [source, name] = generate();
    auto program = compile_cached(source, name, arch, options);
    std::lock_guard lock(mutex_);
    return memory_.emplace(memory_key, std::move(program)).first->second;
  }

  // The program for `source` on `arch`, from disk or compiled (and then written to disk).
  std::shared_ptr<const CompiledProgram> compile_cached(const std::string& source, const std::string& name, int arch,
                                                        const std::vector<std::string>& options = {}) {
    Nvrtc& nvrtc = Nvrtc::get();
    const std::string key = disk_key(source, arch, options, nvrtc.version());
    const std::filesystem::path file = file_for(key);
    if (auto hit = load(file, key)) {
      if (detail::debug_enabled()) std::fprintf(stderr, "kiln: kernel cache hit: %s (%s)\n", name.c_str(), file.c_str());
      std::lock_guard lock(mutex_);
      ++stats_.disk_hits;
      return hit;
    }
    if (detail::debug_enabled())
      std::fprintf(stderr, "kiln: compiling %s for sm_%d (source #%s):\n%s\n", name.c_str(), arch,
                   source_tag(source).c_str(), source.c_str());
    auto program = std::make_shared<const CompiledProgram>(nvrtc.compile(source, name, arch, options));
    const bool stored = store(file, key, *program);
    std::lock_guard lock(mutex_);
    ++stats_.compiles;
    if (!stored) ++stats_.disk_write_failures;
    return program;
  }

  // Everything the binary depends on, as written at the head of its file.
  static std::string disk_key(const std::string& source, int arch, const std::vector<std::string>& options,
                              int nvrtc_version) {
    std::string key = kiln::detail::cat("kiln ", KILN_VERSION_STRING, "\nnvrtc ", nvrtc_version, "\narch ", arch, "\n");
    for (const std::string& o : options) key += "option " + o + "\n";
    return key + source;
  }
  std::filesystem::path file_for(const std::string& key) const {
    char name[32];
    std::snprintf(name, sizeof name, "%016llx.kernel", static_cast<unsigned long long>(detail::fnv1a(key)));
    return dir_ / name;
  }

  const std::filesystem::path& directory() const { return dir_; }
  Stats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  // Forgets the in-memory programs (the disk cache stays).
  void clear_memory() {
    std::lock_guard lock(mutex_);
    memory_.clear();
  }

 private:
  std::shared_ptr<const CompiledProgram> load(const std::filesystem::path& file, const std::string& key) {
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) return nullptr;
    io::Bytes bytes;
    try {
      bytes = io::read_file(file);
    } catch (const std::exception&) {
      return reject();
    }
    if (bytes.size() < detail::kCacheHeader ||
        std::string_view(reinterpret_cast<const char*>(bytes.data()), 8) != detail::kCacheMagic)
      return reject();
    const uint64_t key_size = detail::get_u64(&bytes[8]), binary_size = detail::get_u64(&bytes[16]);
    const uint64_t checksum = detail::get_u64(&bytes[24]), flags = detail::get_u64(&bytes[32]);
    if (key_size != key.size() || binary_size != bytes.size() - detail::kCacheHeader - key_size) return reject();
    const std::string_view body(reinterpret_cast<const char*>(bytes.data()) + detail::kCacheHeader,
                                bytes.size() - detail::kCacheHeader);
    if (detail::fnv1a(body) != checksum || body.substr(0, key_size) != key) return reject();
    auto program = std::make_shared<CompiledProgram>();
    program->binary.assign(body.substr(key_size));
    program->is_cubin = (flags & 1) != 0;
    program->arch = int(flags >> 8);
    return program;
  }
  std::shared_ptr<const CompiledProgram> reject() {
    std::lock_guard lock(mutex_);
    ++stats_.disk_rejected;
    return nullptr;
  }

  bool store(const std::filesystem::path& file, const std::string& key, const CompiledProgram& program) {
    std::string out(detail::kCacheMagic);
    detail::put_u64(out, key.size());
    detail::put_u64(out, program.binary.size());
    detail::put_u64(out, detail::fnv1a(program.binary, detail::fnv1a(key)));
    detail::put_u64(out, uint64_t(program.is_cubin) | uint64_t(program.arch) << 8);
    out += key;
    out += program.binary;
    try {
      std::filesystem::create_directories(dir_);
      io::write_file_atomic(file, {reinterpret_cast<const uint8_t*>(out.data()), out.size()});
      return true;
    } catch (const std::exception& e) {
      if (detail::debug_enabled()) std::fprintf(stderr, "kiln: kernel cache not written: %s\n", e.what());
      return false;
    }
  }

  std::filesystem::path dir_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const CompiledProgram>> memory_;
  Stats stats_;
};

// The process-wide cache (KILN_CACHE_DIR or the default directory).
inline KernelCache& kernel_cache() {
  static KernelCache cache;
  return cache;
}

}  // namespace kiln::cuda
