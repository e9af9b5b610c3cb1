// kiln::data: TensorDataset, Subset and random_split; the DataLoader's batches (each index once per epoch,
// drop_last), their independence from the number of workers, epochs and seeds, exceptions from workers, leaving
// a loop early, the prefetch bound and custom collation.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data.hpp"
#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_data_dataloader {

using namespace kiln;
using namespace kiln::data;

namespace {

// n samples of shape [2, 3]: sample i holds 6i .. 6i + 5, its target is i.
TensorDataset<> indexed(int64_t n) {
  return TensorDataset(arange<float>(0, double(n * 6)).reshape({n, 2, 3}), arange<int64_t>(0, double(n)));
}

// A dataset with get only, so that the loader stacks samples. It can throw on one index, sleep in each get, and
// count its calls.
struct PerSample {
  TensorDataset<> inner;
  int64_t throw_at = -1;
  std::chrono::microseconds delay{0};
  std::shared_ptr<std::atomic<int64_t>> calls = std::make_shared<std::atomic<int64_t>>(0);

  int64_t size() const { return inner.size(); }
  Example<> get(int64_t i) const {
    ++*calls;
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (i == throw_at) throw std::runtime_error("bad sample " + std::to_string(i));
    return inner.get(i);
  }
};

static_assert(BatchDataset<TensorDataset<>>);
static_assert(Dataset<PerSample> && !BatchDataset<PerSample>);
static_assert(BatchDataset<Subset<TensorDataset<>>> && !BatchDataset<Subset<PerSample>>);

template <Dtype T>
bool same_bits(const Tensor<T>& a, const Tensor<T>& b) {
  if (!(a.shape() == b.shape())) return false;
  const Tensor<T> ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(a.numel()) * sizeof(T)) == 0;
}

template <class Loader>
std::vector<Example<>> one_epoch(Loader& loader) {
  std::vector<Example<>> batches;
  for (auto& batch : loader) batches.push_back(batch);
  return batches;
}

// The targets of all batches, in order (the dataset indices for `indexed` datasets).
std::vector<int64_t> targets_of(const std::vector<Example<>>& batches) {
  std::vector<int64_t> out;
  for (const Example<>& b : batches)
    for (const int64_t t : b.target.to_vector()) out.push_back(t);
  return out;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(size_t(n), 0);
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

}  // namespace

