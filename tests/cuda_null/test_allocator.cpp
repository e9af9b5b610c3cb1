// The caching allocator's logic (cuda/allocator.hpp) on a host-memory stand-in for the device: reuse, rounding,
// streams, record_stream, out-of-memory retry and error, statistics.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>

#include "kiln/cuda/allocator.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_null_allocator {

using namespace kiln;
using cuda::CachingAllocator;

namespace {

// Host memory with a capacity, and events the test completes by hand.
struct FakeDevice : cuda::DeviceMemory {
  size_t capacity;
  size_t used = 0;
  std::map<void*, size_t> blocks;
  std::map<uintptr_t, bool> events;
  uintptr_t next_event = 1;

  explicit FakeDevice(size_t cap = size_t(1) << 30) : capacity(cap) {}
  // Blocks a test left live (the allocator never frees those).
  ~FakeDevice() override {
    for (auto& [p, n] : blocks) std::free(p);
  }
  void* allocate(size_t bytes) override {
    if (used + bytes > capacity) return nullptr;
    void* p = std::malloc(bytes);
    blocks[p] = bytes;
    used += bytes;
    return p;
  }
  void free(void* p) override {
    used -= blocks.at(p);
    blocks.erase(p);
    std::free(p);
  }
  uintptr_t record_event(cuda::StreamId) override {
    events[next_event] = false;
    return next_event++;
  }
  bool done(uintptr_t e) override { return events.at(e); }
  void release(uintptr_t e) override { events.erase(e); }
  void complete_all() {
    for (auto& [e, d] : events) d = true;
  }
};

}  // namespace

TEST_CASE("sizes round to 512 bytes, and above 1 MiB to an eighth of the next power of two") {
  CHECK(CachingAllocator::round_size(0) == 512);
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size((1 << 20) - 1) == 1 << 20);
  CHECK(CachingAllocator::round_size(1 << 20) == 1 << 20);
  CHECK(CachingAllocator::round_size((1 << 20) + 1) == (1 << 20) + (1 << 18));  // 1.25 MiB
  CHECK(CachingAllocator::round_size(100'000'000) == 6 * (size_t(16) << 20));  // 128 MiB / 8: 16 MiB steps
}

TEST_CASE("a warm training step allocates nothing from the device") {
  FakeDevice dev;
  {
    CachingAllocator alloc(dev, "cuda:0");
    const std::vector<size_t> step = {4096, 1 << 20, 300, 3 << 20, 4096, 77777};
    for (int iter = 0; iter < 10; ++iter) {
      std::vector<void*> held;
      for (size_t s : step) held.push_back(alloc.allocate(s));
      for (void* p : held) alloc.free(p);
      if (iter == 0) CHECK(alloc.stats().device_allocations == int64_t(step.size()));
    }
    CHECK(alloc.stats().device_allocations == int64_t(step.size()));
    CHECK(alloc.stats().cache_hits == 9 * int64_t(step.size()));
    CHECK(alloc.memory_allocated() == 0);
    CHECK(alloc.memory_reserved() == dev.used);
  }
  CHECK(dev.blocks.empty());  // the destructor gave the cache back
}

TEST_CASE("a block is reused for a request of about its size, not a much smaller one") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* a = alloc.allocate(10'000);
  alloc.free(a);
  CHECK(alloc.allocate(9'000) == a);  // rounds to 9216, the block is 10240: within 5/4
  alloc.free(a);
  void* b = alloc.allocate(4'000);  // 4096: a 10240 block would waste 60%
  CHECK(b != a);
  CHECK(alloc.memory_allocated() == 4096);
  CHECK(alloc.memory_reserved() == 4096 + 10240);
}

TEST_CASE("streams: a block freed on one stream serves that stream, not another") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* a = alloc.allocate(2048, 1);
  alloc.free(a);
  void* b = alloc.allocate(2048, 2);
  CHECK(b != a);
  CHECK(alloc.allocate(2048, 1) == a);
  CHECK(alloc.stats().device_allocations == 2);
}

TEST_CASE("record_stream: a block used on another stream waits for that stream after its free") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* a = alloc.allocate(2048, 1);
  alloc.record_stream(a, 2);
  alloc.record_stream(a, 2);  // once is enough
  alloc.record_stream(a, 1);  // its own stream: nothing to wait for
  alloc.free(a);
  CHECK(dev.events.size() == 1);
  void* b = alloc.allocate(2048, 1);  // stream 2 may still read a
  CHECK(b != a);
  alloc.free(b);
  dev.complete_all();
  std::vector<void*> got = {alloc.allocate(2048, 1), alloc.allocate(2048, 1)};
  CHECK((got[0] == a || got[1] == a));
  CHECK(dev.events.empty());  // released once passed
  CHECK(alloc.stats().device_allocations == 2);
}

TEST_CASE("out of memory frees the cache and retries once, then throws naming the request") {
  FakeDevice dev(10 << 10);
  CachingAllocator alloc(dev, "cuda:3");
  alloc.free(alloc.allocate(6 << 10));                // 6 KiB cached
  void* big = alloc.allocate(8 << 10);               // 6 + 8 > 10: the cache goes, then it fits
  CHECK(big != nullptr);
  CHECK(alloc.stats().oom_retries == 1);
  CHECK(alloc.stats().device_frees == 1);
  CHECK(alloc.memory_reserved() == 8 << 10);
  CHECK_THROWS_WITH_AS(alloc.allocate(4 << 10),
                       doctest::Contains("out of memory on cuda:3: 4096 bytes (0.00390625 MiB) requested; kiln holds "
                                         "0.0078125 MiB in live tensors"),
                       OutOfMemoryError);
  CHECK(alloc.memory_allocated() == 8 << 10);  // nothing changed by the failure
  alloc.free(big);
}

TEST_CASE("statistics: allocated, its peak, reserved, empty_cache") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(3000);
  CHECK(alloc.memory_allocated() == 1024 + 3072);
  alloc.free(b);
  CHECK(alloc.memory_allocated() == 1024);
  CHECK(alloc.max_memory_allocated() == 4096);
  CHECK(alloc.memory_reserved() == 4096);
  alloc.reset_peak_memory_stats();
  CHECK(alloc.max_memory_allocated() == 1024);
  alloc.empty_cache();
  CHECK(alloc.memory_reserved() == 1024);
  CHECK(dev.used == 1024);
  alloc.free(a);
}

TEST_CASE("freeing what the allocator did not hand out is an error, not corruption") {
  FakeDevice dev;
  CachingAllocator alloc(dev, "cuda:0");
  int x = 0;
  CHECK_THROWS_WITH_AS(alloc.free(&x), doctest::Contains("did not hand out"), std::invalid_argument);
  void* a = alloc.allocate(100);
  alloc.free(a);
  CHECK_THROWS_AS(alloc.free(a), std::invalid_argument);  // a double free
  CHECK_THROWS_AS(alloc.record_stream(a, 2), std::invalid_argument);
  alloc.free(nullptr);  // as std::free
}

}  // namespace test_cuda_null_allocator
