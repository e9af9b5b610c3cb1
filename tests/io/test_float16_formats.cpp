// float16 through the file formats and DLPack: safetensors "F16", .npy "<f2" (numpy's bytes for known
// values), and DLPack's kDLFloat with 16 bits, each keeping every bit pattern.
#include <doctest/doctest.h>

#include "io_test_util.hpp"
#include "kiln/dlpack.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_io_float16_formats {

using namespace kiln;

namespace {
// 1, -2, 65504, the smallest subnormal, inf, -0.
const std::vector<uint16_t> kBits = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8000};

Tensor<float16> halves() {
  Tensor<float16> t = empty<float16>({2, 3});
  for (size_t i = 0; i < kBits.size(); ++i) t.data_ptr()[i] = float16::from_bits(kBits[i]);
  return t;
}
std::vector<uint16_t> bits_of(const AnyTensor& t) {
  std::vector<uint16_t> out;
  for (float16 v : t.as<float16>().to_vector()) out.push_back(v.bits);
  return out;
}
}  // namespace

TEST_CASE("safetensors stores float16 as F16 and reads it back bit for bit") {
  const std::map<std::string, AnyTensor> tensors = {{"h", halves()}, {"h_t", halves().t()}, {"f", ones<float>({3})}};
  const io::Bytes bytes = io::serialize_safetensors(tensors, {});
  const std::string text(bytes.begin(), bytes.end());
  CHECK(text.find("\"F16\"") != std::string::npos);
  const io::SafetensorsFile parsed = io::parse_safetensors(bytes);
  CHECK(parsed.tensors.at("h").dtype() == ScalarType::Half);
  CHECK(parsed.tensors.at("h").shape() == Shape{2, 3});
  CHECK(bits_of(parsed.tensors.at("h")) == kBits);
  CHECK(bits_of(parsed.tensors.at("h_t")) == bits_of(halves().t().contiguous()));
}

TEST_CASE(".npy stores float16 as '<f2' with numpy's bytes and reads it back") {
  const io::Bytes bytes = io::serialize_npy(halves());
  const std::string text(bytes.begin(), bytes.end());
  CHECK(text.find("'descr': '<f2'") != std::string::npos);
  // numpy.array([1, -2, 65504, 2**-24, inf, -0.0], dtype='<f2').tobytes()
  const io::Bytes numpy_data = {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x7c, 0x00, 0x80};
  CHECK(io::Bytes(bytes.end() - 12, bytes.end()) == numpy_data);
  const AnyTensor back = io::parse_npy(bytes);
  CHECK(back.dtype() == ScalarType::Half);
  CHECK(bits_of(back) == kBits);
}

TEST_CASE("DLPack exchanges float16 as kDLFloat with 16 bits, without a copy") {
  const Tensor<float16> h = halves();
  DLManagedTensor* m = to_dlpack(h);
  CHECK(m->dl_tensor.dtype.code == kDLFloat);
  CHECK(m->dl_tensor.dtype.bits == 16);
  const AnyTensor back = from_dlpack(m);
  CHECK(back.dtype() == ScalarType::Half);
  CHECK(back.as<float16>().data_ptr() == h.data_ptr());
  CHECK(bits_of(back) == kBits);
}

}  // namespace test_io_float16_formats
