#pragma once
// Datasets, as libtorch's torch::data: an Example (data, target), the Dataset concept, TensorDataset, Subset and
// random_split.
//
// A dataset is any type with `size() -> int64_t` and `get(i) -> sample` (const; libtorch's datasets are classes
// with virtual get, here a concept is enough since DataLoader is a template anyway). A dataset may also have
// `get_batch(indices)` returning the samples at those indices already batched, in the sample type: the
// DataLoader's default collation then calls it once per batch instead of get per sample followed by stack
// (TensorDataset has one: a batch is then one row copy per sample and tensor). With num_workers > 0 the
// DataLoader calls get and get_batch from several threads at once, so they must be safe to call concurrently
// (const and not mutating shared state is enough).
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/random.hpp"

namespace kiln::data {

// One sample, or a batch of them (the DataLoader's batches are Examples too: data and target stacked).
template <class Data = Tensor<float>, class Target = Tensor<int64_t>>
struct Example {
  using data_type = Data;
  using target_type = Target;
  Data data;
  Target target;
};

template <class D>
concept Dataset = requires(const D& d, int64_t i) {
  { d.size() } -> std::convertible_to<int64_t>;
  { d.get(i) } -> std::move_constructible;
};

// What d.get(i) returns.
template <Dataset D>
using sample_t = std::remove_cvref_t<decltype(std::declval<const D&>().get(int64_t{}))>;

// A dataset that can also return several samples as one batched sample.
template <class D>
concept BatchDataset = Dataset<D> && requires(const D& d, std::span<const int64_t> indices) {
  { d.get_batch(indices) } -> std::same_as<sample_t<D>>;
};

namespace detail {
inline void check_sample_index(const char* op, int64_t i, int64_t size) {
  if (i < 0 || i >= size)
    throw std::out_of_range(kiln::detail::cat(op, ": index ", i, " is out of range for a dataset of size ", size));
}

// Rows `indices` (checked) of a contiguous tensor, one copy per row. index_select(t, 0, ...) gives the same
// values but walks element by element with an index check each: 190 us instead of 6 us for 64 rows of 784 floats.
template <Dtype T>
Tensor<T> take_rows(const Tensor<T>& t, std::span<const int64_t> indices, const char* op) {
  Shape shape = t.shape();
  shape[0] = int64_t(indices.size());
  Tensor<T> out = empty<T>(shape);
  int64_t row = 1;
  for (int d = 1; d < t.dim(); ++d) row *= t.size(d);
  const T* src = t.data_ptr();
  T* dst = out.data_ptr();
  for (const int64_t i : indices) {
    check_sample_index(op, i, t.size(0));
    dst = std::copy_n(src + i * row, row, dst);
  }
  return out;
}
}  // namespace detail

// Samples are the slices along dim 0 of a data tensor and a target tensor (torch.utils.data.TensorDataset with
// two tensors). The tensors are kept contiguous (a non-contiguous one is copied once, here), so that get_batch
// copies each selected row in one piece (without autograd history); get(i) returns views, as PyTorch's does.
template <Dtype D = float, Dtype T = int64_t>
class TensorDataset {
 public:
  using Sample = Example<Tensor<D>, Tensor<T>>;

  TensorDataset(const Tensor<D>& data, const Tensor<T>& targets) {
    check(data.defined() && targets.defined(), "TensorDataset: data and targets must be defined tensors");
    data_ = data.contiguous();
    targets_ = targets.contiguous();
    check<ShapeError>(data_.dim() > 0 && targets_.dim() > 0,
                      "TensorDataset: data and targets need a sample dim, got shapes ", data_.shape(), " and ",
                      targets_.shape());
    check<ShapeError>(data_.size(0) == targets_.size(0), "TensorDataset: data has ", data_.size(0),
                      " samples (shape ", data_.shape(), ") but targets has ", targets_.size(0), " (shape ",
                      targets_.shape(), ")");
  }

  int64_t size() const { return data_.size(0); }

  Sample get(int64_t i) const {
    detail::check_sample_index("TensorDataset", i, size());
    return {data_[i], targets_[i]};
  }

  Sample get_batch(std::span<const int64_t> indices) const {
    return {detail::take_rows(data_, indices, "TensorDataset"), detail::take_rows(targets_, indices, "TensorDataset")};
  }

  const Tensor<D>& data() const { return data_; }
  const Tensor<T>& targets() const { return targets_; }

