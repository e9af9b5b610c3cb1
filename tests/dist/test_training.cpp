// DistributedDataParallel and SyncBatchNorm against single-process training that every rank computes locally on
// the global batch (the data comes from fixed seeds, so each rank knows every rank's part): 20 Adam steps of an
// MLP with several buckets, with a DistributedSampler; no_sync accumulation; find_unused_parameters; bucket layout
// and overlap; mismatched models; a CNN with SyncBatchNorm (BatchNorm2d and BatchNorm1d), parameters and running
// statistics within 1e-5, and the same training with unsynchronized batch norm differing. One file, so that the
// training stack is compiled once for the MPI tests (CI time, docs/ci.md).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <vector>

#include "kiln/data.hpp"
#include "kiln/dist/ddp.hpp"
#include "kiln/dist/mpi.hpp"
#include "kiln/dist/sync_batch_norm.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

nn::Sequential make_mlp(uint64_t seed) {
  manual_seed(seed);
  return nn::Sequential(nn::Linear(10, 32), nn::ReLU(), nn::Linear(32, 16), nn::Tanh(), nn::Linear(16, 4));
}

struct Data {
  Tensor<float> x;
  Tensor<int64_t> y;
};
Data make_data(int64_t n) {
  Generator g(1234);
  return {randn<float>({n, 10}, &g), randint<int64_t>(0, 4, {n}, &g)};
}

// max |a - b| relative to max |b|.
double rel_diff(const Tensor<float>& a, const Tensor<float>& b) {
  return max(abs(a - b)).item() / std::max(1e-30f, max(abs(b)).item());
}

// Rows [r * n / ranks, (r + 1) * n / ranks) of t: rank r's part of a global batch.
template <class T>
Tensor<T> part(const Tensor<T>& t, int r, int ranks) {
  const int64_t n = t.size(0) / ranks;
  return t.narrow(0, r * n, n);
}

}  // namespace

TEST_CASE("DDP: 20 Adam steps with a DistributedSampler equal single-process training on the global batch") {
  auto pg = dist::default_process_group_ptr();
  const int ranks = pg->size();
  const Data d = make_data(96);
  const data::TensorDataset<> ds(d.x, d.y);
  constexpr int64_t kGlobalBatch = 24;  // divisible by 2 and 3 ranks

  nn::Sequential ref = make_mlp(1);
  optim::Adam ref_opt(ref->parameters(), optim::AdamOptions(1e-2));
  data::DataLoader ref_loader(ds, {.batch_size = kGlobalBatch, .shuffle = true, .seed = 11});

  nn::Sequential model = make_mlp(1 + uint64_t(pg->rank()));  // ranks start apart: DDP broadcasts rank 0's
  dist::DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 1024.0 / (1 << 20)});  // 256 floats: 4 buckets
  CHECK(ddp.bucket_count() == 4);
  std::vector<Tensor<float>> initial;
  for (const Tensor<float>& p : model->parameters()) initial.push_back(p.clone());
  for (size_t i = 0; i < initial.size(); ++i) CHECK(rel_diff(initial[i], ref->parameters()[i]) == 0);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  data::DataLoader loader(ds, {.batch_size = kGlobalBatch / ranks, .seed = 11,
                               .sampler = std::make_shared<data::DistributedSampler>(ranks, pg->rank())});
  REQUIRE(loader.size() == ref_loader.size());

  int steps = 0;
  for (int epoch = 0; epoch < 5; ++epoch) {
    auto it = loader.begin();
    for (auto& ref_batch : ref_loader) {
      ref_opt.zero_grad();
      F::cross_entropy(ref(ref_batch.data), ref_batch.target).backward();
      ref_opt.step();
      opt.zero_grad();
      F::cross_entropy(ddp.forward(it->data), it->target).backward();
      opt.step();
      ++it;
      ++steps;
    }
  }
  CHECK(steps == 20);
  const auto params = model->parameters(), ref_params = ref->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(rel_diff(params[i], ref_params[i]) < 1e-5);
    CHECK(rel_diff(params[i], initial[i]) > 1e-3);  // training moved them
  }
}

TEST_CASE("DDP: buckets in reverse order of the parameters; all_reduces start during backward") {
  auto pg = dist::default_process_group_ptr();
  nn::Sequential model = make_mlp(2);
  const size_t n = model->parameters().size();
  {
    dist::DistributedDataParallel one(model, pg);  // 25 MB: one bucket
    REQUIRE(one.bucket_count() == 1);
    std::vector<size_t> reversed;
    for (size_t k = n; k-- > 0;) reversed.push_back(k);
    CHECK(one.bucket_parameters(0) == reversed);
  }
  dist::DistributedDataParallel each(model, pg, {.bucket_cap_mb = 1e-9});  // one parameter per bucket
  REQUIRE(each.bucket_count() == n);
  for (size_t b = 0; b < n; ++b) CHECK(each.bucket_parameters(b) == std::vector<size_t>{n - 1 - b});
  const Data d = make_data(64);
  F::cross_entropy(each.forward(part(d.x, pg->rank(), pg->size())), part(d.y, pg->rank(), pg->size())).backward();
  const auto& t = each.timeline();
  REQUIRE(t.size() == n);
  for (size_t b = 0; b + 1 < n; ++b) CHECK(t[b].started <= t[b + 1].started);
  // The last layer's bucket started before the first layer's gradients were ready: overlap with backward.
  CHECK(t[0].started <= t[n - 1].ready);
  for (size_t b = 0; b < n; ++b) CHECK(t[b].finished <= each.last_backward_seconds());
}

