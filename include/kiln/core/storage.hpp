#pragma once
// Reference-counted storage and the CPU caching allocator.
//
// Rebinding in a loop (`h = relu(h)`) frees one buffer and asks for one of the same size each
// iteration; the cache hands the freed block back instead of calling the system allocator.
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/device.hpp"
#include "kiln/core/error.hpp"

namespace kiln {

struct MemoryStats {
  uint64_t allocations = 0;         // storage allocations asked of the allocator
  uint64_t cache_hits = 0;          // of those, served from the cache
  uint64_t system_allocations = 0;  // of those, served by the system allocator
  uint64_t bytes_in_use = 0;        // bytes of live storages (size-class rounded)
  uint64_t bytes_cached = 0;        // bytes held in the cache, free for reuse
  uint64_t peak_bytes_in_use = 0;
};

namespace detail {

// Whether this thread is inside an InferenceMode scope (autograd/grad_mode.hpp). Storages made there are
// inference storages: they keep no version counter.
inline bool& inference_mode_flag() {
  thread_local bool enabled = false;
  return enabled;
}

class CpuCachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;
  // Cached bytes above this are returned to the system (KILN_CPU_CACHE_LIMIT is not read: set it
  // with set_cache_limit()).
  static constexpr size_t kDefaultCacheLimit = size_t(4) << 30;

  static CpuCachingAllocator& instance() {
    static CpuCachingAllocator* a = new CpuCachingAllocator();  // never destroyed: storages may outlive statics
    return *a;
  }

  // Size classes 2^k and 1.5 * 2^k waste at most a third of a block.
  static size_t size_class(size_t n) {
    if (n <= kAlignment) return kAlignment;
    size_t p = size_t(1) << (63 - std::countl_zero(n - 1));  // largest power of two < n
    if (n <= p + p / 2) return p + p / 2;
    return p * 2;
  }

  KILN_DECL void* allocate(size_t nbytes, size_t& block);

  KILN_DECL void release(void* p, size_t block);

  KILN_DECL void empty_cache();

  void set_cache_limit(size_t bytes) {
    cache_limit_ = bytes;
    if (cached_ > bytes) empty_cache();
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {allocations_.load(), cache_hits_.load(), system_allocations_.load(), in_use_, cached_, peak_};
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = in_use_;
  }

 private:
  void note_in_use(size_t block) {
    in_use_ += block;
    peak_ = std::max(peak_, in_use_);
  }
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0, in_use_ = 0, peak_ = 0, cache_limit_ = kDefaultCacheLimit;
  std::atomic<uint64_t> allocations_{0}, cache_hits_{0}, system_allocations_{0};
};

}  // namespace detail

inline MemoryStats memory_stats() { return detail::CpuCachingAllocator::instance().stats(); }
inline void empty_cache() { detail::CpuCachingAllocator::instance().empty_cache(); }
inline void reset_peak_memory_stats() { detail::CpuCachingAllocator::instance().reset_peak(); }
inline void set_cache_limit(size_t bytes) { detail::CpuCachingAllocator::instance().set_cache_limit(bytes); }

// A block of memory shared by every tensor that views it. Either owned (from the caching allocator)
// or borrowed from the user (from_blob), with an optional deleter.
class Storage {
 public:
  // Allocates nbytes (uninitialized). Throws OutOfMemoryError before anything is written.
  explicit KILN_DECL Storage(size_t nbytes);
  // Memory the caller owns (released by deleter, when given), on `device` (CUDA memory from the CUDA backend).
  Storage(void* user_data, size_t nbytes, std::function<void(void*)> deleter, Device device = kCPU)
      : data_(user_data), nbytes_(nbytes), deleter_(std::move(deleter)), borrowed_(true), device_(device) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  KILN_DECL ~Storage();

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // The version counter shared by all views of this storage; in-place writes bump it. An inference
  // storage has none (it stays 0), so it may be written in place only inside InferenceMode, where nothing
  // can have saved it for a backward.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  KILN_DECL void bump_version();
  bool is_inference() const { return inference_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0, block_ = 0;
  std::function<void(void*)> deleter_;
  bool borrowed_ = false;
  Device device_;
  bool inference_ = detail::inference_mode_flag();
  std::atomic<uint64_t> version_{0};
};


#if KILN_HEADER_DEFINITIONS
KILN_DECL void* detail::CpuCachingAllocator::allocate(size_t nbytes, size_t& block) {
  block = size_class(nbytes);
  allocations_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(block);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= block;
      cache_hits_.fetch_add(1, std::memory_order_relaxed);
      note_in_use(block);
      return p;
    }
  }
  void* p = ::operator new(block, std::align_val_t(kAlignment), std::nothrow);
  if (!p) {
    empty_cache();
    p = ::operator new(block, std::align_val_t(kAlignment), std::nothrow);
  }
  if (!p)
    throw OutOfMemoryError(detail::cat("kiln: cannot allocate ", nbytes, " bytes on the CPU (",
                                       stats().bytes_in_use, " bytes in use)"));
  system_allocations_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  note_in_use(block);
  return p;
}

KILN_DECL void detail::CpuCachingAllocator::release(void* p, size_t block) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_ -= block;
  if (cached_ + block > cache_limit_) {
    ::operator delete(p, std::align_val_t(kAlignment));
    return;
  }
  free_[block].push_back(p);
  cached_ += block;
}

KILN_DECL void detail::CpuCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) ::operator delete(p, std::align_val_t(kAlignment));
  free_.clear();
  cached_ = 0;
}

KILN_DECL Storage::Storage(size_t nbytes) : nbytes_(nbytes) {
  if (nbytes > 0) data_ = detail::CpuCachingAllocator::instance().allocate(nbytes, block_);
}

KILN_DECL Storage::~Storage() {
  if (borrowed_) {
    if (deleter_) deleter_(data_);
  } else if (data_) {
    detail::CpuCachingAllocator::instance().release(data_, block_);
  }
}

KILN_DECL void Storage::bump_version() {
  if (inference_) {
    check<std::logic_error>(detail::inference_mode_flag(),
                            "in-place update of an inference tensor (made under InferenceMode) outside InferenceMode "
                            "is not allowed; clone() it to get a normal tensor");
    return;
  }
  version_.fetch_add(1, std::memory_order_acq_rel);
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln
