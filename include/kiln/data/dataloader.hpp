#pragma once
// DataLoader: batches of a dataset, shuffled per epoch, collated, transformed, optionally loaded ahead by worker
// threads (torch.utils.data.DataLoader; libtorch's torch::data::make_data_loader).
//
//   DataLoader loader(TensorDataset(x, y), {.batch_size = 64, .shuffle = true, .num_workers = 2, .seed = 1},
//                     transforms::RandomHorizontalFlip());
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (auto& batch : loader) train_step(batch.data, batch.target);   // each full pass advances epoch()
//
// Determinism. What the loader yields is a function of (dataset, options, seed, epoch) alone, never of
// num_workers or of timing:
//   - the order of epoch e is randperm(size) under a Generator seeded from (seed, e) (the identity without
//     shuffle), cut into batches of batch_size, the last one short or dropped (drop_last);
//   - batch b of epoch e is collated from the samples at its indices, then its data goes through the transform
//     with a Generator seeded from (seed, e, b), whichever thread builds it;
//   - the iterator yields the batches in order 0, 1, ... even when workers finish them out of order.
// The generators' seeds are Philox words: block(seed, counter = e, stream = 0) for the order and
// block(seed, e, b + 1) for batch b's transform (the low 64 bits of each), so epochs and batches get unrelated
// streams of random numbers.
//
// Epochs. begin() starts a pass over epoch(); when the iterator reaches end() the loader's epoch becomes that
// epoch + 1, so consecutive loops see consecutive epochs. A pass left early (break, an exception) does not
// advance it: the next loop starts the same epoch again. set_epoch(e) chooses the epoch, as PyTorch's
// DistributedSampler.set_epoch; seed() and epoch() are what a checkpoint saves to resume at an epoch boundary.
//
// Collation. By default a batch is collated as libtorch's Stack: the dataset's get_batch(indices) if it has one
// (TensorDataset does), else stack of the samples' data and of their targets (samples must then be
// Example<Tensor<A>, Tensor<B>>). A custom collate takes the batch's samples, in order, as a std::vector and
// returns the batch, which must be an Example (of any data and target types) so that the transform has its data
// to act on.
//
// Workers. With num_workers = 0 each batch is built in the calling thread when the iterator advances to it. With
// num_workers > 0, begin() starts that many threads, which build batches ahead, at most
// num_workers * prefetch_factor of them in flight (detail::OrderedPrefetcher); they stop and are joined when the
// iterator is destroyed or reaches the end, so leaving a loop early is safe. Workers call the dataset's get or
// get_batch, the collate and the transform concurrently: these must be safe to call from several threads (const
// and not mutating shared state is enough). They run kiln ops single-threaded (OpenMP), as PyTorch's workers do.
// An exception thrown while building batch b (by the dataset, the collate or the transform) is rethrown in the
// consumer by the begin() or ++ that reaches batch b, with or without workers, and the iterator then equals
// end(). The loader must outlive its iterators, as a container must.
//
// Departure from libtorch: options are a plain aggregate (C++20 designated initializers do what libtorch's
// chained setters do), and the dataset size, seed and epoch are known to the loader rather than to a sampler.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/data/dataset.hpp"
#include "kiln/data/prefetcher.hpp"
#include "kiln/data/sampler.hpp"
#include "kiln/tensor/join.hpp"
#include "kiln/tensor/random.hpp"

namespace kiln::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;  // drop the last batch when it is short
  int num_workers = 0;     // 0: load in the calling thread
  int prefetch_factor = 2;  // batches in flight per worker
  uint64_t seed = Generator::default_seed;  // of the shuffles and the transforms (fixed, so runs repeat)
  // Which indices an epoch visits, instead of the loader's own order (then shuffle must be false; the sampler
  // shuffles): data::DistributedSampler gives each rank its part (sampler.hpp).
  std::shared_ptr<const Sampler> sampler = nullptr;
};

