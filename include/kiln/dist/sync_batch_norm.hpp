#pragma once
// nn::SyncBatchNorm and nn::convert_sync_batchnorm, as torch.nn.SyncBatchNorm: in training, batch norm whose mean
// and variance are over every rank's batch together (two small all_reduces in the forward, one in the backward),
// so that data-parallel training with a per-rank batch of B / ranks normalizes as one process with batch B would.
//
//   nn::Sequential model = make_model();                 // with BatchNorm2d layers
//   nn::convert_sync_batchnorm(model, pg);                // in place, returns model
//   dist::DistributedDataParallel ddp(model, pg);
//
// Departure from torch: convert_sync_batchnorm switches the existing BatchNorm modules to synchronized statistics
// in place instead of building new SyncBatchNorm modules, because a kiln module's parent may hold its children by
// their own type (`std::shared_ptr<BatchNorm2dImpl> bn` in a user's module), which a replacement would leave
// pointing at the old one. They print with ", synchronized". Evaluation mode uses the running statistics, without
// communication, as torch's. The weight and bias gradients stay per rank (DDP averages them).
#include <algorithm>
#include <memory>
#include <vector>

#include "kiln/dist/functional.hpp"
#include "kiln/dist/init.hpp"
#include "kiln/dist/process_group.hpp"
#include "kiln/nn/normalization.hpp"

namespace kiln::nn {

// A ReplicaSum that all-reduces over `group`: host vectors through a tensor on the group's device, CUDA tensors
// differentiably (dist::functional::all_reduce).
inline functional::detail::ReplicaSum replica_sum_over(std::shared_ptr<dist::ProcessGroup> group) {
  check<std::invalid_argument>(bool(group), "SyncBatchNorm: the process group is null");
  auto host = [group](std::vector<double>& values) {
    Tensor<double> t = tensor<double>(values).to(group->device());
    group->all_reduce(t);
    const Tensor<double> h = t.cpu();
    std::copy(h.data_ptr(), h.data_ptr() + h.numel(), values.begin());
  };
  auto device = [group](const Tensor<float>& t) { return dist::functional::all_reduce(t, group); };
  return {host, device};
}

// Batch norm over inputs [N, C, ...] of any rank, synchronized over `group` (the default group by default).
class SyncBatchNormImpl : public BatchNormImpl {
 public:
  explicit SyncBatchNormImpl(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                             std::shared_ptr<dist::ProcessGroup> group = dist::default_process_group_ptr())
      : BatchNormImpl("SyncBatchNorm", 2, 8, num_features, eps, momentum) {
    set_replica_sum(replica_sum_over(std::move(group)));
  }
};
KILN_MODULE(SyncBatchNorm);

// Makes every BatchNorm1d / BatchNorm2d in module's tree synchronized over group; returns how many it changed.
inline int convert_sync_batchnorm(Module& module, const std::shared_ptr<dist::ProcessGroup>& group) {
  int changed = 0;
  if (auto* bn = dynamic_cast<BatchNormImpl*>(&module)) {
    bn->set_replica_sum(replica_sum_over(group));
    ++changed;
  }
  for (auto& [name, child] : module.named_children()) changed += convert_sync_batchnorm(*child, group);
  return changed;
}
template <class Holder>
  requires requires(const Holder& h) { *h.ptr(); }
const Holder& convert_sync_batchnorm(const Holder& module,
                                     const std::shared_ptr<dist::ProcessGroup>& group = dist::default_process_group_ptr()) {
  convert_sync_batchnorm(static_cast<Module&>(*module.ptr()), group);
  return module;
}

}  // namespace kiln::nn
