#pragma once
// Device memory and kernel launches through the CUDA driver (loaded at run time: cuda/driver.hpp). Each device is
// used through its primary context, the one the CUDA runtime and cuBLAS use, so they share it with kiln.
//
// A launch takes a generated kernel (a KernelSource) and its descriptor words: the program comes from the kernel
// cache (compiled once per source and architecture, cuda/kernel_cache.hpp), its module is loaded once per device,
// and the descriptor block is the kernel's one parameter, by value, or, past kMaxParameterBytes, as a pointer to a
// device copy that is freed at the next synchronize(). Kernels that cooperate within a block take exactly their
// block_threads and get their shared_bytes of dynamic shared memory (the limit raised past the default 48 KiB).
//
// DeviceContext is also the caching allocator's DeviceMemory (cuMemAlloc, cuMemFree, events), so allocator()
// serves device memory the way torch.cuda's caching allocator does.
//
// Tested without a GPU on the emulated device (tests/cuda_null/emulated): a driver and an NVRTC whose "cubins" are
// the generated source compiled for the host, so every call here runs in CI; what only a GPU can show (the real
// driver's behaviour, timing) waits for one.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kiln/cuda/allocator.hpp"
#include "kiln/cuda/codegen.hpp"
#include "kiln/cuda/current_stream.hpp"
#include "kiln/cuda/driver.hpp"
#include "kiln/cuda/kernel_cache.hpp"
#include "kiln/cuda/profile.hpp"

namespace kiln::cuda {

struct LaunchConfig {
  unsigned grid = 1;
  unsigned block = 256;
  std::optional<StreamId> stream = std::nullopt;  // a CUstream (0: the default stream); none: the current stream
};

class DeviceContext : public DeviceMemory {
 public:
  // The context of device `index`, created on first use; throws CudaUnavailableError where CUDA is not there
  // and std::out_of_range for a device that does not exist.
  static DeviceContext& get(int index) {
    static std::mutex mutex;
    // Never destroyed, as the CPU's allocator: tensors freed during static destruction still free through them.
    static auto* contexts = new std::map<int, std::unique_ptr<DeviceContext>>;
    std::lock_guard lock(mutex);
    std::unique_ptr<DeviceContext>& c = (*contexts)[index];
    if (!c) c.reset(new DeviceContext(index));
    return *c;
  }

  int index() const { return index_; }
  int arch() const { return arch_; }
  std::string name() const { return kiln::detail::cat("cuda:", index_); }
  CachingAllocator& allocator() { return allocator_; }