namespace detail {

template <class B>
inline constexpr bool is_example_v = false;
template <class Data, class Target>
inline constexpr bool is_example_v<Example<Data, Target>> = true;

// Samples that the default collation can stack.
template <class S>
inline constexpr bool stackable_v = false;
template <Dtype A, Dtype B>
inline constexpr bool stackable_v<Example<Tensor<A>, Tensor<B>>> = true;

}  // namespace detail

template <Dataset D, class Batch = sample_t<D>>
class DataLoader {
  static_assert(detail::is_example_v<Batch>,
                "kiln: DataLoader batches are Examples; pass a collate that makes one from the samples");

 public:
  using Sample = sample_t<D>;
  using Data = typename Batch::data_type;
  using Collate = std::function<Batch(std::vector<Sample>)>;
  using Transform = std::function<Data(const Data&, Generator&)>;

  class Iterator;

  // An empty transform leaves batches as collated; an empty collate means the default collation.
  DataLoader(D dataset, DataLoaderOptions options = {}, Transform transform = {}, Collate collate = {})
      : dataset_(std::move(dataset)),
        options_(options),
        transform_(std::move(transform)),
        collate_(std::move(collate)),
        seed_(options.seed) {
    check(options.batch_size > 0, "DataLoader: batch_size must be positive, got ", options.batch_size);
    check(options.num_workers >= 0, "DataLoader: num_workers must be non-negative, got ", options.num_workers);
    check(options.prefetch_factor > 0, "DataLoader: prefetch_factor must be positive, got ", options.prefetch_factor);
    check(!(options.sampler && options.shuffle),
          "DataLoader: shuffle must be false with a sampler (the sampler decides the order; DistributedSampler "
          "shuffles by default)");
    check(collate_ || (std::is_same_v<Batch, Sample> && (BatchDataset<D> || detail::stackable_v<Sample>)),
          "DataLoader: samples other than Example<Tensor, Tensor> need a collate function");
  }

  // Batches per epoch.
  int64_t size() const {
    const int64_t n = options_.sampler ? options_.sampler->size(dataset_.size()) : dataset_.size(),
                  b = options_.batch_size;
    return options_.drop_last ? n / b : (n + b - 1) / b;
  }

  Iterator begin() { return Iterator(*this); }
  std::default_sentinel_t end() const { return {}; }

  uint64_t seed() const { return seed_; }
  void set_seed(uint64_t seed) { seed_ = seed; }
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch) {
    check(epoch >= 0, "DataLoader: epoch must be non-negative, got ", epoch);
    epoch_ = epoch;
  }

  const D& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  // The dataset indices of one epoch, in the order they are batched.
  std::vector<int64_t> order(uint64_t seed, int64_t epoch) const {
    const int64_t n = dataset_.size();
    if (!options_.sampler) return detail::epoch_order(n, options_.shuffle, seed, epoch);
    std::vector<int64_t> indices = options_.sampler->indices(n, seed, epoch);
    check<std::logic_error>(int64_t(indices.size()) == options_.sampler->size(n), "DataLoader: the sampler gave ",
                            indices.size(), " indices, its size() said ", options_.sampler->size(n));
    for (const int64_t i : indices)
      check<std::out_of_range>(i >= 0 && i < n, "DataLoader: the sampler gave index ", i, " for a dataset of ", n);
    return indices;
  }

  // Batch b of an epoch whose order is `order`; called from worker threads.
  Batch make_batch(std::span<const int64_t> order, uint64_t seed, int64_t epoch, int64_t b) const {
    const int64_t first = b * options_.batch_size;
    const std::span<const int64_t> indices =
        order.subspan(size_t(first), size_t(std::min(options_.batch_size, int64_t(order.size()) - first)));
    Batch batch = collate(indices);
    if (transform_) {
      Generator gen = detail::derived_generator(seed, uint64_t(epoch), uint64_t(b) + 1);
      batch.data = transform_(batch.data, gen);
    }
    return batch;
  }

  Batch collate(std::span<const int64_t> indices) const {
    if constexpr (std::is_same_v<Batch, Sample> && BatchDataset<D>) {
      if (!collate_) return dataset_.get_batch(indices);
    }
    std::vector<Sample> samples;
    samples.reserve(indices.size());
    for (const int64_t i : indices) samples.push_back(dataset_.get(i));
    if constexpr (std::is_same_v<Batch, Sample> && detail::stackable_v<Sample>) {
      if (!collate_) {
        std::vector<typename Sample::data_type> data;
        std::vector<typename Sample::target_type> targets;
        data.reserve(samples.size());
        targets.reserve(samples.size());
        for (Sample& s : samples) {
          data.push_back(std::move(s.data));
          targets.push_back(std::move(s.target));
        }
        return Batch{stack(data), stack(targets)};
      }
    }
    return collate_(std::move(samples));  // set: the constructor checks that one is when the above cannot apply
  }

  D dataset_;
  DataLoaderOptions options_;
  Transform transform_;
  Collate collate_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

