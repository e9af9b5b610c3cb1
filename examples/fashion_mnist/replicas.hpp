#pragma once
// --distributed: data-parallel training of the example under mpirun (docs/distributed.md).
//
//   mpirun -np 2 fashion_mnist --distributed [--batch-size 64 ...]     (CPU tensors, over MPI)
//   mpirun -np 2 fashion_mnist --distributed --device cuda             (a GPU per rank, over NCCL)
//   RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 KILN_STORE_PATH=/tmp/id fashion_mnist --distributed --device cuda &  (and rank 1)
//
// Each rank trains the same model on its part of every global batch (--batch-size is the global batch, split
// evenly: it must be a multiple of the number of ranks), through DistributedDataParallel with the batch norm
// layers synchronized (SyncBatchNorm), so that a step sees the same batch and statistics as one process with the
// whole batch. The data comes from a DistributedSampler over the loader's shuffle; rank 0 alone prints and writes
// the checkpoint and curves; every rank evaluates the test set (eval mode needs no communication). On the CPU it
// needs Open MPI (FASHION_MNIST_MPI, when Meson finds it); on CUDA devices NCCL, with the ranks' NCCL id over MPI
// under mpirun or through a file store without it (RANK, WORLD_SIZE, KILN_STORE_PATH: docs/distributed.md), or
// alone as a group of one.
#include <cstdio>
#include <memory>

#include "kiln/data.hpp"
#include "kiln/dist/ddp.hpp"
#include "kiln/dist/nccl.hpp"
#include "kiln/dist/sync_batch_norm.hpp"
#include "kiln/nn.hpp"
#ifdef FASHION_MNIST_MPI
#include "kiln/dist/mpi.hpp"
#endif

namespace fashion_mnist {

class Replicas {
 public:
  // One process unless `distributed`; net is on `device` already (the group's collectives work there: NCCL for a
  // CUDA device, MPI for the CPU).
  Replicas(bool distributed, kiln::nn::Sequential& net, kiln::Device device) : net_(net) {
    if (!distributed) return;
#ifndef FASHION_MNIST_MPI
    if (!device.is_cuda())
      throw std::runtime_error("--distributed on the CPU: this build has no MPI (install libopenmpi-dev and "
                               "openmpi-bin, rebuild)");
#endif
    kiln::dist::init_process_group(device.is_cuda() ? "nccl" : "mpi", std::chrono::minutes(10));
    pg_ = kiln::dist::default_process_group_ptr();
    kiln::nn::convert_sync_batchnorm(net, pg_);
    ddp_ = std::make_unique<kiln::dist::DistributedDataParallel>(net, pg_);
  }
  ~Replicas() {
    ddp_.reset();
    pg_.reset();
    if (kiln::dist::is_initialized()) kiln::dist::destroy_process_group();
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

  kiln::Tensor<float> forward(const kiln::Tensor<float>& x) { return ddp_ ? ddp_->forward(x) : net_(x); }

  // Sums of this rank's statistics over all ranks (in place).
  void sum(std::vector<double>& values) const {
    if (!pg_) return;
    kiln::Tensor<double> t = kiln::tensor<double>(values).to(pg_->device());
    pg_->all_reduce(t);
    values = t.cpu().to_vector();
  }

 private:
  kiln::nn::Sequential& net_;
  std::shared_ptr<kiln::dist::ProcessGroup> pg_;
  std::unique_ptr<kiln::dist::DistributedDataParallel> ddp_;
};

}  // namespace fashion_mnist
