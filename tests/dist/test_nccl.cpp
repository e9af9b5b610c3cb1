// What only the NCCL backend does, on the emulated device and NCCL (tests/cuda_null/emulated: each rank a process
// with its own device, the ranks exchanging through files): its declarations of NCCL's ABI against the Toolkit's
// nccl.h; CUDA tensors only, contiguous ones only, named errors otherwise; the check_shapes mode on a second group
// made over the first; DistributedDataParallel on CUDA tensors, with and without SyncBatchNorm, equal to
// single-process training on the CPU; the
// Toolkit's real libnccl loaded beside the emulated one.
// The collectives common to every backend: test_collectives.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "expectations.hpp"
#include "kiln/data.hpp"
#include "kiln/dist/ddp.hpp"
#include "kiln/dist/nccl.hpp"
#include "kiln/dist/sync_batch_norm.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

#if __has_include(<nccl.h>)
#include <nccl.h>
// kiln loads NCCL at run time with declarations of its own (dist/nccl_api.hpp): they must be the Toolkit's.
namespace nccl_abi {
namespace k = kiln::dist::nccl;
static_assert(sizeof(k::UniqueId) == sizeof(ncclUniqueId));
static_assert(offsetof(k::Config, size) == offsetof(ncclConfig_t, size));
static_assert(offsetof(k::Config, magic) == offsetof(ncclConfig_t, magic));
static_assert(offsetof(k::Config, version) == offsetof(ncclConfig_t, version));
static_assert(offsetof(k::Config, blocking) == offsetof(ncclConfig_t, blocking));
static_assert(offsetof(k::Config, cga_cluster_size) == offsetof(ncclConfig_t, cgaClusterSize));
static_assert(offsetof(k::Config, min_ctas) == offsetof(ncclConfig_t, minCTAs));
static_assert(offsetof(k::Config, max_ctas) == offsetof(ncclConfig_t, maxCTAs));
static_assert(offsetof(k::Config, net_name) == offsetof(ncclConfig_t, netName));
static_assert(int(k::kSuccess) == ncclSuccess && int(k::kInProgress) == ncclInProgress &&
              int(k::kInvalidArgument) == ncclInvalidArgument && int(k::kRemoteError) == ncclRemoteError);
static_assert(int(k::kInt8) == ncclInt8 && int(k::kUint8) == ncclUint8 && int(k::kInt32) == ncclInt32 &&
              int(k::kInt64) == ncclInt64 && int(k::kFloat16) == ncclFloat16 && int(k::kFloat32) == ncclFloat32 &&
              int(k::kFloat64) == ncclFloat64 && int(k::kBfloat16) == ncclBfloat16);
static_assert(int(k::kSum) == ncclSum && int(k::kProd) == ncclProd && int(k::kMax) == ncclMax &&
              int(k::kMin) == ncclMin && int(k::kAvg) == ncclAvg);
static_assert(std::is_same_v<decltype(&ncclAllReduce), ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t,
                                                                          ncclRedOp_t, ncclComm_t, cudaStream_t)>);
}  // namespace nccl_abi
#endif

using namespace kiln;
using namespace kiln::dist_test;
using dist::ReduceOp;

namespace {
bool real_nccl_present() {
  try {
    cuda::DynamicLibrary probe("NCCL", {"libnccl.so.2"});
    return true;
  } catch (const cuda::CudaUnavailableError&) {
    return false;
  }
}
}  // namespace

// (The emulated NCCL is the group's; this loads the real one beside it, where the Toolkit put one.)
TEST_CASE("nccl: the real libnccl.so.2 has every function kiln calls, is 2.14 or later, and makes unique ids" *
          doctest::skip(!real_nccl_present())) {
  // Never unloaded, as kiln's own: ncclGetUniqueId leaves a bootstrap thread running in the library.
  static dist::nccl::Library& real = *new dist::nccl::Library({"libnccl.so.2"});
  CHECK(real.version() >= 21400);
  dist::nccl::UniqueId a{}, b{};
  REQUIRE(real.get_unique_id(&a) == dist::nccl::kSuccess);
  REQUIRE(real.get_unique_id(&b) == dist::nccl::kSuccess);
  CHECK(std::memcmp(a.internal, b.internal, sizeof a.internal) != 0);
  CHECK(real.error(dist::nccl::kInvalidArgument).find("invalid argument") != std::string::npos);
}