TEST_CASE("TensorDataset: get returns slices, get_batch selects rows, errors name the index and the size") {
  const TensorDataset<> ds = indexed(5);
  CHECK(ds.size() == 5);
  const Example<> s = ds.get(3);
  CHECK(s.data.shape() == Shape{2, 3});
  CHECK(s.data.to_vector() == std::vector<float>{18, 19, 20, 21, 22, 23});
  CHECK(s.target.item() == 3);

  const std::vector<int64_t> rows{4, 0, 4};
  const Example<> b = ds.get_batch(rows);
  CHECK(b.data.shape() == Shape{3, 2, 3});
  CHECK(b.target.to_vector() == rows);
  CHECK(same_bits(b.data[0], ds.data()[4]));
  CHECK(same_bits(b.data[1], ds.data()[0]));

  CHECK_THROWS_WITH_AS(ds.get(5), "TensorDataset: index 5 is out of range for a dataset of size 5", std::out_of_range);
  CHECK_THROWS_AS(ds.get(-1), std::out_of_range);
  const std::vector<int64_t> bad{1, 7};
  CHECK_THROWS_WITH_AS(ds.get_batch(bad), "TensorDataset: index 7 is out of range for a dataset of size 5",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(TensorDataset(zeros<float>({4, 2}), zeros<int64_t>({3})),
                       "TensorDataset: data has 4 samples (shape [4, 2]) but targets has 3 (shape [3])", ShapeError);
  CHECK_THROWS_AS(TensorDataset(zeros<float>({}), zeros<int64_t>({1})), ShapeError);
}

TEST_CASE("DataLoader: every index once per epoch, in order without shuffle; short last batch or drop_last") {
  for (const bool shuffle : {false, true})
    for (const int workers : {0, 2}) {
      CAPTURE(shuffle);
      CAPTURE(workers);
      DataLoader loader(indexed(10), {.batch_size = 4, .shuffle = shuffle, .num_workers = workers});
      CHECK(loader.size() == 3);
      CHECK(loader.epoch() == 0);
      const std::vector<Example<>> batches = one_epoch(loader);
      CHECK(loader.epoch() == 1);  // a full pass advances the epoch
      REQUIRE(batches.size() == 3);
      CHECK(batches[0].data.shape() == Shape{4, 2, 3});
      CHECK(batches[2].data.shape() == Shape{2, 2, 3});
      std::vector<int64_t> seen = targets_of(batches);
      CHECK((seen == iota(10)) == !shuffle);  // shuffled: not the identity (for this seed)
      std::sort(seen.begin(), seen.end());
      CHECK(seen == iota(10));
      // Each sample's data travels with its target.
      for (const Example<>& b : batches)
        for (int64_t k = 0; k < b.target.numel(); ++k)
          CHECK(same_bits(b.data[k], loader.dataset().data()[b.target[k].item()]));

      DataLoader dropping(indexed(10),
                          {.batch_size = 4, .shuffle = shuffle, .drop_last = true, .num_workers = workers});
      CHECK(dropping.size() == 2);
      std::vector<int64_t> kept = targets_of(one_epoch(dropping));
      CHECK(kept.size() == 8);
      std::sort(kept.begin(), kept.end());
      CHECK(std::adjacent_find(kept.begin(), kept.end()) == kept.end());
    }

  DataLoader empty_loader(indexed(0), {.batch_size = 4, .num_workers = 2});
  CHECK(empty_loader.size() == 0);
  CHECK(one_epoch(empty_loader).empty());
  CHECK(empty_loader.epoch() == 1);

  CHECK_THROWS_WITH_AS(DataLoader(indexed(3), {.batch_size = 0}), "DataLoader: batch_size must be positive, got 0",
                       std::invalid_argument);
  CHECK_THROWS_AS(DataLoader(indexed(3), {.num_workers = -1}), std::invalid_argument);
  CHECK_THROWS_AS(DataLoader(indexed(3), {.prefetch_factor = 0}), std::invalid_argument);
}

TEST_CASE("DataLoader: batches depend on seed and epoch only, not on num_workers or collation, transforms included") {
  Generator gen(5);
  const TensorDataset<> images(rand<float>({37, 1, 6, 6}, &gen), arange<int64_t>(0, 37));
  const transforms::Compose augment({transforms::RandomCrop(5, 1), transforms::RandomHorizontalFlip(),
                                     transforms::Normalize({0.5}, {0.25})});
  const auto epoch_of = [&](const auto& dataset, int workers, uint64_t seed, int64_t epoch) {
    DataLoader loader(dataset, {.batch_size = 8, .shuffle = true, .num_workers = workers, .seed = seed}, augment);
    loader.set_epoch(epoch);
    std::vector<Example<>> batches = one_epoch(loader);
    CHECK(loader.epoch() == epoch + 1);
    return batches;
  };
  const std::vector<Example<>> reference = epoch_of(images, 0, 42, 2);
  REQUIRE(reference.size() == 5);
  CHECK(reference[0].data.shape() == Shape{8, 1, 5, 5});
  CHECK(reference[4].data.shape() == Shape{5, 1, 5, 5});
  const auto same = [](const std::vector<Example<>>& a, const std::vector<Example<>>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_bits(a[i].data, b[i].data) || !same_bits(a[i].target, b[i].target)) return false;
    return true;
  };
  for (const int workers : {0, 1, 3}) {
    CAPTURE(workers);
    CHECK(same(epoch_of(images, workers, 42, 2), reference));
    // get + stack instead of get_batch: the same batches.
    CHECK(same(epoch_of(PerSample{images}, workers, 42, 2), reference));
  }
  // Another epoch or another seed: another order (and other crops and flips).
  CHECK(targets_of(epoch_of(images, 0, 42, 3)) != targets_of(reference));
  CHECK(targets_of(epoch_of(images, 0, 43, 2)) != targets_of(reference));

  // Consecutive passes are consecutive epochs; set_epoch and set_seed restore a position.
  DataLoader loader(images, {.batch_size = 8, .shuffle = true, .num_workers = 2, .seed = 7}, augment);
  const std::vector<Example<>> first = one_epoch(loader), second = one_epoch(loader);
  CHECK(loader.epoch() == 2);
  CHECK(!same(first, second));
  DataLoader resumed(images, {.batch_size = 8, .shuffle = true}, augment);
  resumed.set_seed(loader.seed());
  resumed.set_epoch(1);
  CHECK(same(one_epoch(resumed), second));
  CHECK_THROWS_AS(resumed.set_epoch(-1), std::invalid_argument);
}

