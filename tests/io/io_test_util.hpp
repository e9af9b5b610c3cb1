#pragma once
// Helpers shared by the io tests: a scratch directory, byte builders, the reference files under tests/fixtures/io
// and the values scripts/safetensors_interop.py wrote into them.
#include <unistd.h>

#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/io.hpp"
#include "kiln/kiln.hpp"

// The directory holding io/: the build defines it; running from the repository root works without.
#ifndef KILN_TEST_DATA_DIR
#define KILN_TEST_DATA_DIR "tests/fixtures"
#endif

namespace kiln::test {

inline std::filesystem::path io_data(const std::string& name) {
  return std::filesystem::path(KILN_TEST_DATA_DIR) / "io" / name;
}

// A fresh directory under the system's temporary directory, removed with its content at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    static int count = 0;
    path_ = std::filesystem::temp_directory_path() / detail::cat("kiln_io_test_", ::getpid(), "_", count++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // The names in the directory, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) out.push_back(entry.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

inline io::Bytes bytes_of(std::string_view s) { return io::Bytes(s.begin(), s.end()); }

inline io::Bytes concat(io::Bytes a, const io::Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Whether a and b have the same dtype, shape and element bytes.
inline bool same_tensor(const AnyTensor& a, const AnyTensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const AnyTensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

inline bool same_tensors(const std::map<std::string, AnyTensor>& a, const std::map<std::string, AnyTensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a)
    if (!b.contains(name) || !same_tensor(t, b.at(name))) return false;
  return true;
}

inline Tensor<bfloat16> bfloat16_from_bits(const std::vector<uint16_t>& bits) {
  std::vector<bfloat16> values;
  for (const uint16_t b : bits) values.push_back(bfloat16::from_bits(b));
  return tensor(values);
}

// The tensors of reference.safetensors (scripts/safetensors_interop.py, reference_tensors and BF16_BITS).
inline std::map<std::string, AnyTensor> reference_tensors() {
  return {
      {"f32", tensor<float>({{-1.0f, -0.5f, 0.0f}, {0.5f, 1.0f, 1.5f}})},
      {"f64", tensor<double>({0.0, 1.0 / 3, 2.0 / 3, 1.0})},
      {"i32", tensor<int32_t>({INT32_MIN, -1, 0, 7, INT32_MAX})},
      {"i64", tensor<int64_t>({{INT64_MIN, -1, 0}, {(int64_t(1) << 40) + 3, 5, INT64_MAX}})},
      {"mask", tensor<bool>({{true, false}, {false, true}, {true, true}})},
      {"scalar", full<float>({}, 2.5f)},
      {"empty", zeros<double>({0, 3})},
      {"bf16", bfloat16_from_bits({0x3f80, 0xc000, 0x4049, 0x0001})},
  };
}

inline const std::map<std::string, std::string> kReferenceMetadata = {{"format", "kiln-test"}};

}  // namespace kiln::test
