// all_reduce bus bandwidth of kiln's MPI backend against Open MPI called directly, nccl-tests' convention:
// algbw = bytes / time, busbw = algbw * 2 (n - 1) / n, for float sums of 1 KB to 256 MB. Three ways per size,
// interleaved round by round so that drift hits all alike, the median of the rounds reported:
//   MPI_Allreduce (blocking, Open MPI's tuned collective), MPI_Iallreduce + MPI_Wait (the non-blocking collective
//   kiln issues) and kiln's ProcessGroup::all_reduce (MPI_Iallreduce polled against the timeout).
//
//   mpirun --allow-run-as-root -np 2 build/bench/bench_allreduce [--max-mb 256] [--rounds 7]
//   mpirun --allow-run-as-root -np 2 build/bench/bench_allreduce --timeline    (one DDP step's buckets)
//
// Rank 0 prints one row per size; docs/performance.md keeps the table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/dist/ddp.hpp"
#include "kiln/dist/mpi.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of fn, over `reps` calls, the ranks started together; the slowest rank's time.
template <class F>
double timed(MPI_Comm comm, int reps, F&& fn) {
  MPI_Barrier(comm);
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) fn();
  double s = std::chrono::duration<double>(Clock::now() - t0).count() / reps;
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, comm);
  return s;
}

int bandwidth(dist::MpiProcessGroup& pg, double max_mb, int rounds) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const int n = pg.size();
  if (pg.rank() == 0) {
    const char* alg = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
    std::printf("all_reduce (float sum) on %d ranks, median of %d rounds; busbw = bytes / time * 2(n-1)/n; "
                "libnbc iallreduce algorithm %s\n", n, rounds, alg ? alg : "(unset)");
    std::printf("%10s %12s %12s %12s | %9s %9s %9s | %12s %12s\n", "bytes", "MPI_Allr us", "MPI_Iallr us",
                "kiln us", "MPI GB/s", "Iallr GB/s", "kiln GB/s", "kiln/MPI", "kiln/Iallr");
  }
  for (int64_t bytes = 1024; bytes <= int64_t(max_mb * 1024 * 1024); bytes *= 4) {
    const int64_t count = bytes / 4;
    Tensor<float> t = ones<float>({count});
    std::vector<float> raw(size_t(count), 1.0f);
    // About 0.1 s per measurement, at least 2 calls.
    const double one = timed(comm, 2, [&] { MPI_Allreduce(MPI_IN_PLACE, raw.data(), int(count), MPI_FLOAT, MPI_SUM, comm); });
    const int reps = std::max(2, int(0.1 / std::max(one, 1e-7)));
    std::vector<double> a, b, k;
    for (int r = 0; r < rounds; ++r) {
      a.push_back(timed(comm, reps, [&] {
        MPI_Allreduce(MPI_IN_PLACE, raw.data(), int(count), MPI_FLOAT, MPI_SUM, comm);
      }));
      b.push_back(timed(comm, reps, [&] {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, raw.data(), int(count), MPI_FLOAT, MPI_SUM, comm, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
      }));
      k.push_back(timed(comm, reps, [&] { pg.all_reduce(t); }));
    }
    const double ta = median(a), tb = median(b), tk = median(k);
    const double factor = 2.0 * (n - 1) / n / 1e9;
    if (pg.rank() == 0)
      std::printf("%10lld %12.2f %12.2f %12.2f | %9.2f %9.2f %9.2f | %12.3f %12.3f\n", (long long)bytes, ta * 1e6,
                  tb * 1e6, tk * 1e6, bytes / ta * factor, bytes / tb * factor, bytes / tk * factor, tk / ta, tk / tb);
    std::fflush(stdout);
  }
  MPI_Comm_free(&comm);
  return 0;
}

// One DDP step of an MLP with about 40 MB of parameters in 25 MB buckets... here 4 MB buckets: when each bucket's
// all_reduce became ready, started and finished, relative to the backward's first gradient.
int timeline(const std::shared_ptr<dist::ProcessGroup>& pg) {
  manual_seed(1);
  nn::Sequential model(nn::Linear(1024, 2048), nn::ReLU(), nn::Linear(2048, 2048), nn::ReLU(), nn::Linear(2048, 1024),
                       nn::ReLU(), nn::Linear(1024, 10));
  dist::DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 4});
  const Tensor<float> x = randn<float>({256, 1024});
  const Tensor<int64_t> y = randint<int64_t>(0, 10, {256});
  for (int step = 0; step < 3; ++step) {  // the last one is printed
    model->zero_grad();
    const auto t0 = Clock::now();
    const Tensor<float> loss = nn::functional::cross_entropy(ddp.forward(x), y);
    const double forward_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto t1 = Clock::now();
    loss.backward();
    const double backward_s = std::chrono::duration<double>(Clock::now() - t1).count();
    if (step < 2 || pg->rank() != 0) continue;
    std::printf("DDP step on %d ranks: forward %.1f ms, backward %.1f ms (first gradient to end: %.1f ms); %zu buckets\n",
                pg->size(), forward_s * 1e3, backward_s * 1e3, ddp.last_backward_seconds() * 1e3, ddp.bucket_count());
    std::printf("%6s %10s %10s %10s %10s\n", "bucket", "MB", "ready ms", "start ms", "done ms");
    const auto params = model->parameters();
    for (size_t b = 0; b < ddp.bucket_count(); ++b) {
      int64_t numel = 0;
      for (const size_t p : ddp.bucket_parameters(b)) numel += params[p].numel();
      const auto& t = ddp.timeline()[b];
      std::printf("%6zu %10.2f %10.2f %10.2f %10.2f\n", b, numel * 4.0 / (1 << 20), t.ready * 1e3, t.started * 1e3,
                  t.finished * 1e3);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double max_mb = 256;
  int rounds = 7;
  bool show_timeline = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--max-mb" && i + 1 < argc) max_mb = std::atof(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--timeline") show_timeline = true;
    else {
      std::fprintf(stderr, "usage: bench_allreduce [--max-mb MB] [--rounds N] [--timeline]\n");
      return 2;
    }
  }
  auto pg = std::make_shared<dist::MpiProcessGroup>(dist::ProcessGroupOptions{.timeout = std::chrono::minutes(5)});
  const int status = show_timeline ? timeline(pg) : bandwidth(*pg, max_mb, rounds);
  pg.reset();
  return status;
}
