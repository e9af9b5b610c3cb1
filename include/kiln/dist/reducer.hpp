#pragma once
// DistributedDataParallel's gradient reducer (torch's Reducer): the parameters' gradients in buckets of about
// bucket_cap_mb, filled in reverse order of the parameters (roughly the order backward produces them); each
// bucket's averaging all_reduce starts, asynchronously, as soon as its last gradient arrived, while backward
// goes on (overlap). Buckets start strictly in index order, so every rank issues the same collectives in the same
// order even when backward delivers gradients in different orders.
//
// Gradients are bucket views: the hook of each parameter's accumulator copies the parameter's gradient (its
// .grad, when gradients were accumulated under no_sync, plus the new one) into its slot of the bucket and hands
// that slot back as the gradient, so .grad becomes a view of the bucket (torch's gradient_as_bucket_view). When
// the last bucket has started, the reducer waits for all of them: the averaged values are in .grad when backward
// returns.
//
// find_unused_parameters: after each forward, the parameters the output does not depend on (a walk of its graph)
// are found; when the first gradient of the backward arrives they are marked ready with their current gradient
// (or zeros); at the end the ranks agree on which parameters
// any rank used, and one unused everywhere keeps its .grad as it was. Without it, a parameter without a gradient
// leaves its bucket unreduced and the next forward throws, naming it.
#include <chrono>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/autograd/engine.hpp"
#include "kiln/dist/process_group.hpp"
#include "kiln/kiln.hpp"

namespace kiln::dist::detail {

// When each bucket became ready, started and finished, in seconds since the reducer's backward began (its first
// gradient), for DistributedDataParallel::timeline().
struct BucketTiming {
  double ready = 0, started = 0, finished = 0;
};

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(std::vector<std::pair<std::string, Tensor<float>>> params, std::shared_ptr<ProcessGroup> group,
          double bucket_cap_mb, bool find_unused)
      : params_(std::move(params)), group_(std::move(group)), find_unused_(find_unused) {
    check<std::invalid_argument>(bucket_cap_mb > 0, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
                                 bucket_cap_mb);
    const int64_t cap = std::max<int64_t>(1, int64_t(bucket_cap_mb * 1024 * 1024) / int64_t(sizeof(float)));
    slot_.resize(params_.size());
    for (size_t k = params_.size(); k-- > 0;) {
      const int64_t n = params_[k].second.numel();
      if (buckets_.empty() || (buckets_.back().numel > 0 && buckets_.back().numel + n > cap)) buckets_.emplace_back();
      Bucket& b = buckets_.back();
      slot_[k] = {buckets_.size() - 1, b.numel};
      b.params.push_back(k);
      b.numel += n;
    }
    for (Bucket& b : buckets_) b.buffer = zeros<float>({b.numel}, group_->device());
    timings_.resize(buckets_.size());
    reset();
  }

  // Registers the gradient hooks (after construction: they hold a weak reference to the reducer).
  void install_hooks() {
    std::weak_ptr<Reducer> self = weak_from_this();
    for (size_t k = 0; k < params_.size(); ++k)
      params_[k].second.register_hook([self, k](const Tensor<float>& g) -> Tensor<float> {
        const std::shared_ptr<Reducer> r = self.lock();
        if (!r || !r->sync_) return {};
        return r->on_gradient(k, g);
      });
  }

  // Called after each forward: whether the coming backward synchronizes, and (find_unused_parameters) the output
  // whose graph says which parameters will get gradients.
  void prepare(bool sync, const std::vector<Tensor<float>>& outputs) {
    if (in_progress()) {
      std::string missing;
      for (size_t k = 0; k < params_.size(); ++k)
        if (!marked_[k]) missing += (missing.empty() ? "" : ", ") + params_[k].first;
      throw std::logic_error(kiln::detail::cat(
          "DistributedDataParallel: the previous backward produced no gradient for parameter(s) ", missing,
          ", so their gradients were not reduced; pass find_unused_parameters = true when some parameters do not "
          "take part in the loss (on some or all ranks)"));
    }
    sync_ = sync;
    unused_.clear();
    if (!sync || !find_unused_) return;
    std::unordered_set<const TensorImpl*> reached;
    std::unordered_set<const autograd::Node*> seen;
    std::vector<const autograd::Node*> stack;
    for (const Tensor<float>& out : outputs)
      if (out.defined() && out.grad_fn()) stack.push_back(out.grad_fn().get());
    while (!stack.empty()) {
      const autograd::Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      if (const auto* acc = dynamic_cast<const autograd::AccumulateGrad*>(n)) reached.insert(acc->leaf_.get());
      for (const autograd::Edge& e : n->next_edges)
        if (e.valid()) stack.push_back(e.fn.get());
    }
    for (size_t k = 0; k < params_.size(); ++k)
      if (!reached.count(params_[k].second.impl_ptr().get())) unused_.push_back(k);
  }