TEST_CASE("nccl: the group's device; CPU and non-contiguous tensors are refused, naming the operation") {
  auto& pg = group();
  CHECK(pg.backend() == "nccl");
  CHECK(pg.device() == Device(kCUDA, 0));
  CHECK_THROWS_WITH_AS(pg.all_reduce(ones<float>({4})),
                       doctest::Contains("all_reduce: the nccl backend takes tensors on cuda:0 (this rank's device); got "
                                         "one on cpu (use the mpi backend for CPU tensors)"),
                       std::invalid_argument);
  Tensor<float> base = zeros<float>({4, 6}, here());
  CHECK_THROWS_WITH_AS(pg.broadcast(base.transpose(0, 1)),
                       doctest::Contains("broadcast: the nccl backend takes contiguous tensors; got shape [6, 4]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(pg.recv(ones<int32_t>({2}), (pg.rank() + 1) % pg.size()), doctest::Contains("recv: the nccl"),
                       std::invalid_argument);
  CHECK(!pg.aborted());
}

TEST_CASE("nccl check_shapes: a second group over the first; ranks with different sizes all get a DistError") {
  dist::NcclProcessGroup pg({.timeout = std::chrono::seconds(20), .check_shapes = true}, group());
  CHECK(pg.size() == group().size());
  CHECK(pg.rank() == group().rank());
  Tensor<float> t = ones<float>({pg.rank() == 0 ? 4 : 5}, here());
  try {
    pg.all_reduce(t);
    FAIL("no DistError");
  } catch (const dist::DistError& e) {
    CHECK(e.op() == "all_reduce");
    CHECK(std::string(e.what()).find("check_shapes: the ranks called it with different arguments") != std::string::npos);
  }
  CHECK(!pg.aborted());
  Tensor<float> u = ones<float>({6}, here());
  pg.all_reduce(u, ReduceOp::avg);
  CHECK(u.cpu().to_vector() == std::vector<float>(6, 1.0f));
}

namespace {
// 10 Adam steps of make(seed) on CUDA tensors under DDP (its batch norms synchronized when sync_batchnorm), each rank
// on its part of a global batch of 12, against the same steps on the CPU in one process on the whole batch:
// parameters and buffers (running statistics) within 1e-5 relative.
void check_ddp_equals_single_process(const std::function<nn::Sequential(uint64_t)>& make, bool sync_batchnorm) {
  auto pg = dist::default_process_group_ptr();
  const int ranks = pg->size();
  constexpr int64_t kGlobalBatch = 12;  // divisible by 2 and 3 ranks
  Generator g(77);
  const Tensor<float> x = randn<float>({10 * kGlobalBatch, 6}, &g);
  const Tensor<int64_t> y = randint<int64_t>(0, 3, {10 * kGlobalBatch}, &g);
  nn::Sequential ref = make(5);
  optim::Adam ref_opt(ref->parameters(), optim::AdamOptions(1e-2));
  nn::Sequential model = make(5 + uint64_t(pg->rank()));  // apart until DDP broadcasts rank 0's parameters
  model->to(here());
  if (sync_batchnorm) CHECK(nn::convert_sync_batchnorm(*model.ptr(), pg) > 0);
  dist::DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 64.0 * 4 / (1 << 20)});  // 64 floats a bucket
  CHECK(ddp.bucket_count() >= 2);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  const int64_t local = kGlobalBatch / ranks;
  for (int step = 0; step < 10; ++step) {
    const Tensor<float> xb = x.narrow(0, step * kGlobalBatch, kGlobalBatch);
    const Tensor<int64_t> yb = y.narrow(0, step * kGlobalBatch, kGlobalBatch);
    ref_opt.zero_grad();
    nn::functional::cross_entropy(ref->forward(xb), yb).backward();
    ref_opt.step();
    opt.zero_grad();
    const Tensor<float> mine = xb.narrow(0, pg->rank() * local, local).contiguous().to(here());
    const Tensor<int64_t> labels = yb.narrow(0, pg->rank() * local, local).contiguous().to(here());
    nn::functional::cross_entropy(ddp.forward(mine), labels).backward();
    opt.step();
  }
  auto compare = [](const auto& want, const auto& got) {
    REQUIRE(want.size() == got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const Tensor<float> w = want[i].second, h = got[i].second.cpu();
      const double scale = std::max(1e-30f, max(abs(w)).item());
      CHECK_MESSAGE(max(abs(h - w)).item() / scale < 1e-5, want[i].first);
    }
  };
  compare(ref->named_parameters(), model->named_parameters());
  compare(ref->named_buffers(), model->named_buffers());
}
}  // namespace

TEST_CASE("nccl DDP: 10 Adam steps of an MLP on CUDA tensors equal single-process training on the CPU") {
  check_ddp_equals_single_process([](uint64_t seed) {
    manual_seed(seed);
    return nn::Sequential(nn::Linear(6, 16), nn::Tanh(), nn::Linear(16, 3));
  }, false);
}

TEST_CASE("nccl SyncBatchNorm: DDP of an MLP with batch norm on CUDA tensors equals single-process training") {
  check_ddp_equals_single_process([](uint64_t seed) {
    manual_seed(seed);
    // (The first layer without a bias: batch norm takes the mean out, so that bias's gradient is rounding noise,
    // which Adam would scale up to full steps that differ between any two ways of computing it.)
    return nn::Sequential(nn::Linear(nn::LinearOptions(6, 16).bias(false)), nn::BatchNorm1d(16), nn::Tanh(),
                          nn::Linear(16, 3));
  }, true);
}
