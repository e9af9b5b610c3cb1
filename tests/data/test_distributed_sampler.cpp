// kiln::data::DistributedSampler: PyTorch's partition (checked against orders written out by hand from
// torch's algorithm), the coverage and padding properties over many sizes, shuffling by epoch, and its use as
// the DataLoader's sampler.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "kiln/data.hpp"
#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_data_distributed_sampler {

using namespace kiln;
using namespace kiln::data;

namespace {
using Idx = std::vector<int64_t>;

std::vector<Idx> all_ranks(int64_t n, int64_t replicas, bool shuffle, bool drop_last, uint64_t seed = 5,
                           int64_t epoch = 0) {
  std::vector<Idx> out;
  for (int64_t r = 0; r < replicas; ++r) out.push_back(DistributedSampler(replicas, r, shuffle, drop_last).indices(n, seed, epoch));
  return out;
}
}  // namespace

TEST_CASE("DistributedSampler: torch's partition without shuffle, written out by hand") {
  // 10 samples on 3 replicas: padded to 12 with 0, 1; rank r takes positions r, r + 3, ...
  CHECK(all_ranks(10, 3, false, false) == std::vector<Idx>{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}});
  // drop_last: cut to 9.
  CHECK(all_ranks(10, 3, false, true) == std::vector<Idx>{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}});
  // 2 samples on 5 replicas: the padding repeats the dataset more than once ([0, 1, 0, 1, 0]).
  CHECK(all_ranks(2, 5, false, false) == std::vector<Idx>{{0}, {1}, {0}, {1}, {0}});
  CHECK(all_ranks(2, 5, false, true) == std::vector<Idx>(5));
  CHECK(all_ranks(0, 2, false, false) == std::vector<Idx>(2));
  CHECK(DistributedSampler(4, 1, true, false).size(10) == 3);
  CHECK(DistributedSampler(4, 1, true, true).size(10) == 2);
}

TEST_CASE("DistributedSampler: equal sizes, every index covered, padding only as needed, disjoint with drop_last") {
  for (const int64_t n : {1, 2, 5, 7, 12, 13, 100})
    for (const int64_t replicas : {1, 2, 3, 4, 8})
      for (const bool shuffle : {false, true})
        for (const bool drop_last : {false, true}) {
          CAPTURE(n);
          CAPTURE(replicas);
          CAPTURE(shuffle);
          CAPTURE(drop_last);
          const std::vector<Idx> parts = all_ranks(n, replicas, shuffle, drop_last);
          const int64_t per = drop_last ? n / replicas : (n + replicas - 1) / replicas;
          std::map<int64_t, int64_t> count;
          for (const Idx& p : parts) {
            CHECK(int64_t(p.size()) == per);
            for (const int64_t i : p) {
              CHECK((i >= 0 && i < n));
              ++count[i];
            }
          }
          if (drop_last) {
            CHECK(int64_t(count.size()) == per * replicas);  // all distinct
            for (auto& [i, c] : count) CHECK(c == 1);
          } else {
            CHECK(int64_t(count.size()) == n);  // every index at least once
            int64_t extra = 0;
            for (auto& [i, c] : count) extra += c - 1;
            CHECK(extra == per * replicas - n);
          }
        }
}

TEST_CASE("DistributedSampler: the shuffle follows seed and epoch; one replica is the DataLoader's own shuffle") {
  const Idx e0 = DistributedSampler(2, 0).indices(100, 7, 0);
  CHECK(e0 == DistributedSampler(2, 0).indices(100, 7, 0));
  CHECK(e0 != DistributedSampler(2, 0).indices(100, 7, 1));
  CHECK(e0 != DistributedSampler(2, 0).indices(100, 8, 0));
  Idx sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted != e0);

  TensorDataset<> ds(zeros<float>({23, 1}), arange<int64_t>(0, 23));
  DataLoader plain(ds, {.batch_size = 23, .shuffle = true, .seed = 3});
  plain.set_epoch(4);
  const Idx loader_order = (*plain.begin()).target.to_vector();
  CHECK(DistributedSampler(1, 0).indices(23, 3, 4) == loader_order);
}

TEST_CASE("DataLoader with a DistributedSampler: each rank's batches, sizes, epochs and errors") {
  TensorDataset<> ds(zeros<float>({11, 2}), arange<int64_t>(0, 11));
  for (const bool drop_last : {false, true}) {
    std::vector<int64_t> seen;
    for (int64_t r = 0; r < 3; ++r) {
      auto sampler = std::make_shared<DistributedSampler>(3, r, true, drop_last);
      DataLoader loader(ds, {.batch_size = 2, .num_workers = int(r % 2), .seed = 9, .sampler = sampler});
      loader.set_epoch(2);
      CHECK(loader.size() == 2);  // 4 (or, with drop_last, 3) samples per rank in batches of 2
      Idx got;
      for (auto& batch : loader)
        for (const int64_t t : batch.target.to_vector()) got.push_back(t);
      CHECK(got == sampler->indices(11, 9, 2));
      CHECK(loader.epoch() == 3);
      seen.insert(seen.end(), got.begin(), got.end());
    }
    std::sort(seen.begin(), seen.end());
    CHECK(int64_t(std::unique(seen.begin(), seen.end()) - seen.begin()) == (drop_last ? 9 : 11));
  }
  CHECK_THROWS_WITH_AS(DataLoader(ds, {.shuffle = true, .sampler = std::make_shared<DistributedSampler>(2, 0)}),
                       doctest::Contains("DataLoader: shuffle must be false with a sampler"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(DistributedSampler(2, 2), "DistributedSampler: rank 2 is not in [0, 2)", std::invalid_argument);
  CHECK_THROWS_AS(DistributedSampler(0, 0), std::invalid_argument);
}

}  // namespace test_data_distributed_sampler
