#pragma once
// CUDA streams as libtorch spells them (c10::cuda): CUDAStream, getStreamFromPool, getDefaultCUDAStream,
// getCurrentCUDAStream, setCurrentCUDAStream and the guard CUDAStreamGuard. The current stream is per thread and per
// device (cuda/runtime.hpp's current_stream_of): every kiln kernel launch and every CUDA tensor allocation on that
// device from that thread use it. So
//
//   const cuda::CUDAStream side = cuda::getStreamFromPool();
//   {
//     cuda::CUDAStreamGuard guard(side);
//     y = exp(x) * 2;          // allocated in side's bin, computed on side
//   }
//   cuda::getCurrentCUDAStream().wait_stream(side);   // later work on the default stream sees y
//
// Pool streams are blocking streams (created once per device and kept, as torch's pool): they are ordered with the
// default stream, on which kiln's copies between host and device run, but not with each other: order them with
// wait_stream (an event, no host wait) or synchronize(). A tensor made on one stream and used on another should be
// marked with record_stream before it is freed, as torch's Tensor.record_stream, so the caching allocator does not
// hand its memory to the first stream while the other may still read it.
#include <array>
#include <mutex>
#include <ostream>

#include "kiln/cuda/runtime.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::cuda {

class CUDAStream {
 public:
  CUDAStream(int device_index, StreamId id) : device_(device_index), id_(id) {}

  int device_index() const { return device_; }
  Device device() const { return Device(kCUDA, device_); }
  StreamId id() const { return id_; }  // the CUstream (0: the default stream)
  void* stream() const { return reinterpret_cast<void*>(id_); }

  // Waits on the host until every piece of work submitted to the stream has finished.
  void synchronize() const { DeviceContext::get(device_).synchronize_stream(id_); }
  // Whether it has (without waiting).
  bool query() const { return DeviceContext::get(device_).stream_done(id_); }
  // Work submitted to this stream from now on starts after the work submitted to `other` so far (torch's
  // Stream.wait_stream: an event, no host wait).
  void wait_stream(const CUDAStream& other) const {
    check<std::invalid_argument>(other.device_ == device_, "CUDAStream::wait_stream: a stream of cuda:", device_,
                                 " cannot wait for one of cuda:", other.device_);
    if (other.id_ != id_) DeviceContext::get(device_).stream_wait(id_, other.id_);
  }

  bool operator==(const CUDAStream& o) const { return device_ == o.device_ && id_ == o.id_; }
  bool operator!=(const CUDAStream& o) const { return !(*this == o); }

 private:
  int device_;
  StreamId id_;
};

inline std::ostream& operator<<(std::ostream& out, const CUDAStream& s) {
  return out << "stream " << s.id() << " on device cuda:" << s.device_index();
}

// The device's default stream.
inline CUDAStream getDefaultCUDAStream(int device = 0) { return CUDAStream(device, 0); }

// One of the device's pool streams, round-robin over kStreamPoolSize streams created at the first call.
inline constexpr int kStreamPoolSize = 8;
inline CUDAStream getStreamFromPool(int device = 0) {
  struct Pool {
    std::array<StreamId, kStreamPoolSize> streams{};
    int next = 0;
  };
  static std::mutex mutex;
  static auto* pools = new std::map<int, Pool>;  // never destroyed: the streams live as long as the process
  DeviceContext& context = DeviceContext::get(device);
  std::lock_guard lock(mutex);
  Pool& pool = (*pools)[device];
  if (pool.streams[0] == 0)
    for (StreamId& s : pool.streams) s = context.create_stream();
  const StreamId id = pool.streams[size_t(pool.next)];
  pool.next = (pool.next + 1) % kStreamPoolSize;
  return CUDAStream(device, id);
}

// This thread's current stream on the device, and setting it (for the rest of the thread's work on that device).
inline CUDAStream getCurrentCUDAStream(int device = 0) { return CUDAStream(device, current_stream_of(device)); }
inline void setCurrentCUDAStream(const CUDAStream& stream) { current_stream_of(stream.device_index()) = stream.id(); }

// Makes `stream` current on its device for the guard's scope, then restores the stream that was current there.
class CUDAStreamGuard {
 public:
  explicit CUDAStreamGuard(const CUDAStream& stream) : previous_(getCurrentCUDAStream(stream.device_index())) {
    setCurrentCUDAStream(stream);
  }
  ~CUDAStreamGuard() { setCurrentCUDAStream(previous_); }
  CUDAStreamGuard(const CUDAStreamGuard&) = delete;
  CUDAStreamGuard& operator=(const CUDAStreamGuard&) = delete;

  CUDAStream original_stream() const { return previous_; }

 private:
  CUDAStream previous_;
};

// torch's Tensor.record_stream: t's memory is also used on `stream`, so when t is freed the caching allocator keeps
// it from its own stream until `stream` has passed that point.
template <Dtype T>
void record_stream(const Tensor<T>& t, const CUDAStream& stream) {
  check<std::invalid_argument>(t.is_cuda() && t.device() == stream.device(), "record_stream: a tensor on ",
                               t.device().str(), " and a stream of cuda:", stream.device_index());
  DeviceContext::get(stream.device_index()).allocator().record_stream(t.impl().storage->data(), stream.id());
}

}  // namespace kiln::cuda
