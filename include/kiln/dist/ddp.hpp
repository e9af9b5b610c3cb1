#pragma once
// kiln::dist::DistributedDataParallel, as torch.nn.parallel.DistributedDataParallel: each rank runs the same model
// on its part of the global batch, and backward leaves every rank with the gradients averaged over the ranks, so
// an optimizer step keeps the replicas equal.
//
//   auto pg = dist::default_process_group_ptr();
//   nn::Sequential model(...);
//   dist::DistributedDataParallel ddp(model, pg);          // broadcasts rank 0's parameters and buffers
//   optim::Adam opt(model->parameters(), {...});
//   auto loss = nn::functional::cross_entropy(ddp.forward(x), y);
//   loss.backward();                                       // buckets reduced during backward (reducer.hpp)
//   opt.step();
//   { auto guard = ddp.no_sync(); ddp.forward(x1)...backward(); }   // accumulate locally, reduce at the next
//
// The forward must go through ddp.forward (or, for a module whose forward takes other arguments, the module's own
// forward followed by ddp.prepare_for_backward(outputs)): that is where the backward is prepared. One backward
// per forward; loss scaling is the user's (gradients are averaged, as torch's). Options as torch's:
// bucket_cap_mb (25), find_unused_parameters (false), broadcast_buffers (true: rank 0's buffers, e.g. batch norm
// running statistics, are broadcast at each forward in training mode).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/dist/process_group.hpp"
#include "kiln/dist/reducer.hpp"
#include "kiln/nn/module.hpp"

namespace kiln::dist {

struct DDPOptions {
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {})
      : module_(std::move(module)), group_(std::move(group)), options_(options) {
    check<std::invalid_argument>(module_ && group_, "DistributedDataParallel: module and process group are required");
    std::vector<std::pair<std::string, Tensor<float>>> params;
    for (auto& [name, p] : module_->named_parameters())
      if (p.requires_grad()) params.emplace_back(name, p);
    for (auto& [name, p] : params)
      check<std::invalid_argument>(p.device() == group_->device(), "DistributedDataParallel: parameter ", name, " is on ",
                                   p.device().str(), "; the ", group_->backend(), " process group works on ",
                                   group_->device().str(), " (move the module there first)");
    check_same_layout(params);
    broadcast_state(true);
    reducer_ = std::make_shared<detail::Reducer>(std::move(params), group_, options_.bucket_cap_mb,
                                                 options_.find_unused_parameters);
    reducer_->install_hooks();
  }
  template <class Holder>
    requires requires(const Holder& h) { std::shared_ptr<nn::Module>(h.ptr()); }
  DistributedDataParallel(const Holder& module, std::shared_ptr<ProcessGroup> group, DDPOptions options = {})
      : DistributedDataParallel(std::shared_ptr<nn::Module>(module.ptr()), std::move(group), options) {}

  Tensor<float> forward(const Tensor<float>& x) {
    before_forward();
    Tensor<float> y = module_->forward(x);
    prepare_for_backward({y});
    return y;
  }
  Tensor<float> operator()(const Tensor<float>& x) { return forward(x); }

  // For a forward that did not go through forward(x): call before it, then with its outputs after it.
  void before_forward() {
    if (options_.broadcast_buffers && module_->is_training()) broadcast_state(false);
  }
  void prepare_for_backward(const std::vector<Tensor<float>>& outputs) {
    reducer_->prepare(sync_ && GradMode::is_enabled(), outputs);
  }

  // While the guard lives, forwards prepare backwards that accumulate into .grad locally, without communication;
  // the first backward after it reduces the accumulated gradients.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(&ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSyncGuard() { ddp_->sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel* ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  nn::Module& module() const { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  ProcessGroup& process_group() const { return *group_; }
  const DDPOptions& options() const { return options_; }
  size_t bucket_count() const { return reducer_->bucket_count(); }
  // The indices (into the module's parameters() that require grad) of bucket b, in their order inside it.
  const std::vector<size_t>& bucket_parameters(size_t b) const { return reducer_->bucket_params(b); }
  // The last synchronized backward: when each bucket became ready, started and finished its all_reduce, in
  // seconds since that backward's first gradient (bench/ and docs/distributed.md), and when it ended.
  const std::vector<detail::BucketTiming>& timeline() const { return reducer_->timeline(); }
  double last_backward_seconds() const { return reducer_->backward_seconds(); }

 private:
  // Every rank must hold the same parameters (count and shapes): compared through a small all_gather.
  void check_same_layout(const std::vector<std::pair<std::string, Tensor<float>>>& params) {
    uint64_t hash = 0;
    int64_t numel = 0;
    for (auto& [name, p] : params) {
      numel += p.numel();
      for (const int64_t s : p.shape()) hash = hash * 1000003u + uint64_t(s);
      hash = hash * 1000003u + uint64_t(p.dim());
    }
    Tensor<int64_t> mine = tensor<int64_t>({int64_t(params.size()), numel, int64_t(hash)});
    Tensor<int64_t> all = group_->all_gather(mine.to(group_->device())).as<int64_t>().cpu();
    for (int r = 0; r < group_->size(); ++r)
      check<ShapeError>(all[r].to_vector() == mine.to_vector(), "DistributedDataParallel: rank ", r, " has ",
                        all[r][0].item(), " parameters of ", all[r][1].item(), " values, rank ", group_->rank(), " has ",
                        params.size(), " of ", numel, " (or their shapes differ): every rank must build the same model");
  }

  void broadcast_state(bool parameters) {
    NoGradGuard no_grad;
    std::vector<std::shared_ptr<Work>> works;
    if (parameters)
      for (const Tensor<float>& p : module_->parameters()) works.push_back(group_->broadcast_async(p, 0));
    for (auto& [name, b] : module_->named_buffers()) works.push_back(group_->broadcast_async(b, 0));
    for (auto& w : works) w->wait();
  }

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::shared_ptr<detail::Reducer> reducer_;
  bool sync_ = true;
};

}  // namespace kiln::dist
