#pragma once
// kiln::dist::ProcessGroup: the communicator interface every backend implements (MPI in <kiln/dist/mpi.hpp> for CPU
// tensors, NCCL in <kiln/dist/nccl.hpp> for CUDA tensors),
// as torch.distributed's ProcessGroup. Collectives take AnyTensor, so any dtype goes through one interface (a
// Tensor<T> converts implicitly and is shared, so in-place results land in it):
//
//   pg.all_reduce(grad);                          // in place, ReduceOp::sum by default
//   auto work = pg.all_reduce_async(grad, ReduceOp::avg);
//   ...                                           // overlap other work
//   work->wait();                                 // DistError after the group's timeout
//
// Every collective has an async form returning a Work handle (wait(), is_completed()); the blocking form is the
// async one followed by wait(). All ranks must call the same collectives in the same order with tensors of the
// same dtype and size (the MPI backend can check this first: options.check_shapes). A collective that does not
// complete within the group's timeout (a rank exited or hangs) throws DistError naming the operation and this
// rank, never hangs; the group is then aborted: every later call throws DistError at once (docs/distributed.md).
//
// This header includes no MPI or NCCL header: code that only takes a ProcessGroup& compiles without them.
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "kiln/core/error.hpp"
#include "kiln/tensor/any_tensor.hpp"

namespace kiln::dist {

enum class ReduceOp { sum, avg, min, max, product };

constexpr const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::product: return "product";
  }
  return "?";
}

// A collective that failed or timed out. what() starts with the operation ("all_reduce: ..."); op() and rank()
// (this process's rank in the group) are there for code that reacts to it.
struct DistError : std::runtime_error {
  DistError(std::string op, int rank, const std::string& message)
      : std::runtime_error(detail::cat(op, ": ", message)), op_(std::move(op)), rank_(rank) {}
  const std::string& op() const { return op_; }
  int rank() const { return rank_; }

 private:
  std::string op_;
  int rank_;
};

// A collective in flight. wait() returns once it completed (its results are then in the tensors) and throws
// DistError when it failed or did not complete within the group's timeout, counted from its start.
// is_completed() polls without blocking (and also throws on failure or timeout). Destroying an unfinished Work
// waits for it (the tensors it writes must outlive the transfer).
class Work {
 public:
  virtual ~Work() = default;
  virtual bool is_completed() = 0;
  virtual void wait() = 0;
};

struct ProcessGroupOptions {
  std::chrono::milliseconds timeout = std::chrono::minutes(30);  // torch.distributed's default
  // Before each collective, all ranks exchange dtype and size and throw DistError on a mismatch (one extra
  // small collective per call: a debug mode). KILN_DIST_CHECK_SHAPES=1 in the environment turns it on too.
  bool check_shapes = false;
  // NCCL: the CUDA device of this rank; -1: LOCAL_RANK (or Open MPI's local rank) modulo the devices, else 0.
  int device = -1;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  // Where the tensors of its collectives live: the CPU for MPI, the group's CUDA device for NCCL.
  virtual Device device() const { return kCPU; }
  // True after a collective failed or timed out: every call throws DistError from then on.
  virtual bool aborted() const = 0;
  // Ends the whole job (MPI_Abort): for a rank that caught a DistError and wants its hung peers gone too.
  [[noreturn]] virtual void abort_job(int exit_code) = 0;
  // While on, the backend moves operations in flight along from a background thread (where it needs one: MPI),
  // so that they progress while this thread computes. DistributedDataParallel switches it on during backward.
  virtual void set_background_progress(bool) {}

  // ---- async forms (every rank calls the same ones in the same order) ----
  // In place: every rank's tensor becomes the reduction of all ranks' tensors. avg: floating dtypes only.
  virtual std::shared_ptr<Work> all_reduce_async(const AnyTensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
  // In place: every rank's tensor becomes root's.
  virtual std::shared_ptr<Work> broadcast_async(const AnyTensor& tensor, int root = 0) = 0;
  // In place on root (the reduction of all ranks' tensors); other ranks' tensors are left as they were.
  virtual std::shared_ptr<Work> reduce_async(const AnyTensor& tensor, int root = 0, ReduceOp op = ReduceOp::sum) = 0;
  // output (numel = size() * input.numel(), same dtype) holds every rank's input in rank order.
  virtual std::shared_ptr<Work> all_gather_async(const AnyTensor& output, const AnyTensor& input) = 0;
  // input (numel = size() * output.numel()) is reduced over ranks; rank r gets part r of the result.
  virtual std::shared_ptr<Work> reduce_scatter_async(const AnyTensor& output, const AnyTensor& input,
                                                     ReduceOp op = ReduceOp::sum) = 0;
  // input and output of equal numel, a multiple of size(): part j of rank i's input becomes part i of rank j's
  // output.
  virtual std::shared_ptr<Work> all_to_all_async(const AnyTensor& output, const AnyTensor& input) = 0;
  virtual std::shared_ptr<Work> barrier_async() = 0;
  // Point to point: a send to dst is matched by a recv from this rank with the same tag (into a tensor of the
  // same dtype and numel).
  virtual std::shared_ptr<Work> send_async(const AnyTensor& tensor, int dst, int tag = 0) = 0;
  virtual std::shared_ptr<Work> recv_async(const AnyTensor& tensor, int src, int tag = 0) = 0;

  // ---- blocking forms ----
  void all_reduce(const AnyTensor& t, ReduceOp op = ReduceOp::sum) { all_reduce_async(t, op)->wait(); }
  void broadcast(const AnyTensor& t, int root = 0) { broadcast_async(t, root)->wait(); }
  void reduce(const AnyTensor& t, int root = 0, ReduceOp op = ReduceOp::sum) { reduce_async(t, root, op)->wait(); }
  void all_gather(const AnyTensor& output, const AnyTensor& input) { all_gather_async(output, input)->wait(); }
  // A new tensor of shape [size(), input's shape...].
  AnyTensor all_gather(const AnyTensor& input) {
    Shape shape{int64_t(size())};
    for (int64_t s : input.shape()) shape.push_back(s);
    AnyTensor out = kiln::empty(shape, input.dtype(), input.device());
    all_gather(out, input);
    return out;
  }
  void reduce_scatter(const AnyTensor& output, const AnyTensor& input, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(output, input, op)->wait();
  }
  void all_to_all(const AnyTensor& output, const AnyTensor& input) { all_to_all_async(output, input)->wait(); }
  void barrier() { barrier_async()->wait(); }
  void send(const AnyTensor& t, int dst, int tag = 0) { send_async(t, dst, tag)->wait(); }
  void recv(const AnyTensor& t, int src, int tag = 0) { recv_async(t, src, tag)->wait(); }
};

}  // namespace kiln::dist