TEST_CASE("DDP no_sync: local accumulation, reduced at the next synchronized backward") {
  auto pg = dist::default_process_group_ptr();
  const int r = pg->rank(), ranks = pg->size();
  const Data d = make_data(24);
  const Tensor<float> x1 = d.x.narrow(0, 0, 12), x2 = d.x.narrow(0, 12, 12);
  const Tensor<int64_t> y1 = d.y.narrow(0, 0, 12), y2 = d.y.narrow(0, 12, 12);

  nn::Sequential model = make_mlp(3);
  dist::DistributedDataParallel ddp(model, pg);
  nn::Sequential local = make_mlp(3);  // this rank's part alone, to check that no_sync did not communicate
  nn::Sequential ref = make_mlp(3);    // the global micro-batches
  {
    auto guard = ddp.no_sync();
    F::cross_entropy(ddp.forward(part(x1, r, ranks)), part(y1, r, ranks)).backward();
  }
  F::cross_entropy(local(part(x1, r, ranks)), part(y1, r, ranks)).backward();
  const auto params = model->parameters(), local_params = local->parameters(), ref_params = ref->parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(rel_diff(params[i].grad(), local_params[i].grad()) < 1e-6);

  F::cross_entropy(ddp.forward(part(x2, r, ranks)), part(y2, r, ranks)).backward();
  F::cross_entropy(ref(x1), y1).backward();
  F::cross_entropy(ref(x2), y2).backward();  // accumulates: the sum of both micro-batches' mean gradients
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(rel_diff(params[i].grad(), ref_params[i].grad()) < 1e-5);
  }
}

namespace {
// A trunk and head a used by every rank, head b only by the ranks that set use_b, `never` by none.
struct TwoHeadsImpl : nn::Module {
  explicit TwoHeadsImpl(bool use_b) : Module("TwoHeads"), use_b(use_b) {
    manual_seed(7);
    trunk = register_module("trunk", nn::Linear(10, 8).ptr());
    a = register_module("a", nn::Linear(8, 4).ptr());
    b = register_module("b", nn::Linear(8, 4).ptr());
    never = register_module("never", nn::Linear(8, 4).ptr());
  }
  Tensor<float> forward(const Tensor<float>& x) override {
    const Tensor<float> h = relu(trunk->forward(x));
    Tensor<float> out = a->forward(h);
    if (use_b) out = Tensor<float>(out + b->forward(h));
    return out;
  }
  std::shared_ptr<nn::LinearImpl> trunk, a, b, never;
  bool use_b;
};
}  // namespace

TEST_CASE("DDP find_unused_parameters: a head used on rank 0 only gets rank 0's gradient / size; unused stays none") {
  auto pg = dist::default_process_group_ptr();
  const int ranks = pg->size();
  const Data d = make_data(12 * ranks);
  auto model = std::make_shared<TwoHeadsImpl>(pg->rank() == 0);
  dist::DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 1e-4, .find_unused_parameters = true});
  // Expected: the average over ranks of each rank's gradient, rank q's computed here from its part.
  std::vector<Tensor<float>> expect;
  for (int q = 0; q < ranks; ++q) {
    TwoHeadsImpl m(q == 0);
    F::cross_entropy(m.forward(part(d.x, q, ranks)), part(d.y, q, ranks)).backward();
    const auto ps = m.parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      const Tensor<float> g = ps[i].grad().defined() ? ps[i].grad() : zeros<float>(ps[i].shape());
      if (q == 0) expect.push_back(Tensor<float>(g / float(ranks)));
      else expect[i] = Tensor<float>(expect[i] + g / float(ranks));
    }
  }
  for (int step = 0; step < 2; ++step) {  // twice: the reducer's state resets between iterations
    model->zero_grad();
    F::cross_entropy(ddp.forward(part(d.x, pg->rank(), ranks)), part(d.y, pg->rank(), ranks)).backward();
    const auto named = model->named_parameters();
    for (size_t i = 0; i < named.size(); ++i) {
      CAPTURE(named[i].first);
      if (named[i].first.rfind("never.", 0) == 0) {
        CHECK(!named[i].second.grad().defined());
        continue;
      }
      REQUIRE(named[i].second.grad().defined());
      CHECK(rel_diff(named[i].second.grad(), expect[i]) < 1e-5);
    }
  }
}

TEST_CASE("DDP without find_unused_parameters: a parameter without gradient makes the next forward throw") {
  auto pg = dist::default_process_group_ptr();
  const Data d = make_data(8);
  auto model = std::make_shared<TwoHeadsImpl>(true);
  dist::DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 1e-4});
  F::cross_entropy(ddp.forward(d.x), d.y).backward();
  CHECK_THROWS_WITH_AS(ddp.forward(d.x), doctest::Contains("no gradient for parameter(s) never.weight, never.bias"),
                       std::logic_error);
}

TEST_CASE("DDP: ranks with different models get a ShapeError naming both") {
  auto pg = dist::default_process_group_ptr();
  nn::Sequential model = pg->rank() == 0 ? nn::Sequential(nn::Linear(4, 3)) : nn::Sequential(nn::Linear(4, 2));
  CHECK_THROWS_WITH_AS(dist::DistributedDataParallel(model, pg), doctest::Contains("every rank must build the same model"),
                       ShapeError);
}

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