  // A backward has delivered gradients whose buckets are not all reduced yet.
  bool in_progress() const { return started_; }
  size_t bucket_count() const { return buckets_.size(); }
  // The parameter indices of bucket b, in their order inside it.
  const std::vector<size_t>& bucket_params(size_t b) const { return buckets_.at(b).params; }
  const std::vector<BucketTiming>& timeline() const { return timings_; }
  double backward_seconds() const { return last_backward_s_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    int64_t numel = 0;
    Tensor<float> buffer;
    int64_t pending = 0;
    std::shared_ptr<Work> work;
  };
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;
  };

  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

  Tensor<float> slot_view(size_t k) const {
    const Slot& s = slot_[k];
    const Tensor<float>& p = params_[k].second;
    return buckets_[s.bucket].buffer.slice(0, s.offset, s.offset + p.numel()).reshape(p.shape());
  }

  // The hook of parameter k: its gradient into the bucket; returns the slot as the gradient to accumulate.
  Tensor<float> on_gradient(size_t k, const Tensor<float>& g) {
    NoGradGuard no_grad;
    check<std::logic_error>(!marked_[k], "DistributedDataParallel: parameter ", params_[k].first,
                            " received a second gradient in one backward (one backward per forward; accumulate "
                            "with no_sync)");
    if (!started_) {  // the first gradient of this backward: the unused parameters are ready now
      started_ = true;
      t0_ = std::chrono::steady_clock::now();
      for (BucketTiming& t : timings_) t = {};
      mark_unused();
    }
    Tensor<float> slot = slot_view(k);
    Tensor<float> p = params_[k].second;
    const Tensor<float> current = p.grad();
    if (current.defined()) slot.copy_(current + g);
    else slot.copy_(g);
    p.zero_grad(true);  // the accumulator then takes the returned slot as .grad
    mark(k);
    if (next_bucket_ == buckets_.size()) finish();
    else progress();
    return slot;
  }

  void mark(size_t k) {
    marked_[k] = true;
    Bucket& b = buckets_[slot_[k].bucket];
    if (--b.pending == 0) timings_[slot_[k].bucket].ready = now();
    while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
      if (next_bucket_ == 0) group_->set_background_progress(true);
      timings_[next_bucket_].started = now();
      buckets_[next_bucket_].work = group_->all_reduce_async(buckets_[next_bucket_].buffer, ReduceOp::avg);
      ++next_bucket_;
    }
  }

  // Lets MPI move the buckets in flight along (it progresses only inside MPI calls) and notes which finished.
  void progress() {
    for (size_t b = 0; b < next_bucket_; ++b)
      if (buckets_[b].work && timings_[b].finished == 0 && buckets_[b].work->is_completed()) timings_[b].finished = now();
  }

  void mark_unused() {
    NoGradGuard no_grad;
    for (const size_t k : unused_) {
      Tensor<float> slot = slot_view(k);
      const Tensor<float> current = params_[k].second.grad();
      if (current.defined()) slot.copy_(current);
      else slot.zero_();
    }
    for (const size_t k : unused_) mark(k);
  }

  // All buckets started: wait for them; with find_unused_parameters, give the locally unused parameters the
  // reduced gradient when some rank used them.
  void finish() {
    try {
      for (size_t b = 0; b < buckets_.size(); ++b) {
        buckets_[b].work->wait();
        buckets_[b].work.reset();
        if (timings_[b].finished == 0) timings_[b].finished = now();
      }
    } catch (...) {
      group_->set_background_progress(false);
      throw;
    }
    group_->set_background_progress(false);
    last_backward_s_ = now();
    if (find_unused_) {
      Tensor<int32_t> used = ones<int32_t>({int64_t(params_.size())});
      for (const size_t k : unused_) used.data_ptr()[k] = 0;
      used = used.to(group_->device());
      group_->all_reduce(used, ReduceOp::max);
      used = used.cpu();
      for (const size_t k : unused_)
        if (used.data_ptr()[k]) {
          autograd::meta_of(params_[k].second.impl_ptr()).grad = slot_view(k).impl_ptr();
        }
    }
    reset();
  }

  void reset() {
    marked_.assign(params_.size(), false);
    started_ = false;
    next_bucket_ = 0;
    for (Bucket& b : buckets_) b.pending = int64_t(b.params.size());
  }

  std::vector<std::pair<std::string, Tensor<float>>> params_;
  std::shared_ptr<ProcessGroup> group_;
  bool find_unused_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slot_;
  std::vector<bool> marked_;
  bool started_ = false;
  size_t next_bucket_ = 0;
  std::vector<size_t> unused_;
  bool sync_ = true;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::vector<BucketTiming> timings_;
  double last_backward_s_ = 0;
};

}  // namespace kiln::dist::detail
