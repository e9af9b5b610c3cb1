#pragma once
// The caching allocator of device memory (torch.cuda's): freed blocks stay reserved and serve later requests
// of about their size on the same stream, so a training step, once warm, never calls the driver's allocator.
//
// - Sizes round up to 512 bytes below 1 MiB and to an eighth of the next power of two from there; a request
//   takes the smallest free block of its stream that is at least its size and at most 5/4 of it (no
//   splitting: a block is one device allocation).
// - Stream-aware: a block freed on stream S is reused by S at once (stream order makes that safe). A block
//   also used on other streams (record_stream) waits, after its free, until an event recorded on each of
//   them has completed.
// - Out of memory: the cache is freed and the request retried once; then OutOfMemoryError names the request,
//   the device, and what kiln holds in live tensors and in the cache.
// - Statistics as torch.cuda: memory_allocated() (bytes of live blocks), max_memory_allocated() (its peak
//   since the last reset_peak_memory_stats()), memory_reserved() (live + cached), empty_cache().
//
// The device calls are a DeviceMemory (cuMemAlloc/cuMemFree and events on a GPU); the tests drive the logic
// with a host-memory one.
#include <bit>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/core/error.hpp"
#include "kiln/cuda/current_stream.hpp"

namespace kiln::cuda {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // A new allocation of `bytes`, or nullptr when the device has no room.
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  // An event recorded on `stream` now; done(event) says whether the stream has passed it; release(event) frees it.
  virtual uintptr_t record_event(StreamId stream) = 0;
  virtual bool done(uintptr_t event) = 0;
  virtual void release(uintptr_t event) = 0;
};

class CachingAllocator {
 public:
  struct Stats {
    int64_t device_allocations = 0;  // calls that reached DeviceMemory::allocate (and succeeded)
    int64_t device_frees = 0;
    int64_t cache_hits = 0;
    int64_t oom_retries = 0;         // requests that freed the cache and tried again
  };

  static constexpr size_t kSmallLimit = size_t(1) << 20;
  static constexpr size_t kSmallRound = 512;

  CachingAllocator(DeviceMemory& device, std::string device_name) : device_(device), name_(std::move(device_name)) {}
  ~CachingAllocator() {
    // Live blocks belong to tensors that outlive the allocator only at exit; the cache goes back now.
    for (Pending& p : pending_) {
      for (uintptr_t e : p.events) device_.release(e);
      cached_[p.stream].emplace(p.size, p.ptr);
    }
    release_cached();
  }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // 512-byte steps below 1 MiB; above, an eighth of the next power of two (at most 12.5% more).
  static size_t round_size(size_t bytes) {
    const size_t unit = bytes < kSmallLimit ? kSmallRound : std::bit_ceil(bytes) / 8;
    return bytes == 0 ? unit : (bytes + unit - 1) / unit * unit;
  }

  // A block of at least `bytes` for use on `stream`.
  void* allocate(size_t bytes, StreamId stream = 0) {
    std::lock_guard lock(mutex_);
    size_t size = round_size(bytes);
    process_pending();
    void* p = take_cached(size, stream);
    if (p) {
      ++stats_.cache_hits;
    } else {
      p = device_.allocate(size);
      if (!p) {
        ++stats_.oom_retries;
        release_cached();
        p = device_.allocate(size);
      }
      if (!p)
        throw OutOfMemoryError(kiln::detail::cat("kiln::cuda: out of memory on ", name_, ": ", bytes, " bytes (",
                                                 mib(size), " MiB) requested; kiln holds ", mib(allocated_),
                                                 " MiB in live tensors and had ", mib(reserved_ - allocated_),
                                                 " MiB cached (freed and retried)"));
      ++stats_.device_allocations;
      reserved_ += size;
    }
    live_.emplace(p, Block{size, stream, {}});
    allocated_ += size;
    peak_ = std::max(peak_, allocated_);
    return p;
  }

  // Returns a block to the cache (to its stream's bin, or to wait for the other streams that used it).
  void free(void* p) {
    if (!p) return;
    std::lock_guard lock(mutex_);
    const auto it = live_.find(p);
    check<std::invalid_argument>(it != live_.end(), "kiln::cuda: free of ", p, ", which ", name_,
                                 "'s allocator did not hand out (or was freed already)");
    Block block = it->second;
    live_.erase(it);
    allocated_ -= block.size;
    if (block.other_streams.empty()) {
      cached_[block.stream].emplace(block.size, p);
      return;
    }
    Pending pending{p, block.size, block.stream, {}};
    for (StreamId s : block.other_streams) pending.events.push_back(device_.record_event(s));
    pending_.push_back(std::move(pending));
  }

  // torch's Tensor.record_stream: the block at p is used on `stream` too.
  void record_stream(void* p, StreamId stream) {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(p);
    check<std::invalid_argument>(it != live_.end(), "kiln::cuda: record_stream of ", p, ", which is not a live block");
    if (stream == it->second.stream) return;
    for (StreamId s : it->second.other_streams)
      if (s == stream) return;
    it->second.other_streams.push_back(stream);
  }

  // Frees every cached block (blocks still waiting for other streams stay until their events complete).
  void empty_cache() {
    std::lock_guard lock(mutex_);
    process_pending();
    release_cached();
  }

  size_t memory_allocated() const {
    std::lock_guard lock(mutex_);
    return allocated_;
  }
  size_t max_memory_allocated() const {
    std::lock_guard lock(mutex_);
    return peak_;
  }
  size_t memory_reserved() const {
    std::lock_guard lock(mutex_);
    return reserved_;
  }
  void reset_peak_memory_stats() {
    std::lock_guard lock(mutex_);
    peak_ = allocated_;
  }
  Stats stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
  }

 private:
  struct Block {
    size_t size;
    StreamId stream;
    std::vector<StreamId> other_streams;
  };
  struct Pending {
    void* ptr;
    size_t size;
    StreamId stream;
    std::vector<uintptr_t> events;
  };

  static double mib(size_t bytes) { return double(bytes) / double(1 << 20); }

  // The smallest cached block of `stream` between size and 5/4 of it; size becomes the block's own.
  void* take_cached(size_t& size, StreamId stream) {
    auto bin = cached_.find(stream);
    if (bin == cached_.end()) return nullptr;
    const auto it = bin->second.lower_bound(size);
    if (it == bin->second.end() || it->first > size / 4 * 5) return nullptr;
    void* p = it->second;
    size = it->first;
    bin->second.erase(it);
    return p;
  }

  // Moves blocks whose other streams have passed their events into their stream's bin.
  void process_pending() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool all_done = true;
      for (uintptr_t e : it->events) all_done = all_done && device_.done(e);
      if (!all_done) {
        ++it;
        continue;
      }
      for (uintptr_t e : it->events) device_.release(e);
      cached_[it->stream].emplace(it->size, it->ptr);
      it = pending_.erase(it);
    }
  }

  void release_cached() {
    for (auto& [stream, bin] : cached_)
      for (auto& [size, p] : bin) {
        device_.free(p);
        reserved_ -= size;
        ++stats_.device_frees;
      }
    cached_.clear();
  }

  DeviceMemory& device_;
  std::string name_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::map<StreamId, std::multimap<size_t, void*>> cached_;
  std::vector<Pending> pending_;
  size_t allocated_ = 0, reserved_ = 0, peak_ = 0;
  Stats stats_;
};

}  // namespace kiln::cuda
