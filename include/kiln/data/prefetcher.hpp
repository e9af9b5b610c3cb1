#pragma once
// The DataLoader's worker threads: an ordered prefetcher that computes make(0), ..., make(count - 1) on several
// threads and hands the results to one consumer strictly in index order.
//
// Workers claim indices in increasing order, but never more than `window` past the consumer: index i is claimed
// only once the consumer has taken i - window, so at most `window` results exist or are being computed at any
// time, and result i lands in ring slot i % window, which that take has just emptied. An exception thrown by
// make(i) is stored in slot i and rethrown by the take of i, in the consumer's thread; the other indices carry
// on. The destructor tells the workers to stop, wakes them and joins them; a worker busy in make finishes that
// call first (it cannot be interrupted), so destruction waits at most for the calls already running.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/core/error.hpp"
#include "kiln/cpu/parallel.hpp"

namespace kiln::data::detail {

template <class T>
class OrderedPrefetcher {
 public:
  OrderedPrefetcher(int64_t count, int threads, int64_t window, std::function<T(int64_t)> make)
      : count_(count), window_(window), make_(std::move(make)), slots_(size_t(window)) {
    check(threads > 0 && window > 0, "OrderedPrefetcher: expected positive threads and window, got ", threads, " and ",
          window);
    try {
      for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { work(); });
    } catch (...) {  // a thread could not be started: stop the ones that were
      stop();
      throw;
    }
  }
  OrderedPrefetcher(const OrderedPrefetcher&) = delete;
  OrderedPrefetcher& operator=(const OrderedPrefetcher&) = delete;
  ~OrderedPrefetcher() { stop(); }

  // The next result in index order, waiting for it if need be; rethrows make's exception for that index.
  T take() {
    std::unique_lock lock(mu_);
    check<std::logic_error>(next_take_ < count_, "OrderedPrefetcher: all ", count_, " results were taken");
    Slot& slot = slots_[size_t(next_take_ % window_)];
    ready_.wait(lock, [&] { return slot.ready; });
    Slot got = std::exchange(slot, Slot{});
    ++next_take_;
    lock.unlock();
    claimable_.notify_all();
    if (got.error) std::rethrow_exception(got.error);
    return std::move(*got.value);
  }

 private:
  struct Slot {
    bool ready = false;
    std::optional<T> value;
    std::exception_ptr error;
  };

  void work() {
    // Kiln ops inside make run on this thread alone, as PyTorch's workers call torch.set_num_threads(1):
    // `threads` workers each opening an OpenMP team would oversubscribe the cores. (OpenMP's thread count is a
    // per-thread setting, so the consumer's is unchanged; results do not depend on it.)
    set_num_threads(1);
    std::unique_lock lock(mu_);
    for (;;) {
      claimable_.wait(lock, [&] { return stopping_ || next_claim_ == count_ || next_claim_ < next_take_ + window_; });
      if (stopping_ || next_claim_ == count_) return;
      const int64_t i = next_claim_++;
      lock.unlock();
      Slot result;
      try {
        result.value.emplace(make_(i));
      } catch (...) {
        result.error = std::current_exception();
      }
      result.ready = true;
      lock.lock();
      slots_[size_t(i % window_)] = std::move(result);
      ready_.notify_one();  // the consumer is the only thread waiting on ready_
    }
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    claimable_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  const int64_t count_, window_;
  const std::function<T(int64_t)> make_;
  std::mutex mu_;
  std::condition_variable claimable_, ready_;
  std::vector<Slot> slots_;
  int64_t next_claim_ = 0, next_take_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::data::detail