  // DeviceMemory: a new allocation, or nullptr when the device has no room (the allocator then frees its cache
  // and retries); any other failure throws.
  void* allocate(size_t bytes) override {
    make_current();
    uint64_t p = 0;
    const int status = api_.mem_alloc(&p, bytes);
    if (status == kOutOfMemory) return nullptr;
    driver_.require(status, "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
  void free(void* p) override {
    const int status = api_.mem_free(address(p));
    if (status == kDeinitialized) return;  // at exit, after the driver shut down: the memory went with it
    driver_.require(status, "cuMemFree");
  }
  uintptr_t record_event(StreamId stream) override {
    make_current();
    void* event = nullptr;
    driver_.require(api_.event_create(&event, kEventDisableTiming), "cuEventCreate");
    driver_.require(api_.event_record(event, reinterpret_cast<void*>(stream)), "cuEventRecord");
    return reinterpret_cast<uintptr_t>(event);
  }
  bool done(uintptr_t event) override {
    make_current();
    const int status = api_.event_query(reinterpret_cast<void*>(event));
    if (status == kNotReady) return false;
    driver_.require(status, "cuEventQuery");
    return true;
  }
  void release(uintptr_t event) override {
    make_current();
    driver_.require(api_.event_destroy(reinterpret_cast<void*>(event)), "cuEventDestroy");
  }

  // Copies (host <-> device synchronous with respect to the host, as cuMemcpy is) and zero fill.
  void copy_to_device(void* device, const void* host, size_t bytes) {
    make_current();
    driver_.require(api_.copy_htod(address(device), host, bytes), "cuMemcpyHtoD");
  }
  void copy_to_host(void* host, const void* device, size_t bytes) {
    make_current();
    driver_.require(api_.copy_dtoh(host, address(device), bytes), "cuMemcpyDtoH");
  }
  void copy_on_device(void* dst, const void* src, size_t bytes) {
    make_current();
    driver_.require(api_.copy_dtod(address(dst), address(src), bytes), "cuMemcpyDtoD");
  }
  void fill_zero(void* device, size_t bytes) {
    make_current();
    driver_.require(api_.memset8(address(device), 0, bytes), "cuMemsetD8");
  }

  // Launches k with its descriptor block `words` (built for k: cuda/descriptor.hpp, attention/flex_cuda.hpp).
  void launch(const KernelSource& k, const std::vector<uint64_t>& words, const LaunchConfig& c) {
    check<std::invalid_argument>(words.size() * 8 == k.descriptor_bytes, "kiln::cuda: launch of ", k.entry, " with ",
                                 words.size() * 8, " descriptor bytes; the kernel takes ", k.descriptor_bytes);
    check<std::invalid_argument>(c.grid >= 1 && c.block >= 1 && (k.block_threads == 0 || int(c.block) == k.block_threads),
                                 "kiln::cuda: launch of ", k.entry, " on ", c.grid, " blocks of ", c.block,
                                 " threads", k.block_threads ? kiln::detail::cat("; the kernel needs blocks of ", k.block_threads) : "");
    void* function = function_for(k);
    make_current();
    const StreamId stream = c.stream.value_or(current_stream_of(index_));
    void* block_pointer = nullptr;
    const void* parameter = words.data();
    if (k.descriptor_by_pointer) {
      block_pointer = allocator_.allocate(k.descriptor_bytes, stream);
      copy_to_device(block_pointer, words.data(), k.descriptor_bytes);
      parameter = &block_pointer;
      std::lock_guard lock(mutex_);
      retired_.push_back(block_pointer);
    }
    void* params[] = {const_cast<void*>(parameter)};
    const bool profile = profiling();
    const auto start = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    driver_.require(api_.launch(function, c.grid, 1, 1, c.block, 1, 1, unsigned(k.shared_bytes),
                                reinterpret_cast<void*>(stream), params, nullptr),
                    "cuLaunchKernel");
    if (profile) {
      synchronize_stream(stream);
      KernelProfile::get().add(kiln::detail::cat(k.entry, " #", source_tag(k.source)),
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (detail::debug_enabled())
      std::fprintf(stderr, "kiln: launched %s on %s: %u x %u threads, %zu bytes of shared memory\n", k.entry.c_str(),
                   name().c_str(), c.grid, c.block, k.shared_bytes);
  }

  // Streams (cuda/stream.hpp builds torch's CUDAStream on these). A created stream is a blocking one: it waits for
  // the default stream's work and the default stream for its, so the synchronous copies (on the default stream)
  // stay ordered with every kernel.
  StreamId create_stream() {
    make_current();
    void* stream = nullptr;
    driver_.require(api_.stream_create(&stream, 0), "cuStreamCreate");
    return reinterpret_cast<StreamId>(stream);
  }
  void synchronize_stream(StreamId stream) {
    make_current();
    driver_.require(api_.stream_synchronize(reinterpret_cast<void*>(stream)), "cuStreamSynchronize");
  }
  // Whether every piece of work submitted to the stream has finished.
  bool stream_done(StreamId stream) {
    make_current();
    const int status = api_.stream_query(reinterpret_cast<void*>(stream));
    if (status == kNotReady) return false;
    driver_.require(status, "cuStreamQuery");
    return true;
  }
  // Work submitted to `waiter` from now on starts after the work submitted to `on` so far (no host wait).
  void stream_wait(StreamId waiter, StreamId on) {
    const uintptr_t event = record_event(on);
    driver_.require(api_.stream_wait_event(reinterpret_cast<void*>(waiter), reinterpret_cast<void*>(event), 0),
                    "cuStreamWaitEvent");
    release(event);  // (the wait keeps what it needs: destroying a recorded event is allowed)
  }

  // Waits for all work on the device; descriptor copies of finished launches go back to the allocator.
  void synchronize() {
    make_current();
    driver_.require(api_.synchronize(), "cuCtxSynchronize");
    std::vector<void*> done;
    {
      std::lock_guard lock(mutex_);
      done.swap(retired_);
    }
    for (void* p : done) allocator_.free(p);
  }

  // Makes this device's primary context the calling thread's current one: a library that works in the current
  // context (NCCL, through the CUDA runtime) then runs on this device.
  void make_current() { driver_.require(api_.set_current(context_), "cuCtxSetCurrent"); }

  // How many distinct programs this context has loaded as modules (each once).
  size_t modules_loaded() const {
    std::lock_guard lock(mutex_);
    return modules_.size();
  }

 private:
  // CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_READY
  static constexpr int kOutOfMemory = 2, kDeinitialized = 4, kNotReady = 600;
  static constexpr int kMaxDynamicSharedBytes = 8;          // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  static constexpr unsigned kEventDisableTiming = 2;        // CU_EVENT_DISABLE_TIMING
  static constexpr size_t kDefaultSharedBytes = 48 * 1024;

  // The driver calls, resolved once (the _v2 entry points are the ones cuda.h's macros name).
  struct Api {
    explicit Api(const Driver& d)
        : retain(d.symbol<int (*)(void**, int)>("cuDevicePrimaryCtxRetain")),
          set_current(d.symbol<int (*)(void*)>("cuCtxSetCurrent")),
          mem_alloc(d.symbol<int (*)(uint64_t*, size_t)>("cuMemAlloc_v2")),
          mem_free(d.symbol<int (*)(uint64_t)>("cuMemFree_v2")),
          copy_htod(d.symbol<int (*)(uint64_t, const void*, size_t)>("cuMemcpyHtoD_v2")),
          copy_dtoh(d.symbol<int (*)(void*, uint64_t, size_t)>("cuMemcpyDtoH_v2")),
          copy_dtod(d.symbol<int (*)(uint64_t, uint64_t, size_t)>("cuMemcpyDtoD_v2")),
          memset8(d.symbol<int (*)(uint64_t, unsigned char, size_t)>("cuMemsetD8_v2")),
          module_load(d.symbol<int (*)(void**, const void*)>("cuModuleLoadData")),
          module_function(d.symbol<int (*)(void**, void*, const char*)>("cuModuleGetFunction")),
          set_attribute(d.symbol<int (*)(void*, int, int)>("cuFuncSetAttribute")),
          launch(d.symbol<int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                                  void**, void**)>("cuLaunchKernel")),
          synchronize(d.symbol<int (*)()>("cuCtxSynchronize")),
          event_create(d.symbol<int (*)(void**, unsigned)>("cuEventCreate")),
          event_record(d.symbol<int (*)(void*, void*)>("cuEventRecord")),
          event_query(d.symbol<int (*)(void*)>("cuEventQuery")),
          event_destroy(d.symbol<int (*)(void*)>("cuEventDestroy_v2")),
          stream_create(d.symbol<int (*)(void**, unsigned)>("cuStreamCreate")),
          stream_synchronize(d.symbol<int (*)(void*)>("cuStreamSynchronize")),
          stream_query(d.symbol<int (*)(void*)>("cuStreamQuery")),
          stream_wait_event(d.symbol<int (*)(void*, void*, unsigned)>("cuStreamWaitEvent")) {}
    int (*retain)(void**, int);
    int (*set_current)(void*);
    int (*mem_alloc)(uint64_t*, size_t);
    int (*mem_free)(uint64_t);
    int (*copy_htod)(uint64_t, const void*, size_t);
    int (*copy_dtoh)(void*, uint64_t, size_t);
    int (*copy_dtod)(uint64_t, uint64_t, size_t);
    int (*memset8)(uint64_t, unsigned char, size_t);
    int (*module_load)(void**, const void*);
    int (*module_function)(void**, void*, const char*);
    int (*set_attribute)(void*, int, int);
    int (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
    int (*synchronize)();
    int (*event_create)(void**, unsigned);
    int (*event_record)(void*, void*);
    int (*event_query)(void*);
    int (*event_destroy)(void*);
    int (*stream_create)(void**, unsigned);
    int (*stream_synchronize)(void*);
    int (*stream_query)(void*);
    int (*stream_wait_event)(void*, void*, unsigned);
  };

  explicit DeviceContext(int index)
      : driver_(Driver::get()), api_(driver_), index_(index), arch_(driver_.arch(index)), allocator_(*this, name()) {
    int device = 0;
    driver_.require(driver_.symbol<int (*)(int*, int)>("cuDeviceGet")(&device, index), "cuDeviceGet");
    driver_.require(api_.retain(&context_, device), "cuDevicePrimaryCtxRetain");
  }

  static uint64_t address(const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }

  // The kernel's function in this context: its program from the kernel cache (keyed by its source), loaded as a
  // module once, and the shared-memory limit raised where the kernel needs more than the default.
  void* function_for(const KernelSource& k) {
    const std::shared_ptr<const CompiledProgram> program =
        kernel_cache().get(k.source, arch_, [&] { return std::make_pair(k.source, k.entry + ".cu"); });
    std::lock_guard lock(mutex_);
    void*& function = functions_[{program.get(), k.entry}];
    if (function) return function;
    make_current();
    void*& module = modules_[program.get()];
    if (!module) {
      driver_.require(api_.module_load(&module, program->binary.data()), "cuModuleLoadData");
      programs_.push_back(program);  // (kept alive: the maps key on its address)
    }
    driver_.require(api_.module_function(&function, module, k.entry.c_str()), "cuModuleGetFunction");
    if (k.shared_bytes > kDefaultSharedBytes)
      driver_.require(api_.set_attribute(function, kMaxDynamicSharedBytes, int(k.shared_bytes)), "cuFuncSetAttribute");
    return function;
  }

  const Driver& driver_;
  Api api_;
  int index_;
  int arch_;
  void* context_ = nullptr;
  mutable std::mutex mutex_;
  std::map<const CompiledProgram*, void*> modules_;
  std::map<std::pair<const CompiledProgram*, std::string>, void*> functions_;
  std::vector<std::shared_ptr<const CompiledProgram>> programs_;
  std::vector<void*> retired_;  // descriptor copies of launches not yet synchronized
  CachingAllocator allocator_;  // last: it frees its cache through this context
};

// torch.cuda's module functions, for CUDA device `device` (0 unless given).
inline void synchronize(int device = 0) { DeviceContext::get(device).synchronize(); }
inline size_t memory_allocated(int device = 0) { return DeviceContext::get(device).allocator().memory_allocated(); }
inline size_t max_memory_allocated(int device = 0) { return DeviceContext::get(device).allocator().max_memory_allocated(); }
inline size_t memory_reserved(int device = 0) { return DeviceContext::get(device).allocator().memory_reserved(); }
inline void reset_peak_memory_stats(int device = 0) { DeviceContext::get(device).allocator().reset_peak_memory_stats(); }
inline void empty_cache(int device = 0) { DeviceContext::get(device).allocator().empty_cache(); }

}  // namespace kiln::cuda
