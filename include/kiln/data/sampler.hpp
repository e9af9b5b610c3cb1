#pragma once
// Samplers: which dataset indices a DataLoader visits in an epoch, and in what order. The DataLoader's own
// order (DataLoaderOptions::shuffle) covers a single process; a Sampler in DataLoaderOptions::sampler replaces it.
//
// DistributedSampler (torch.utils.data.distributed.DistributedSampler): each of num_replicas processes reads its
// own 1/num_replicas of the dataset per epoch, the parts disjoint apart from padding:
//
//   data::DataLoader loader(dataset, {.batch_size = 32,
//       .sampler = std::make_shared<data::DistributedSampler>(pg.size(), pg.rank())});
//   for (int epoch = 0; epoch < epochs; ++epoch) for (auto& batch : loader) ...   // epoch advances the shuffle
//
// As PyTorch's: the epoch's order is a permutation of the dataset (shuffle) or the identity; without drop_last it
// is padded by repeating its beginning up to a multiple of num_replicas, with drop_last it is cut down to one;
// replica r takes positions r, r + num_replicas, ... Every replica must use the same seed and epoch (the
// loader's, which are the same on every rank unless set otherwise). The permutation is the one the DataLoader
// itself shuffles with (Philox block (seed, epoch) of its determinism notes), so one replica with shuffle
// visits exactly what DataLoader{.shuffle = true} does; it is not torch's permutation for the same seed.
#include <cstdint>
#include <numeric>
#include <vector>

#include "kiln/core/error.hpp"
#include "kiln/core/generator.hpp"
#include "kiln/tensor/random.hpp"

namespace kiln::data {

namespace detail {
// A generator seeded from the Philox block (counter, stream) under `seed` (dataloader.hpp's determinism notes).
inline Generator derived_generator(uint64_t seed, uint64_t counter, uint64_t stream) {
  const philox::Counter w = philox::block(seed, counter, stream);
  return Generator((uint64_t{w[1]} << 32) | w[0]);
}

// 0 .. n-1, or its permutation for (seed, epoch).
inline std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  if (!shuffle) {
    std::vector<int64_t> identity(size_t(n), 0);
    std::iota(identity.begin(), identity.end(), int64_t(0));
    return identity;
  }
  Generator gen = derived_generator(seed, uint64_t(epoch), 0);
  return randperm(n, &gen).to_vector();
}
}  // namespace detail

class Sampler {
 public:
  virtual ~Sampler() = default;
  // How many indices an epoch yields for a dataset of dataset_size samples.
  virtual int64_t size(int64_t dataset_size) const = 0;
  // The indices of an epoch, in order (size(dataset_size) of them, each in [0, dataset_size)).
  virtual std::vector<int64_t> indices(int64_t dataset_size, uint64_t seed, int64_t epoch) const = 0;
};

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t num_replicas, int64_t rank, bool shuffle = true, bool drop_last = false)
      : replicas_(num_replicas), rank_(rank), shuffle_(shuffle), drop_last_(drop_last) {
    check(num_replicas > 0, "DistributedSampler: num_replicas must be positive, got ", num_replicas);
    check(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " is not in [0, ", num_replicas, ")");
  }

  int64_t num_replicas() const { return replicas_; }
  int64_t rank() const { return rank_; }
  bool shuffle() const { return shuffle_; }
  bool drop_last() const { return drop_last_; }

  int64_t size(int64_t n) const override {
    // torch: ceil((n - R) / R) with drop_last when R does not divide n, which is floor(n / R); else ceil(n / R).
    return drop_last_ ? n / replicas_ : (n + replicas_ - 1) / replicas_;
  }

  std::vector<int64_t> indices(int64_t n, uint64_t seed, int64_t epoch) const override {
    const int64_t per_replica = size(n), total = per_replica * replicas_;
    std::vector<int64_t> order = detail::epoch_order(n, shuffle_, seed, epoch);
    // Pad by repeating the order from its start (several times when the dataset is smaller than the padding).
    for (int64_t i = n; i < total && n > 0; ++i) order.push_back(order[size_t(i % n)]);
    std::vector<int64_t> mine;
    mine.reserve(size_t(per_replica));
    for (int64_t i = rank_; i < total; i += replicas_) mine.push_back(order[size_t(i)]);
    return mine;
  }

 private:
  int64_t replicas_, rank_;
  bool shuffle_, drop_last_;
};

}  // namespace kiln::data
