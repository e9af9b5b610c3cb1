// nn::SyncBatchNorm through DistributedDataParallel against single-process training with plain batch norm on the
// global batch, which every rank computes locally: a CNN with BatchNorm2d and BatchNorm1d, 20 Adam steps, each
// rank a part of every global batch; parameters and running statistics within 1e-5. The same training with
// unsynchronized batch norm must differ (the check can fail).
#include <doctest/doctest.h>

#include <sstream>

#include "kiln/dist/ddp.hpp"
#include "kiln/dist/mpi.hpp"
#include "kiln/dist/sync_batch_norm.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

// The layers before batch norm have no bias, as usual: batch norm removes it, so its gradient is rounding noise,
// which Adam's normalization turns into full-size steps (measured: with biases they drift apart by 10% while every
// other value agrees).
nn::Sequential make_cnn() {
  manual_seed(21);
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1).bias(false)), nn::BatchNorm2d(4), nn::ReLU(),
                        nn::MaxPool2d(2), nn::Flatten(), nn::Linear(nn::LinearOptions(64, 8).bias(false)),
                        nn::BatchNorm1d(8), nn::ReLU(), nn::Linear(8, 3));
}

double rel_diff(const Tensor<float>& a, const Tensor<float>& b) {
  return max(abs(a - b)).item() / std::max(1e-30f, max(abs(b)).item());
}

// 20 Adam steps over batches of 12 of 48 images; with pg, this rank's part of each batch through DDP.
std::map<std::string, Tensor<float>> train(nn::Sequential model, std::shared_ptr<dist::ProcessGroup> pg) {
  Generator g(99);
  const Tensor<float> x = randn<float>({48, 1, 8, 8}, &g);
  const Tensor<int64_t> y = randint<int64_t>(0, 3, {48}, &g);
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (pg) ddp = std::make_unique<dist::DistributedDataParallel>(model, pg);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  for (int step = 0; step < 20; ++step) {
    int64_t first = (step % 4) * 12, n = 12;
    if (pg) {
      n = 12 / pg->size();
      first += pg->rank() * n;
    }
    const Tensor<float> xb = x.narrow(0, first, n);
    opt.zero_grad();
    F::cross_entropy(ddp ? ddp->forward(xb) : model(xb), y.narrow(0, first, n)).backward();
    opt.step();
  }
  return model->state_dict();
}

}  // namespace

TEST_CASE("SyncBatchNorm: DDP training of a CNN equals single-process training on the global batch") {
  auto pg = dist::default_process_group_ptr();
  const auto ref = train(make_cnn(), nullptr);

  nn::Sequential synced = make_cnn();
  nn::convert_sync_batchnorm(synced, pg);
  std::ostringstream printed;
  printed << *synced.ptr();
  CHECK(printed.str().find("BatchNorm2d(4, eps=1e-05, momentum=0.1, synchronized)") != std::string::npos);
  const auto got = train(synced, pg);
  REQUIRE(got.size() == ref.size());
  for (auto& [name, t] : ref) {
    CAPTURE(name);
    if (name.find("num_batches_tracked") != std::string::npos) {
      CHECK(got.at(name).item() == 20);
      continue;
    }
    CHECK(rel_diff(got.at(name), t) < 1e-5);
  }

  const auto local_bn = train(make_cnn(), pg);  // per-rank statistics: not the same training
  double worst = 0;
  for (auto& [name, t] : ref)
    if (name.find("num_batches_tracked") == std::string::npos) worst = std::max(worst, rel_diff(local_bn.at(name), t));
  CHECK(worst > 1e-3);
}

TEST_CASE("SyncBatchNorm module: statistics over all ranks' rows; eval mode uses the running statistics") {
  auto pg = dist::default_process_group_ptr();
  const int r = pg->rank(), ranks = pg->size();
  Generator g(5);
  const Tensor<float> all = randn<float>({4 * ranks, 3, 5}, &g);  // rank q owns rows 4q .. 4q + 3
  nn::SyncBatchNorm sbn(3);
  nn::BatchNorm1d plain(3);
  const Tensor<float> mine = all.narrow(0, 4 * r, 4).clone().requires_grad_();
  const Tensor<float> whole = all.clone().requires_grad_();
  const Tensor<float> y = sbn(mine), ref = plain(whole);
  CHECK(rel_diff(y, ref.narrow(0, 4 * r, 4)) < 1e-5);
  CHECK(rel_diff(sbn->running_var, plain->running_var) < 1e-6);
  // A loss on every rank's rows: the input gradient of this rank's rows matches the global one.
  sum(y * y).backward();
  sum(ref * ref).backward();
  CHECK(rel_diff(mine.grad(), whole.grad().narrow(0, 4 * r, 4)) < 1e-5);
  sbn->eval();
  plain->eval();
  CHECK(rel_diff(sbn(mine), plain(whole).narrow(0, 4 * r, 4)) < 1e-5);  // no communication in eval
}
