#pragma once
// --distributed: data-parallel training of the example under mpirun (docs/distributed.md).
//
//   mpirun -np 2 fashion_mnist --distributed [--batch-size 64 ...]
//
// Each rank trains the same model on its part of every global batch (--batch-size is the global batch, split
// evenly: it must be a multiple of the number of ranks), through DistributedDataParallel with the batch norm
// layers synchronized (SyncBatchNorm), so that a step sees the same batch and statistics as one process with the
// whole batch. The data comes from a DistributedSampler over the loader's shuffle; rank 0 alone prints and writes
// the checkpoint and curves; every rank evaluates the test set (eval mode needs no communication). Built when Meson
// finds Open MPI (FASHION_MNIST_MPI); otherwise --distributed explains that.
#include <cstdio>
#include <memory>

#include "kiln/data.hpp"
#include "kiln/nn.hpp"
#ifdef FASHION_MNIST_MPI
#include "kiln/dist/ddp.hpp"
#include "kiln/dist/mpi.hpp"
#include "kiln/dist/sync_batch_norm.hpp"
#endif

namespace fashion_mnist {

class Replicas {
 public:
  // One process (no MPI) unless `distributed`.
  Replicas(bool distributed, kiln::nn::Sequential& net) : net_(net) {
    if (!distributed) return;
#ifdef FASHION_MNIST_MPI
    kiln::dist::init_process_group("mpi", std::chrono::minutes(10));
    pg_ = kiln::dist::default_process_group_ptr();
    kiln::nn::convert_sync_batchnorm(net, pg_);
    ddp_ = std::make_unique<kiln::dist::DistributedDataParallel>(net, pg_);
#else
    throw std::runtime_error("--distributed: this build has no MPI (install libopenmpi-dev and openmpi-bin, rebuild)");
#endif
  }
  ~Replicas() {
#ifdef FASHION_MNIST_MPI
    ddp_.reset();
    pg_.reset();
    if (kiln::dist::is_initialized()) kiln::dist::destroy_process_group();
#endif
  }
  int rank() const { return pg_ ? pg_->rank() : 0; }
  int size() const { return pg_ ? pg_->size() : 1; }
  bool main() const { return rank() == 0; }

  // The loader options for this rank: its share of the global batch, from a DistributedSampler.
  kiln::data::DataLoaderOptions loader_options(kiln::data::DataLoaderOptions global) const {
    if (!pg_) return global;
    kiln::check(global.batch_size % size() == 0, "--distributed: --batch-size ", global.batch_size,
                " is not a multiple of the ", size(), " ranks");
    global.batch_size /= size();
    global.sampler = std::make_shared<kiln::data::DistributedSampler>(size(), rank(), global.shuffle);
    global.shuffle = false;
    return global;
  }

  kiln::Tensor<float> forward(const kiln::Tensor<float>& x) {
#ifdef FASHION_MNIST_MPI
    if (ddp_) return ddp_->forward(x);
#endif
    return net_(x);
  }

  // Sums of this rank's statistics over all ranks (in place).
  void sum(std::vector<double>& values) const {
#ifdef FASHION_MNIST_MPI
    if (!pg_) return;
    kiln::Tensor<double> t = kiln::tensor<double>(values);
    pg_->all_reduce(t);
    values = t.to_vector();
#else
    (void)values;
#endif
  }

 private:
  kiln::nn::Sequential& net_;
#ifdef FASHION_MNIST_MPI
  std::shared_ptr<kiln::dist::ProcessGroup> pg_;
  std::unique_ptr<kiln::dist::DistributedDataParallel> ddp_;
#else
  struct NoGroup {
    int rank() const { return 0; }
    int size() const { return 1; }
    explicit operator bool() const { return false; }
    const NoGroup* operator->() const { return this; }
  } pg_;
#endif
};

}  // namespace fashion_mnist
