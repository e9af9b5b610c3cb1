// Storage, the caching allocator and the errors raised before anything is written.
#include <doctest/doctest.h>

#include "kiln/tensor/device_copy.hpp"
#include "kiln/tensor/factory.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_core_storage {

using namespace kiln;

TEST_CASE("size classes are 2^k and 1.5 * 2^k, never smaller than the request") {
  using A = detail::CpuCachingAllocator;
  for (size_t n : {1, 63, 64, 65, 96, 97, 128, 129, 1000, 4096, 4097, 1 << 20, (1 << 20) + 1}) {
    const size_t c = A::size_class(n);
    CHECK(c >= n);
    CHECK(c <= std::max<size_t>(64, n + n / 2 + 1));
  }
  CHECK(A::size_class(65) == 96);
  CHECK(A::size_class(97) == 128);
  CHECK(A::size_class(4097) == 6144);
}

TEST_CASE("freed storage is reused from the cache; empty_cache returns it") {
  const MemoryStats s0 = memory_stats();
  { Tensor<float> t = empty<float>({12345}); }
  const MemoryStats s1 = memory_stats();
  CHECK(s1.bytes_cached >= 12345 * 4);
  CHECK(s1.bytes_in_use == s0.bytes_in_use);
  { Tensor<float> t = empty<float>({12300}); }  // same size class (65536 bytes)
  const MemoryStats s2 = memory_stats();
  CHECK(s2.cache_hits == s1.cache_hits + 1);
  CHECK(s2.system_allocations == s1.system_allocations);
  empty_cache();
  CHECK(memory_stats().bytes_cached == 0);
  Tensor<double> live = zeros<double>({1000});
  CHECK(memory_stats().bytes_in_use >= 8000);
  CHECK(memory_stats().peak_bytes_in_use >= memory_stats().bytes_in_use);
}

TEST_CASE("sizes that overflow or cannot be allocated throw before anything is written") {
  CHECK_THROWS_AS(empty<float>({int64_t(1) << 40, int64_t(1) << 40}), OutOfMemoryError);
  CHECK_THROWS_AS(empty<double>({int64_t(1) << 61}), OutOfMemoryError);
  CHECK_THROWS_AS(empty<float>({int64_t(1) << 46}), OutOfMemoryError);  // 256 TiB
  CHECK_THROWS_AS(empty<float>({3, -1}), ShapeError);
  const MemoryStats s = memory_stats();
  CHECK_THROWS_AS(zeros<float>({int64_t(1) << 46}), OutOfMemoryError);
  CHECK(memory_stats().bytes_in_use == s.bytes_in_use);
}

TEST_CASE("from_blob views user memory without copying and calls the deleter once") {
  std::vector<float> data(12);
  for (int i = 0; i < 12; ++i) data[i] = float(i);
  int deleted = 0;
  {
    Tensor<float> t = from_blob(data.data(), {3, 4}, [&](void* p) {
      CHECK(p == data.data());
      ++deleted;
    });
    CHECK(t.data_ptr() == data.data());
    Tensor<float> col = t.select(1, 2);
    t.fill_(1);
    CHECK(data[5] == 1);
    t = Tensor<float>();  // the view still holds the storage
    CHECK(deleted == 0);
    CHECK(col.to_vector() == std::vector<float>{1, 1, 1});
  }
  CHECK(deleted == 1);
  Tensor<float> strided = from_blob(data.data(), {2, 3}, {1, 4});  // a transposed layout
  data[4] = 42;
  CHECK(strided.to_vector()[1] == 42);
  CHECK_THROWS_AS(from_blob(data.data(), {2, 3}, {1}), ShapeError);
}

TEST_CASE("metadata errors name the op and the sizes") {
  Tensor<float> t = zeros<float>({2, 3});
  CHECK_THROWS_WITH_AS(t.size(2), "size: dim 2 is out of range for a tensor of 2 dims (expected in [-2, 1])",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(t.select(1, 3), "select: index 3 is out of range for dim 1 of size 3", std::out_of_range);
  CHECK_THROWS_AS(t.item(), std::invalid_argument);
  CHECK_THROWS_AS(Tensor<float>().numel(), std::logic_error);
}

TEST_CASE("devices: kiln::Device as libtorch's, and a CUDA tensor without the CUDA backend refused with the reason") {
  CHECK(Device().is_cpu());
  CHECK(Device(kCUDA).index() == 0);
  CHECK(Device(kCUDA, 2).str() == "cuda:2");
  CHECK(Device(kCPU).str() == "cpu");
  CHECK(Device(kCUDA, 1) != Device(kCUDA, 0));
  CHECK_THROWS_AS(Device(kCPU, 1), std::invalid_argument);
  const Tensor<float> t = zeros<float>({2, 3});
  CHECK(t.device() == Device(kCPU));
  CHECK(t.is_cpu());
  CHECK(t.cpu().is_same(t));
  // (This executable does not include <kiln/cuda.hpp>.)
  CHECK_THROWS_WITH_AS(t.cuda(), "Tensor::to(cuda:0): CUDA tensors need kiln's CUDA backend, which this program does not "
                                 "include (#include <kiln/cuda.hpp>)",
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(t.to(Device(kCUDA, 1)), doctest::Contains("Tensor::to(cuda:1)"), std::runtime_error);
  // Memory that claims to be a device's is never read by CPU code.
  float x[6] = {};
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(x, sizeof x, nullptr, Device(kCUDA, 0));
  impl->shape = {2, 3};
  impl->strides = {3, 1};
  const Tensor<float> on_device(impl);
  CHECK(on_device.is_cuda());
  CHECK_THROWS_WITH_AS(on_device.data_ptr(), "kiln: a float32 tensor of shape [2, 3] on cuda:0 reached code that runs on "
                                             "the CPU: this op has no CUDA path yet (copy the tensor with .cpu() first)",
                       std::runtime_error);
  // to_vector copies from the device, which takes the backend this program lacks.
  CHECK_THROWS_WITH_AS(on_device.to_vector(), doctest::Contains("CUDA tensors need kiln's CUDA backend"),
                       std::runtime_error);
}

}  // namespace test_core_storage
