#pragma once
// The MPI backend of kiln::dist::ProcessGroup (CPU tensors), over Open MPI or any MPI-3 library. Including this
// header registers the backend "mpi" for init_process_group; MpiProcessGroup can also be made directly over a
// communicator the host program already has (kiln is meant to be vendored into MPI codes):
//
//   mpirun -np 4 ./train                          // rank and size from the launcher
//   auto& pg = kiln::dist::init_process_group("mpi", std::chrono::seconds(60));
//   kiln::dist::MpiProcessGroup pg(options, my_comm);   // over a duplicate of my_comm
//
// MPI is initialized (MPI_THREAD_SERIALIZED; libnbc's all_reduce algorithm set to Rabenseifner unless
// OMPI_MCA_coll_libnbc_iallreduce_algorithm is set) when the program has not done it, and then finalized at exit, except
// after a DistError: finalizing waits for the peers that failed, so the process exits without it. Every operation
// is a non-blocking MPI call polled against the group's timeout (mpi_work.hpp), on a duplicate of the
// communicator with MPI_ERRORS_RETURN. A rank that exits makes Open MPI's mpirun kill the others at once unless
// it runs with --enable-recovery; with it, the survivors throw DistError after the timeout (docs/distributed.md).
// Calls must come from one thread at a time.
#include "kiln/dist/mpi_header.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "kiln/dist/arguments.hpp"
#include "kiln/dist/init.hpp"
#include "kiln/dist/mpi_types.hpp"
#include "kiln/dist/mpi_work.hpp"
#include "kiln/dist/staging.hpp"
#include "kiln/dist/process_group.hpp"

namespace kiln::dist {

namespace detail {

// Initializes MPI unless the program did; then finalizes it at exit unless a group was aborted.
inline void ensure_mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  // Open MPI's non-blocking all_reduce (libnbc, what kiln issues) picks a binomial tree, reduce to one rank then
  // broadcast, for fewer than 4 ranks or an in-place buffer: 2.3 times MPI_Allreduce's time at 256 MB on 2 ranks
  // (measured, docs/performance.md). Unless the user chose one, ask for reduce_scatter + allgather (Rabenseifner;
  // libnbc falls back to the tree for fewer elements than ranks).
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  if (rc != MPI_SUCCESS) throw DistError("init_process_group", -1, "MPI_Init_thread failed: " + mpi_error_string(rc));
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !any_group_aborted()) MPI_Finalize();
  });
}

}  // namespace detail