 private:
  Tensor<D> data_;
  Tensor<T> targets_;
};

// Compiled once in a separately compiled program's part (core/config.hpp), with its DataLoader (dataloader.hpp).
KILN_INSTANTIATE(class TensorDataset<float, int64_t>);

// The samples of a dataset at the given indices, in that order (torch.utils.data.Subset). The dataset is held
// by a shared pointer, so the subsets that random_split makes share one copy of it.
template <Dataset D>
class Subset {
 public:
  Subset(std::shared_ptr<const D> dataset, std::vector<int64_t> indices)
      : dataset_(std::move(dataset)), indices_(std::move(indices)) {
    check(dataset_ != nullptr, "Subset: the dataset is null");
    const int64_t n = dataset_->size();
    for (const int64_t i : indices_) detail::check_sample_index("Subset", i, n);
  }
  Subset(D dataset, std::vector<int64_t> indices)
      : Subset(std::make_shared<const D>(std::move(dataset)), std::move(indices)) {}

  int64_t size() const { return int64_t(indices_.size()); }

  sample_t<D> get(int64_t i) const {
    detail::check_sample_index("Subset", i, size());
    return dataset_->get(indices_[size_t(i)]);
  }

  sample_t<D> get_batch(std::span<const int64_t> indices) const
    requires BatchDataset<D>
  {
    std::vector<int64_t> mapped;
    mapped.reserve(indices.size());
    for (const int64_t i : indices) {
      detail::check_sample_index("Subset", i, size());
      mapped.push_back(indices_[size_t(i)]);
    }
    return dataset_->get_batch(mapped);
  }

  const D& dataset() const { return *dataset_; }
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const D> dataset_;
  std::vector<int64_t> indices_;
};

template <Dataset D>
Subset(std::shared_ptr<D>, std::vector<int64_t>) -> Subset<std::remove_const_t<D>>;

// Splits a dataset into disjoint subsets of the given lengths, covering it (torch.utils.data.random_split): the
// first lengths[0] indices of randperm(size, gen) go to the first subset, and so on.
template <Dataset D>
std::vector<Subset<D>> random_split(const D& dataset, const std::vector<int64_t>& lengths,
                                    Generator& gen = default_generator()) {
  const int64_t n = dataset.size();
  int64_t total = 0;
  for (const int64_t length : lengths) {
    check(length >= 0, "random_split: lengths must be non-negative, got ", length);
    total += length;
  }
  check(total == n, "random_split: the lengths sum to ", total, " but the dataset has ", n, " samples");
  const std::vector<int64_t> order = randperm(n, &gen).to_vector();
  const auto shared = std::make_shared<const D>(dataset);
  std::vector<Subset<D>> subsets;
  auto at = order.begin();
  for (const int64_t length : lengths) {
    subsets.emplace_back(shared, std::vector<int64_t>(at, at + length));
    at += length;
  }
  return subsets;
}

// Fractions of the dataset summing to 1, as PyTorch's: each subset gets floor(fraction * size) samples and the
// remainder is dealt one at a time to the subsets in order.
template <Dataset D>
std::vector<Subset<D>> random_split(const D& dataset, const std::vector<double>& fractions,
                                    Generator& gen = default_generator()) {
  const int64_t n = dataset.size();
  double sum = 0;
  for (const double f : fractions) {
    check(f >= 0 && f <= 1, "random_split: fractions must be in [0, 1], got ", f);
    sum += f;
  }
  check(std::abs(sum - 1) <= 1e-9, "random_split: the fractions sum to ", sum, ", not 1");
  std::vector<int64_t> lengths;
  int64_t assigned = 0;
  for (const double f : fractions) {
    lengths.push_back(int64_t(std::floor(f * double(n))));
    assigned += lengths.back();
  }
  for (size_t k = 0; assigned < n; ++k, ++assigned) ++lengths[k % lengths.size()];
  return random_split(dataset, lengths, gen);
}

// random_split(ds, {800, 200}, gen) and random_split(ds, {0.8, 0.2}, gen): a braced list of integers is counts,
// of floating-point values fractions (either vector overload alone would be ambiguous for {800, 200}).
template <Dataset D, class L>
  requires std::is_arithmetic_v<L>
std::vector<Subset<D>> random_split(const D& dataset, std::initializer_list<L> lengths,
                                    Generator& gen = default_generator()) {
  using Vector = std::conditional_t<std::is_integral_v<L>, std::vector<int64_t>, std::vector<double>>;
  return random_split(dataset, Vector(lengths.begin(), lengths.end()), gen);
}

}  // namespace kiln::data