TEST_CASE("DataLoader: an exception while loading is rethrown by the step that reaches its batch") {
  for (const int workers : {0, 1, 3}) {
    CAPTURE(workers);
    // Index 13 is in batch 3 of 5.
    DataLoader loader(PerSample{indexed(20), 13}, {.batch_size = 4, .num_workers = workers});
    int64_t seen = 0;
    std::string error;
    try {
      for (auto& batch : loader) {
        CHECK(batch.target[0].item() == 4 * seen);
        ++seen;
      }
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    CHECK(seen == 3);
    CHECK(error == "bad sample 13");
    CHECK(loader.epoch() == 0);  // not a full pass

    auto it = loader.begin();
    ++it;
    ++it;
    CHECK_THROWS_WITH_AS(++it, "bad sample 13", std::runtime_error);
    CHECK(it == loader.end());  // the pass is over
  }
  // A failing first batch throws from begin().
  DataLoader first(PerSample{indexed(8), 0}, {.batch_size = 4, .num_workers = 2});
  CHECK_THROWS_WITH(first.begin(), "bad sample 0");
}

TEST_CASE("DataLoader: leaving a loop early stops the workers; at most num_workers * prefetch_factor in flight") {
  const PerSample slow{indexed(400), -1, std::chrono::microseconds(200)};
  DataLoader loader(slow, {.batch_size = 2, .shuffle = true, .num_workers = 3, .prefetch_factor = 2});
  const auto start = std::chrono::steady_clock::now();
  int64_t taken = 0;
  for (auto& batch : loader) {
    CHECK(batch.data.size(0) == 2);
    if (++taken == 2) {
      // Give the workers time to fill the window: they must stop there.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      break;
    }
  }
  const int64_t calls = *slow.calls;
  CHECK(calls <= (taken + 3 * 2) * 2);  // taken batches plus a full window, 2 samples each
  CHECK(calls >= (taken + 1) * 2);
  CHECK(loader.epoch() == 0);
  // Far less than the 400 * 200 us a full epoch would take, so the workers did not run on.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));

  // Iterators destroyed while workers wait on the window or are mid-batch, many times over.
  for (int round = 0; round < 50; ++round) {
    auto it = loader.begin();
    if (round % 2) ++it;
  }
  CHECK(loader.epoch() == 0);
}

TEST_CASE("DataLoader: a custom collate makes the batch; the transform acts on its data") {
  using Batch = Example<Tensor<float>, std::vector<int64_t>>;
  const auto collate = [](std::vector<Example<>> samples) {
    Batch batch{empty<float>({int64_t(samples.size())}), {}};
    for (size_t k = 0; k < samples.size(); ++k) {
      batch.data.data_ptr()[k] = float(sum(samples[k].data).item());
      batch.target.push_back(samples[k].target.item());
    }
    return batch;
  };
  const auto doubled = [](const Tensor<float>& x, Generator&) { return Tensor<float>(x * 2.0f); };
  for (const int workers : {0, 2}) {
    DataLoader loader(indexed(5), {.batch_size = 2, .num_workers = workers}, doubled, collate);
    static_assert(std::is_same_v<decltype(loader), DataLoader<TensorDataset<>, Batch>>);
    std::vector<int64_t> targets;
    for (auto& batch : loader) {
      for (size_t k = 0; k < batch.target.size(); ++k) {
        const int64_t i = batch.target[k];
        CHECK(batch.data[int64_t(k)].item() == float(2 * (36 * i + 15)));  // 2 * (6i + ... + 6i + 5)
        targets.push_back(i);
      }
    }
    CHECK(targets == iota(5));
  }
  // Samples the default collation cannot stack need a collate.
  struct Labels {
    int64_t size() const { return 3; }
    Example<std::string, int> get(int64_t i) const { return {std::to_string(i), int(i)}; }
  };
  CHECK_THROWS_WITH_AS(DataLoader(Labels{}),
                       "DataLoader: samples other than Example<Tensor, Tensor> need a collate function",
                       std::invalid_argument);
}

TEST_CASE("Subset and random_split: sizes, disjoint cover, determinism, fractions, errors") {
  const TensorDataset<> ds = indexed(11);
  const Subset sub(ds, {4, 1, 1});
  CHECK(sub.size() == 3);
  CHECK(sub.get(0).target.item() == 4);
  const std::vector<int64_t> rows{2, 0};
  CHECK(sub.get_batch(rows).target.to_vector() == std::vector<int64_t>{1, 4});
  CHECK_THROWS_WITH_AS(sub.get(3), "Subset: index 3 is out of range for a dataset of size 3", std::out_of_range);
  CHECK_THROWS_WITH_AS(Subset(ds, {0, 11}), "Subset: index 11 is out of range for a dataset of size 11",
                       std::out_of_range);

  Generator gen(3);
  const std::vector<Subset<TensorDataset<>>> parts = random_split(ds, {3, 8}, gen);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].size() == 3);
  CHECK(parts[1].size() == 8);
  std::vector<int64_t> all = parts[0].indices();
  all.insert(all.end(), parts[1].indices().begin(), parts[1].indices().end());
  std::sort(all.begin(), all.end());
  CHECK(all == iota(11));
  CHECK(&parts[0].dataset() == &parts[1].dataset());  // one shared copy

  Generator same_seed(3), other_seed(4);
  CHECK(random_split(ds, {3, 8}, same_seed)[0].indices() == parts[0].indices());
  CHECK(random_split(ds, {3, 8}, other_seed)[0].indices() != parts[0].indices());

  // floor(11 * f) = 5, 3, 2; the remaining sample goes to the first subset.
  const auto thirds = random_split(ds, {0.5, 0.3, 0.2}, gen);
  CHECK(thirds[0].size() == 6);
  CHECK(thirds[1].size() == 3);
  CHECK(thirds[2].size() == 2);
  const std::vector<int64_t> lengths{11, 0};
  CHECK(random_split(ds, lengths, gen)[1].size() == 0);

  CHECK_THROWS_WITH_AS(random_split(ds, {3, 7}, gen),
                       "random_split: the lengths sum to 10 but the dataset has 11 samples", std::invalid_argument);
  CHECK_THROWS_WITH_AS(random_split(ds, {0.5, 0.4}, gen), "random_split: the fractions sum to 0.9, not 1",
                       std::invalid_argument);
  CHECK_THROWS_AS(random_split(ds, {12, -1}, gen), std::invalid_argument);

  // A subset loads through the dataset's get_batch, with workers too.
  DataLoader loader(parts[1], {.batch_size = 3, .num_workers = 2});
  CHECK(targets_of(one_epoch(loader)) == parts[1].indices());
}

}  // namespace test_data_dataloader
