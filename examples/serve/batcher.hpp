#pragma once
// Dynamic batching. Request threads submit one item each and wait on its future; one batcher thread takes
// up to max_batch queued items as soon as that many are waiting, or when the oldest has waited max_delay,
// runs them as one batch and answers each item with its own row of the output. With max_batch 1 every
// item runs alone (no batching), still one at a time on the batcher thread.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.hpp"

namespace serve {

class Batcher {
 public:
  // Maps a batch [B, item_shape...] to its outputs [B, K]; runs on the batcher thread only.
  using Forward = std::function<kiln::Tensor<float>(const kiln::Tensor<float>&)>;
  // Told the size of every batch run.
  using BatchObserver = std::function<void(int64_t)>;

  struct Options {
    int64_t max_batch = 64;
    std::chrono::microseconds max_delay{2000};
  };

  Batcher(std::vector<int64_t> item_shape, Forward forward, Options options, BatchObserver on_batch = {})
      : item_shape_(std::move(item_shape)), forward_(std::move(forward)), options_(options), on_batch_(std::move(on_batch)) {
    if (options_.max_batch < 1) throw std::invalid_argument("Batcher: max_batch must be at least 1");
    for (int64_t d : item_shape_) item_numel_ *= d;
    thread_ = std::thread([this] { run(); });
  }
  // Answers every item already queued, then stops the thread. Every submit() must have returned.
  ~Batcher() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // item: the item's elements (item_shape's product of floats), row-major. The future holds the item's row
  // of the output, or the exception the forward threw.
  std::future<std::vector<float>> submit(std::vector<float> item) {
    if (int64_t(item.size()) != item_numel_)
      throw std::invalid_argument("Batcher::submit: expected " + std::to_string(item_numel_) + " values, got " +
                                  std::to_string(item.size()));
    Pending pending{std::move(item), {}, Clock::now()};
    std::future<std::vector<float>> result = pending.result.get_future();
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(pending));
    }
    wake_.notify_one();
    return result;
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::vector<float> item;
    std::promise<std::vector<float>> result;
    Clock::time_point arrived;
  };

  void run() {
    for (std::vector<Pending> batch = next_batch(); !batch.empty(); batch = next_batch()) answer(batch);
  }

  // Waits for a batch; empty once stopping with nothing queued.
  std::vector<Pending> next_batch() {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return {};
    const size_t max_batch = size_t(options_.max_batch);
    wake_.wait_until(lock, queue_.front().arrived + options_.max_delay,
                     [&] { return stopping_ || queue_.size() >= max_batch; });
    std::vector<Pending> batch;
    while (!queue_.empty() && batch.size() < max_batch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    return batch;
  }

  void answer(std::vector<Pending>& batch) {
    std::vector<std::vector<float>> rows;
    try {
      rows = forward_rows(batch);
    } catch (...) {
      for (Pending& p : batch) p.result.set_exception(std::current_exception());
    }
    for (size_t i = 0; i < rows.size(); ++i) batch[i].result.set_value(std::move(rows[i]));
    if (on_batch_) on_batch_(int64_t(batch.size()));
  }

  // The batch's items stacked into one tensor, run, and the output split into one row per item.
  std::vector<std::vector<float>> forward_rows(const std::vector<Pending>& batch) const {
    const int64_t n = int64_t(batch.size());
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), item_shape_.begin(), item_shape_.end());
    kiln::Tensor<float> input = kiln::empty<float>(kiln::Shape(shape));
    for (int64_t i = 0; i < n; ++i)
      std::copy(batch[size_t(i)].item.begin(), batch[size_t(i)].item.end(), input.data_ptr() + i * item_numel_);
    const kiln::Tensor<float> output = forward_(input).contiguous();
    if (output.dim() != 2 || output.size(0) != n)
      throw std::logic_error(kiln::detail::cat("Batcher: the forward of a batch of ", n, " answered shape ",
                                               output.shape()));
    std::vector<std::vector<float>> rows;
    for (int64_t i = 0; i < n; ++i) rows.emplace_back(output.data_ptr() + i * output.size(1), output.data_ptr() + (i + 1) * output.size(1));
    return rows;
  }

  const std::vector<int64_t> item_shape_;
  int64_t item_numel_ = 1;
  const Forward forward_;
  const Options options_;
  const BatchObserver on_batch_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace serve
