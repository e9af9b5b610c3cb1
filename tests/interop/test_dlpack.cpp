// DLPack in C++: round trips through both structs are zero-copy views that keep the memory alive exactly
// as long as needed, strides and dtypes survive, read-only input is copied, and what kiln cannot view is
// refused with ownership left to the caller. tests/interop/test_dlpack_numpy.py does the same with NumPy.
#include <doctest/doctest.h>

#include "kiln/dlpack.hpp"
#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_interop_dlpack {

using namespace kiln;

namespace {
// A float tensor over memory whose release is counted.
Tensor<float> counted(int& live, const Shape& shape) {
  float* data = new float[numel_of(shape)];
  for (int64_t i = 0; i < numel_of(shape); ++i) data[i] = float(i);
  ++live;
  return from_blob(data, shape, [&live](void* p) {
    delete[] static_cast<float*>(p);
    --live;
  });
}
}  // namespace

TEST_CASE("to_dlpack / from_dlpack: zero copy, strides, ownership, both structs") {
  int live = 0;
  {
    Tensor<float> t = counted(live, {2, 3});
    DLManagedTensor* m = to_dlpack(t.t());  // a transposed view: strides (1, 3)
    CHECK(m->dl_tensor.ndim == 2);
    CHECK(m->dl_tensor.shape[0] == 3);
    CHECK(m->dl_tensor.strides[0] == 1);
    CHECK(m->dl_tensor.strides[1] == 3);
    CHECK(m->dl_tensor.dtype.code == kDLFloat);
    CHECK(m->dl_tensor.dtype.bits == 32);
    CHECK(m->dl_tensor.device.device_type == kDLCPU);
    t = Tensor<float>();  // the export alone keeps the memory
    CHECK(live == 1);
    AnyTensor back = from_dlpack(m);
    const Tensor<float> b = back.as<float>();
    CHECK(b.shape() == Shape{3, 2});
    CHECK(b[2][1].item() == 5.0f);  // element (1, 2) of the original
    b[0][1] = 7.0f;                 // a view: writes land in the original memory
    CHECK(static_cast<float*>(m->dl_tensor.data)[3] == 7.0f);
    back = AnyTensor();
    CHECK(live == 1);  // b still views it
  }
  CHECK(live == 0);

  Tensor<float> t = counted(live, {4});
  DLManagedTensorVersioned* v = to_dlpack_versioned(t, /*read_only=*/true);
  CHECK(v->version.major == 1);
  CHECK(v->flags == DLPACK_FLAG_BITMASK_READ_ONLY);
  // A read-only tensor is copied, and the producer's memory released at once.
  const AnyTensor copy = from_dlpack(v);
  CHECK(copy.impl_ptr()->storage->data() != t.data_ptr());
  CHECK(copy.as<float>()[3].item() == 3.0f);
  DLManagedTensorVersioned* w = to_dlpack_versioned(t);
  const Tensor<float> view = from_dlpack(w).as<float>();
  CHECK(view.data_ptr() == t.data_ptr());
  t = Tensor<float>();
  CHECK(live == 1);
}

TEST_CASE("from_dlpack: every kiln dtype, 0-d and empty tensors, negative strides, byte offsets") {
  CHECK(from_dlpack(to_dlpack(tensor<int64_t>({1, 2}))).dtype() == ScalarType::Int64);
  CHECK(from_dlpack(to_dlpack(tensor<int32_t>({1}))).dtype() == ScalarType::Int32);
  CHECK(from_dlpack(to_dlpack(tensor<double>({1}))).dtype() == ScalarType::Double);
  CHECK(from_dlpack(to_dlpack(ones<bfloat16>({2}))).dtype() == ScalarType::BFloat16);
  CHECK(from_dlpack(to_dlpack(ones<bool>({2}))).dtype() == ScalarType::Bool);
  CHECK(from_dlpack(to_dlpack(full<float>({}, 2.5f))).as<float>().item() == 2.5f);
  CHECK(from_dlpack(to_dlpack(empty<float>({0, 3}))).as<float>().shape() == Shape{0, 3});

  // A producer's view with a negative stride and a byte offset (as NumPy's a[::-1] may be).
  static double values[] = {0, 1, 2, 3, 4};
  static int64_t shape[] = {3}, strides[] = {-2};
  static int released = 0;
  DLManagedTensor m{};
  m.dl_tensor = {values, {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, shape, strides, 4 * sizeof(double)};
  m.deleter = [](DLManagedTensor*) { ++released; };
  {
    const Tensor<double> r = from_dlpack(&m).as<double>();
    CHECK(r[0].item() == 4);
    CHECK(r[1].item() == 2);
    CHECK(r[2].item() == 0);
  }
  CHECK(released == 1);
}

TEST_CASE("from_dlpack refuses what kiln cannot view, and leaves ownership with the caller") {
  float data[4] = {};
  int64_t shape[] = {4};
  static int released = 0;
  auto managed = [&](DLDevice device, DLDataType dtype) {
    DLManagedTensor m{};
    m.dl_tensor = {data, device, 1, dtype, shape, nullptr, 0};
    m.deleter = [](DLManagedTensor*) { ++released; };
    return m;
  };
  DLManagedTensor gpu = managed({kDLCUDA, 0}, {kDLFloat, 32, 1});
  CHECK_THROWS_WITH_AS(from_dlpack(&gpu), doctest::Contains("only CPU memory"), std::invalid_argument);
  DLManagedTensor complex = managed({kDLCPU, 0}, {kDLComplex, 64, 1});
  CHECK_THROWS_WITH_AS(from_dlpack(&complex), doctest::Contains("no kiln dtype for DLPack dtype code 5"),
                       std::invalid_argument);
  DLManagedTensor vector = managed({kDLCPU, 0}, {kDLFloat, 32, 4});
  CHECK_THROWS_WITH_AS(from_dlpack(&vector), doctest::Contains("4 lanes"), std::invalid_argument);
  DLManagedTensor uint8 = managed({kDLCPU, 0}, {kDLUInt, 8, 1});
  CHECK_THROWS_AS(from_dlpack(&uint8), std::invalid_argument);
  CHECK(released == 0);
  DLManagedTensorVersioned future{};
  future.version = {2, 0};
  CHECK_THROWS_WITH_AS(from_dlpack(&future), doctest::Contains("ABI version 2.0"), std::invalid_argument);
}

}  // namespace test_interop_dlpack
