// The NCCL backend's single-rank path (a group of this process alone, as on a machine with one GPU): every
// collective through NCCL on CUDA tensors, ordered after the kernels queued before it on the current stream, and
// DistributedDataParallel of one rank equal to plain training. In CI on the emulated device and NCCL
// (KILN_NCCL_LIBRARY, set by tests/meson.build); on a GPU with the machine's libnccl (tests/gpu/run.sh), skipped
// where there is no CUDA device or no NCCL. Several ranks: tests/dist (kiln_nccl_emulated_tests).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kiln/dist/ddp.hpp"
#include "kiln/dist/nccl.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

namespace test_cuda_emulated_nccl {

using namespace kiln;
using dist::ReduceOp;

namespace {

bool nccl_usable() {
  if (!cuda::is_available()) return false;
  try {
    dist::nccl::Library::get();
    return true;
  } catch (const cuda::CudaUnavailableError& e) {
    MESSAGE("no NCCL: ", e.what());
    return false;
  }
}
auto no_nccl() { return doctest::skip(!nccl_usable()); }

std::shared_ptr<dist::ProcessGroup> single_rank_group() {
  static const auto group = std::make_shared<dist::NcclProcessGroup>(
      dist::ProcessGroupOptions{.timeout = std::chrono::seconds(60)});
  return group;
}

const Device kCuda0(kCUDA, 0);

template <class T>
std::vector<T> host(const Tensor<T>& t) {
  return t.cpu().to_vector();
}

}  // namespace

TEST_CASE("nccl single rank: every collective leaves the values a group of one must" * no_nccl()) {
  auto pg = single_rank_group();
  REQUIRE(pg->size() == 1);
  CHECK(pg->rank() == 0);
  CHECK(pg->device() == kCuda0);
  Generator g(3);
  const Tensor<float> x = randn<float>({1001}, &g);
  const std::vector<float> want = x.to_vector();
  for (const ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max, ReduceOp::product}) {
    Tensor<float> t = x.to(kCuda0);
    pg->all_reduce(t, op);
    CHECK(host(t) == want);
  }
  Tensor<int64_t> i = arange<int64_t>(0, 77).to(kCuda0);
  pg->broadcast(i, 0);
  pg->reduce(i, 0, ReduceOp::max);
  CHECK(host(i) == arange<int64_t>(0, 77).to_vector());
  Tensor<float> gathered = full<float>({1, 1001}, -1.0f, kCuda0);
  pg->all_gather(gathered, x.to(kCuda0));
  CHECK(host(gathered.reshape({1001})) == want);
  Tensor<float> scattered = zeros<float>({1001}, kCuda0);
  pg->reduce_scatter(scattered, x.to(kCuda0));
  CHECK(host(scattered) == want);
  Tensor<float> swapped = zeros<float>({1001}, kCuda0);
  pg->all_to_all(swapped, x.to(kCuda0));
  CHECK(host(swapped) == want);
  Tensor<bfloat16> h = x.to<bfloat16>().to(kCuda0);
  pg->all_reduce(h, ReduceOp::avg);
  CHECK(host(h.to<float>()) == x.to<bfloat16>().to<float>().to_vector());
  pg->barrier();
  CHECK(!pg->aborted());
}

TEST_CASE("nccl single rank: a collective sees what the kernels queued before it wrote" * no_nccl()) {
  auto pg = single_rank_group();
  Tensor<float> t = full<float>({1 << 20}, 1.0f, kCuda0);
  for (int k = 0; k < 4; ++k) {
    t.copy_(t * 2.0f + 1.0f);  // queued on the current stream; the all_reduce runs on the group's own
    pg->all_reduce(t, ReduceOp::max);
  }
  const std::vector<float> v = host(t);
  CHECK(v.front() == 31.0f);
  CHECK(v.back() == 31.0f);
}

TEST_CASE("nccl single rank: DistributedDataParallel of one rank trains as the module alone" * no_nccl()) {
  auto make = [] {
    manual_seed(9);
    nn::Sequential m(nn::Linear(5, 8), nn::Tanh(), nn::Linear(8, 2));
    m->to(kCuda0);
    return m;
  };
  nn::Sequential plain = make(), wrapped = make();
  dist::DistributedDataParallel ddp(wrapped, single_rank_group());
  optim::SGD plain_opt(plain->parameters(), optim::SGDOptions(0.1)), ddp_opt(wrapped->parameters(), optim::SGDOptions(0.1));
  Generator g(4);
  for (int step = 0; step < 3; ++step) {
    const Tensor<float> x = randn<float>({6, 5}, &g).to(kCuda0);
    const Tensor<int64_t> y = randint<int64_t>(0, 2, {6}, &g).to(kCuda0);
    plain_opt.zero_grad();
    nn::functional::cross_entropy(plain->forward(x), y).backward();
    plain_opt.step();
    ddp_opt.zero_grad();
    nn::functional::cross_entropy(ddp.forward(x), y).backward();
    ddp_opt.step();
  }
  const auto a = plain->parameters(), b = wrapped->parameters();
  for (size_t k = 0; k < a.size(); ++k) CHECK(host(a[k]) == host(b[k]));
}

}  // namespace test_cuda_emulated_nccl