class MpiProcessGroup : public ProcessGroup {
 public:
  // Over a duplicate of comm (MPI_COMM_WORLD by default), initializing MPI when needed.
  explicit MpiProcessGroup(ProcessGroupOptions options = {}, MPI_Comm comm = MPI_COMM_WORLD)
      : state_(std::make_shared<detail::MpiCommState>()),
        check_shapes_(detail::check_shapes_requested(options)) {
    check<std::invalid_argument>(options.timeout.count() > 0, "MpiProcessGroup: timeout must be positive, got ",
                                 options.timeout.count(), " ms");
    detail::ensure_mpi_initialized();
    state_->timeout = options.timeout;
    std::lock_guard lock(detail::mpi_mutex());
    int rc = MPI_Comm_dup(comm, &state_->comm);
    if (rc != MPI_SUCCESS) throw DistError("MpiProcessGroup", -1, "MPI_Comm_dup failed: " + detail::mpi_error_string(rc));
    MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(state_->comm, &state_->rank);
    MPI_Comm_size(state_->comm, &state_->size);
  }
  ~MpiProcessGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    progress_.reset();  // joins the thread
    // After a failure the communicator is abandoned: freeing it may wait for the lost peers.
    std::lock_guard lock(detail::mpi_mutex());
    if (!state_->aborted && !finalized) MPI_Comm_free(&state_->comm);
  }

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  std::string backend() const override { return "mpi"; }
  std::chrono::milliseconds timeout() const override { return state_->timeout; }
  bool aborted() const override { return state_->aborted; }
  MPI_Comm comm() const { return state_->comm; }
  // A thread that keeps MPI's progress engine running (mpi_progress.hpp); only with MPI_THREAD_SERIALIZED or more.
  void set_background_progress(bool on) override {
    if (!on && !progress_) return;
    if (!progress_) {
      if (!detail::mpi_threads_serialized()) return;
      progress_ = std::make_unique<detail::MpiProgressThread>(state_->comm);
    }
    progress_->set_active(on);
  }
  [[noreturn]] void abort_job(int exit_code) override {
    MPI_Abort(state_->comm, exit_code);
    std::_Exit(exit_code);
  }

  std::shared_ptr<Work> all_reduce_async(const AnyTensor& t, ReduceOp op = ReduceOp::sum) override {
    const char* name = "all_reduce";
    const MPI_Op mop = prepare(name, {t}, op);
    detail::Staged s = detail::stage(t, true);
    const int n = count(name, s.buffer);
    return start(name, s.buffer, {s.buffer}, [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, s.buffer.data_ptr(), n, detail::mpi_datatype(t.dtype()), mop, comm(), r);
    }, finish_written(s, op));
  }

  std::shared_ptr<Work> broadcast_async(const AnyTensor& t, int root = 0) override {
    const char* name = "broadcast";
    prepare(name, {t}, std::nullopt, root);
    detail::Staged s = detail::stage(t, rank() != root);
    const int n = count(name, s.buffer);
    return start(name, s.buffer, {s.buffer}, [&](MPI_Request* r) {
      return MPI_Ibcast(s.buffer.data_ptr(), n, detail::mpi_datatype(t.dtype()), root, comm(), r);
    }, rank() == root ? std::function<void()>{} : finish_written(s, ReduceOp::sum));
  }

  std::shared_ptr<Work> reduce_async(const AnyTensor& t, int root = 0, ReduceOp op = ReduceOp::sum) override {
    const char* name = "reduce";
    const MPI_Op mop = prepare(name, {t}, op, root);
    const bool is_root = rank() == root;
    detail::Staged s = detail::stage(t, is_root);
    const int n = count(name, s.buffer);
    return start(name, s.buffer, {s.buffer}, [&](MPI_Request* r) {
      return MPI_Ireduce(is_root ? MPI_IN_PLACE : s.buffer.data_ptr(), is_root ? s.buffer.data_ptr() : nullptr, n,
                         detail::mpi_datatype(t.dtype()), mop, root, comm(), r);
    }, is_root ? finish_written(s, op) : std::function<void()>{});
  }

  std::shared_ptr<Work> all_gather_async(const AnyTensor& output, const AnyTensor& input) override {
    const char* name = "all_gather";
    prepare(name, {output, input});
    detail::check_all_gather_sizes(name, output, input, size());
    detail::Staged in = detail::stage(input, false), out = detail::stage(output, true);
    const int n = count(name, in.buffer);
    count(name, out.buffer);
    const MPI_Datatype dt = detail::mpi_datatype(input.dtype());
    return start(name, in.buffer, {in.buffer, out.buffer}, [&](MPI_Request* r) {
      return MPI_Iallgather(in.buffer.data_ptr(), n, dt, out.buffer.data_ptr(), n, dt, comm(), r);
    }, finish_written(out, ReduceOp::sum));
  }

  std::shared_ptr<Work> reduce_scatter_async(const AnyTensor& output, const AnyTensor& input,
                                             ReduceOp op = ReduceOp::sum) override {
    const char* name = "reduce_scatter";
    const MPI_Op mop = prepare(name, {output, input}, op);
    detail::check_reduce_scatter_sizes(name, output, input, size());
    detail::Staged in = detail::stage(input, false), out = detail::stage(output, true);
    const int n = count(name, out.buffer);
    count(name, in.buffer);
    return start(name, out.buffer, {in.buffer, out.buffer}, [&](MPI_Request* r) {
      return MPI_Ireduce_scatter_block(in.buffer.data_ptr(), out.buffer.data_ptr(), n,
                                       detail::mpi_datatype(input.dtype()), mop, comm(), r);
    }, finish_written(out, op));
  }

  std::shared_ptr<Work> all_to_all_async(const AnyTensor& output, const AnyTensor& input) override {
    const char* name = "all_to_all";
    prepare(name, {output, input});
    detail::check_all_to_all_sizes(name, output, input, size());
    detail::Staged in = detail::stage(input, false), out = detail::stage(output, true);
    const int n = count(name, in.buffer) / size();
    const MPI_Datatype dt = detail::mpi_datatype(input.dtype());
    return start(name, in.buffer, {in.buffer, out.buffer}, [&](MPI_Request* r) {
      return MPI_Ialltoall(in.buffer.data_ptr(), n, dt, out.buffer.data_ptr(), n, dt, comm(), r);
    }, finish_written(out, ReduceOp::sum));
  }

  std::shared_ptr<Work> barrier_async() override {
    const char* name = "barrier";
    state_->check_usable(name);
    if (check_shapes_) agree(name, detail::kBarrierKey);
    return start(name, AnyTensor(), {}, [&](MPI_Request* r) { return MPI_Ibarrier(comm(), r); }, {});
  }

  std::shared_ptr<Work> send_async(const AnyTensor& t, int dst, int tag = 0) override {
    const char* name = "send";
    detail::check_peer(name, dst, tag, rank(), size());
    state_->check_usable(name);
    detail::Staged s = detail::stage(t, false);
    const int n = count(name, s.buffer);
    return start(name, s.buffer, {s.buffer}, [&](MPI_Request* r) {
      return MPI_Isend(s.buffer.data_ptr(), n, detail::mpi_datatype(t.dtype()), dst, tag, comm(), r);
    }, {}, dst, tag);
  }

  std::shared_ptr<Work> recv_async(const AnyTensor& t, int src, int tag = 0) override {
    const char* name = "recv";
    detail::check_peer(name, src, tag, rank(), size());
    state_->check_usable(name);
    detail::Staged s = detail::stage(t, true);
    const int n = count(name, s.buffer);
    return start(name, s.buffer, {s.buffer}, [&](MPI_Request* r) {
      return MPI_Irecv(s.buffer.data_ptr(), n, detail::mpi_datatype(t.dtype()), src, tag, comm(), r);
    }, finish_written(s, ReduceOp::sum), src, tag);
  }

 private:
  // Checks the arguments every collective shares (and, with check_shapes, that all ranks agree); returns the
  // MPI_Op when there is a reduction.
  MPI_Op prepare(const char* name, std::initializer_list<AnyTensor> tensors, std::optional<ReduceOp> op = {},
                 int root = 0) {
    state_->check_usable(name);
    detail::check_collective_arguments(name, tensors, root, size());
    const MPI_Op mop = op ? detail::mpi_op(*op, tensors.begin()->dtype(), name) : MPI_OP_NULL;
    if (check_shapes_) agree(name, detail::agreement_key(tensors, op, root));
    return mop;
  }

  int count(const char* name, const AnyTensor& t) const {
    check<std::invalid_argument>(t.numel() <= std::numeric_limits<int>::max(), name, ": ", t.numel(),
                                 " elements are more than one MPI call takes (", std::numeric_limits<int>::max(), ")");
    return int(t.numel());
  }

  std::function<void()> finish_written(const detail::Staged& s, ReduceOp op) const {
    return [s, op, size = size()] { detail::written(s, op, size); };
  }

  // Issues the MPI call `issue(&request)` and wraps its request.
  template <class Issue>
  std::shared_ptr<Work> start(const char* name, const AnyTensor& described, std::vector<AnyTensor> buffers,
                              Issue&& issue, std::function<void()> finish, int peer = -1, int tag = 0) {
    ++state_->sequence;
    MPI_Request request = MPI_REQUEST_NULL;
    int rc;
    {
      std::lock_guard lock(detail::mpi_mutex());
      rc = issue(&request);
    }
    if (rc != MPI_SUCCESS) state_->fail(name, "MPI could not start it: " + detail::mpi_error_string(rc));
    detail::OpDescription what;
    if (described.defined()) what = {described.numel(), described.dtype(), peer, tag, std::strcmp(name, "recv") == 0};
    return detail::make_mpi_work(state_, name, what, request, std::move(buffers), std::move(finish));
  }

  // check_shapes: all ranks exchange `mine` and throw DistError (on every rank) when they differ.
  void agree(const char* name, detail::AgreementKey mine) {
    std::vector<int64_t> all(size_t(4 * size()));
    start(name, AnyTensor(), {}, [&](MPI_Request* r) {
      return MPI_Iallgather(mine.data(), 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, comm(), r);
    }, {})->wait();
    detail::check_agreement(name, rank(), mine, all);
  }

  std::shared_ptr<detail::MpiCommState> state_;
  bool check_shapes_;
  std::unique_ptr<detail::MpiProgressThread> progress_;
};

namespace detail {
inline const bool mpi_backend_registered = register_backend("mpi", [](const ProcessGroupOptions& options) {
  return std::static_pointer_cast<ProcessGroup>(std::make_shared<MpiProcessGroup>(options));
});
}  // namespace detail

}  // namespace kiln::dist