// One pass over an epoch. Move-only: it owns the pass (the order and, with workers, the threads).
template <Dataset D, class Batch>
class DataLoader<D, Batch>::Iterator {
 public:
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;

  Batch& operator*() const { return *pass_->current; }
  Batch* operator->() const { return &*pass_->current; }
  Iterator& operator++() {
    advance();
    return *this;
  }
  void operator++(int) { advance(); }
  friend bool operator==(const Iterator& it, std::default_sentinel_t) { return it.pass_ == nullptr; }

 private:
  friend class DataLoader;

  struct Pass {
    Pass(const DataLoader& loader, uint64_t seed, int64_t epoch)
        : seed(seed), epoch(epoch), order(loader.order(seed, epoch)), count(loader.size()) {
      if (loader.options_.num_workers > 0 && count > 0)
        workers.emplace(count, int(std::min<int64_t>(loader.options_.num_workers, count)),
                        int64_t(loader.options_.num_workers) * loader.options_.prefetch_factor,
                        [this, &loader](int64_t b) { return loader.make_batch(order, this->seed, this->epoch, b); });
    }
    const uint64_t seed;
    const int64_t epoch;
    const std::vector<int64_t> order;
    const int64_t count;
    int64_t next = 0;
    std::optional<Batch> current;
    // Last, so that its threads, which read the members above, are joined before those are destroyed.
    std::optional<detail::OrderedPrefetcher<Batch>> workers;
  };

  explicit Iterator(DataLoader& loader)
      : loader_(&loader), pass_(std::make_unique<Pass>(loader, loader.seed_, loader.epoch_)) {
    advance();
  }

  void advance() {
    if (pass_->next == pass_->count) {
      loader_->epoch_ = pass_->epoch + 1;
      pass_.reset();
      return;
    }
    try {
      const int64_t b = pass_->next++;
      pass_->current = pass_->workers ? pass_->workers->take()
                                      : loader_->make_batch(pass_->order, pass_->seed, pass_->epoch, b);
    } catch (...) {
      pass_.reset();
      throw;
    }
  }

  DataLoader* loader_;
  std::unique_ptr<Pass> pass_;
};

// The loader of the tutorials' dataset is compiled once in a separately compiled program's part (core/config.hpp).
KILN_INSTANTIATE(class DataLoader<TensorDataset<float, int64_t>>);

// DataLoader(dataset, options, transform, collate) deduces the batch type from what the collate returns.
template <Dataset D, class T, class C>
  requires std::invocable<C&, std::vector<sample_t<D>>>
DataLoader(D, DataLoaderOptions, T, C) -> DataLoader<D, std::invoke_result_t<C&, std::vector<sample_t<D>>>>;

}  // namespace kiln::data
