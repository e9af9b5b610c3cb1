#pragma once
// PyTorch's reference values for the nn tests: tests/fixtures/nn/<file> (written by scripts/*_reference.py), read
// once per file, and an element-by-element comparison with them.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kiln/io/safetensors.hpp"
#include "kiln/kiln.hpp"

// The directory holding the fixtures: the build defines it; running from the repository root works without.
#ifndef KILN_TEST_DATA_DIR
#define KILN_TEST_DATA_DIR "tests/fixtures"
#endif

namespace kiln::test {

// The float64 entry `key` of tests/fixtures/nn/<file>, a copy of its own (tests mark their inputs as requiring grad).
inline Tensor<double> torch_entry(const std::string& file, const std::string& key) {
  static std::map<std::string, std::map<std::string, AnyTensor>> files;
  auto it = files.find(file);
  if (it == files.end())
    it = files.emplace(file, io::load_safetensors(std::filesystem::path(KILN_TEST_DATA_DIR) / "nn" / file)).first;
  return it->second.at(key).as<double>().clone();
}

// got equals want within tol * (1 + |want|) element by element; the first three misses are reported.
template <class T>
void expect_close_to_torch(const Tensor<T>& got, const Tensor<double>& want, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  const std::vector<T> g = got.contiguous().to_vector();
  const std::vector<double> w = want.contiguous().to_vector();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(double(g[i]) - w[i]) <= tol * (1 + std::abs(w[i]))) && ++bad <= 3) {
      INFO("element ", i, ": ", double(g[i]), ", PyTorch gives ", w[i]);
      CHECK(false);
    }
  CHECK(bad == 0);
}

}  // namespace kiln::test
