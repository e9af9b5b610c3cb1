// The emulated device's cuDNN (libkiln_emulated_cudnn.so, named by KILN_CUDNN_LIBRARY in the tests that use it): the
// 2-D convolutions (forward, backward data, backward filter; grouped, strided, padded, dilated, either mode) and the
// spatial batch norms (training, inference, backward) that kiln calls, computed on the host (the emulated device's
// memory is host memory, driver.cpp) in double and stored once in the tensor's type, honoring the descriptors'
// strides, alpha and beta (beta 0 never reads the output, as cuDNN). Its heuristics offer two algorithms for each
// convolution, best first: algo 1, non-deterministic, which needs a workspace of 1024 bytes (and writes every byte
// of the one it is given, so a short one shows under AddressSanitizer), then algo 0, deterministic, which needs
// none. It refuses what the real library refuses, with its status: a null handle, a null pointer, a descriptor of
// the wrong kind or never set, shapes that do not agree, an unknown enumerant; and what it does not do itself (a
// filter not NCHW, a compute type other than float for float, half and bfloat16 data and double for double, a
// batch norm other than spatial). Its timed searches (cudnnFind...AlgorithmEx) find algo 0 the faster. Only what kiln
// calls is here, and four functions for tests (found with dlsym): the last call and its arguments as text, its
// stream, the number of convolution and batch-norm calls, and the last search as text.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include "elements.hpp"
#include "skip_kernels.hpp"

namespace {

constexpr int kSuccess = 0, kNotInitialized = 1001, kBadParam = 2000, kNotSupported = 3000;
constexpr int kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBFloat16 = 9, kLastDataType = 21;
constexpr int kConvolution = 0, kCrossCorrelation = 1;
constexpr int kNCHW = 0, kLastFormat = 2;
constexpr int kBatchNormPerActivation = 0, kBatchNormSpatial = 1, kBatchNormSpatialPersistent = 2;
constexpr size_t kAlgo1Workspace = 1024;

// Every descriptor starts with its kind, so that one passed in another's place is refused rather than misread.
enum Kind : uint32_t { kHandle = 0x68646e6c, kTensor = 0x74656e73, kFilter = 0x66696c74, kConv = 0x636f6e76 };

struct Handle {
  Kind kind = kHandle;
  void* stream = nullptr;
};
struct Tensor {
  Kind kind = kTensor;
  bool set = false;
  int type = kFloat32;
  int64_t n = 0, c = 0, h = 0, w = 0, ns = 0, cs = 0, hs = 0, ws = 0;
  int64_t at(int64_t in, int64_t ic, int64_t ih, int64_t iw) const { return in * ns + ic * cs + ih * hs + iw * ws; }
};
struct Filter {  // NCHW: k, c, h, w contiguous
  Kind kind = kFilter;
  bool set = false;
  int type = kFloat32;
  int64_t k = 0, c = 0, h = 0, w = 0;
  int64_t at(int64_t ik, int64_t ic, int64_t ih, int64_t iw) const { return ((ik * c + ic) * h + ih) * w + iw; }
};
struct Conv {  // cuDNN's defaults until set
  Kind kind = kConv;
  int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
  int mode = kConvolution, compute = kFloat32, groups = 1, math = 0;
};

// cudnnConvolutionFwdAlgoPerf_t, ...BwdDataAlgoPerf_t and ...BwdFilterAlgoPerf_t (one layout).
struct AlgoPerf {
  int algo;
  int status;
  float time;
  size_t memory;
  int determinism;
  int mathType;
  int reserved[3];
};

std::mutex mutex;
std::string last_call, last_find;
long calls = 0;
void* last_stream = nullptr;

template <class T>
T* as(void* p, Kind kind) {
  return p && *static_cast<const Kind*>(p) == kind ? static_cast<T*>(p) : nullptr;
}

// This library's type codes as the elements they name (elements.hpp): float, double, bfloat16, else float16.
kiln_emulated::Element element(int type) {
  using kiln_emulated::Element;
  return type == kFloat32 ? Element::Float32 : type == kFloat64 ? Element::Float64
                          : type == kBFloat16 ? Element::BFloat16 : Element::Float16;
}
double load(const void* p, int64_t i, int type) { return kiln_emulated::load(p, i, element(type)); }
void store(void* p, int64_t i, int type, double v) { kiln_emulated::store(p, i, element(type), v); }
// out = alpha * value + beta * out, beta 0 not reading out.
void blend(void* p, int64_t i, int type, double alpha, double value, double beta) {
  store(p, i, type, alpha * value + (beta == 0 ? 0.0 : beta * load(p, i, type)));
}
// alpha and beta: doubles for double data, floats otherwise (cuDNN's rule).
double scalar(const void* p, int data_type) {
  return data_type == kFloat64 ? *static_cast<const double*>(p) : double(*static_cast<const float*>(p));
}

bool supported_type(int type) { return type == kFloat32 || type == kFloat64 || type == kFloat16 || type == kBFloat16; }
// An enumerant of cudnnDataType_t: supported here or NOT_SUPPORTED, anything else BAD_PARAM.
int check_type(int type) {
  if (type < 0 || type > kLastDataType) return kBadParam;
  return supported_type(type) ? kSuccess : kNotSupported;
}

// The convolution x (N, C, H, W) * w (K, C / groups, kh, kw) -> y (N, K, Ho, Wo) that the descriptors describe.
struct Geometry {
  const Tensor* x;
  const Filter* w;
  const Conv* conv;
  const Tensor* y;
  int64_t cg() const { return w->c; }                 // input channels per group
  int64_t kg() const { return w->k / conv->groups; }  // output channels per group
};

int check_geometry(void* xd, void* wd, void* cd, void* yd, Geometry& g) {
  g.x = as<Tensor>(xd, kTensor);
  g.w = as<Filter>(wd, kFilter);
  g.conv = as<Conv>(cd, kConv);
  g.y = as<Tensor>(yd, kTensor);
  if (!g.x || !g.w || !g.conv || !g.y || !g.x->set || !g.w->set || !g.y->set) return kBadParam;
  const Tensor &x = *g.x, &y = *g.y;
  const Filter& w = *g.w;
  const Conv& c = *g.conv;
  if (x.type != w.type || y.type != w.type) return kBadParam;
  if (c.compute != (x.type == kFloat64 ? kFloat64 : kFloat32)) return kNotSupported;
  if (x.c != w.c * c.groups || w.k % c.groups != 0) return kBadParam;
  const int64_t span_h = int64_t(c.dil_h) * (w.h - 1) + 1, span_w = int64_t(c.dil_w) * (w.w - 1) + 1;
  if (x.h + 2 * int64_t(c.pad_h) < span_h || x.w + 2 * int64_t(c.pad_w) < span_w) return kBadParam;
  const int64_t ho = (x.h + 2 * int64_t(c.pad_h) - span_h) / c.u + 1;
  const int64_t wo = (x.w + 2 * int64_t(c.pad_w) - span_w) / c.v + 1;
  if (y.n != x.n || y.c != w.k || y.h != ho || y.w != wo) return kBadParam;
  return kSuccess;
}

// Calls f(n, k, oh, ow, ic, fk_index, ih, iw) for every product x[n][ic][ih][iw] * w[fk_index] of the convolution
// (taps in the padding left out): the forward sums them into y[n][k][oh][ow], the backward passes scatter them.
template <class F>
void for_each_tap(const Geometry& g, F&& f) {
  const Tensor &x = *g.x, &y = *g.y;
  const Filter& w = *g.w;
  const Conv& c = *g.conv;
  const int64_t kg = g.kg(), cg = g.cg();
  for (int64_t n = 0; n < y.n; ++n)
    for (int64_t k = 0; k < y.c; ++k) {
      const int64_t group = k / kg;
      for (int64_t oh = 0; oh < y.h; ++oh)
        for (int64_t ow = 0; ow < y.w; ++ow)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < w.h; ++i) {
              const int64_t ih = oh * c.u - c.pad_h + i * c.dil_h;
              if (ih < 0 || ih >= x.h) continue;
              for (int64_t j = 0; j < w.w; ++j) {
                const int64_t iw = ow * c.v - c.pad_w + j * c.dil_w;
                if (iw < 0 || iw >= x.w) continue;
                const int64_t fi = c.mode == kConvolution ? w.h - 1 - i : i;
                const int64_t fj = c.mode == kConvolution ? w.w - 1 - j : j;
                f(n, k, oh, ow, group * cg + ci, w.at(k, ci, fi, fj), ih, iw);
              }
            }
    }
}

int workspace_for(int algo, size_t* size) {
  if (algo == 0) *size = 0;
  else if (algo == 1) *size = kAlgo1Workspace;
  else return kBadParam;
  return kSuccess;
}

// Algo 1 works in its workspace: it needs kAlgo1Workspace bytes and writes all of them.
int use_workspace(int algo, void* workspace, size_t bytes) {
  size_t needed = 0;
  if (int status = workspace_for(algo, &needed)) return status;
  if (needed == 0) return kSuccess;
  if (!workspace || bytes < needed) return kBadParam;
  std::memset(workspace, 0xAB, needed);
  return kSuccess;
}

void record(const Handle* h, const std::string& text) {
  std::lock_guard lock(mutex);
  ++calls;
  last_stream = h->stream;
  last_call = text;
}
std::string conv_call(const char* name, int algo, size_t workspace, const Conv& c) {
  return std::string(name) + "(algo=" + std::to_string(algo) + ", workspace=" + std::to_string(workspace) +
         ", math=" + std::to_string(c.math) + ", groups=" + std::to_string(c.groups) + ")";
}
std::string number(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// The three heuristics: algo 1 (fast, workspace, non-deterministic), then algo 0 (deterministic, no workspace).
int algorithms(void* handle, void* xd, void* wd, void* cd, void* yd, int requested, int* returned, AlgoPerf* perf) {
  if (!handle) return kNotInitialized;
  if (!as<Handle>(handle, kHandle) || !returned || !perf || requested < 1) return kBadParam;
  Geometry g;
  if (int status = check_geometry(xd, wd, cd, yd, g)) return status;
  const AlgoPerf offered[2] = {{1, kSuccess, 0.5f, kAlgo1Workspace, 0, g.conv->math, {0, 0, 0}},
                               {0, kSuccess, 1.0f, 0, 1, g.conv->math, {0, 0, 0}}};
  *returned = std::min(requested, 2);
  std::copy(offered, offered + *returned, perf);
  return kSuccess;
}
int workspace_size(void* handle, void* xd, void* wd, void* cd, void* yd, int algo, size_t* size) {
  if (!handle) return kNotInitialized;
  if (!as<Handle>(handle, kHandle) || !size) return kBadParam;
  Geometry g;
  if (int status = check_geometry(xd, wd, cd, yd, g)) return status;
  return workspace_for(algo, size);
}

// The timed searches (cudnnFind...AlgorithmEx, kiln's cudnn_benchmark): as if timed here, algo 0 is the fastest,
// then algo 1, which succeeds only when the search is given its workspace (cuDNN skips an algorithm that does not
// fit). The search writes every byte of the workspace it is given. Recorded as "name(workspace=bytes)" apart from
// the calls.
int find(const char* name, void* handle, void* xd, void* wd, void* cd, void* yd,
         std::initializer_list<const void*> pointers, int requested, int* returned, AlgoPerf* perf, void* workspace,
         size_t bytes) {
  if (!handle) return kNotInitialized;
  if (!as<Handle>(handle, kHandle) || !returned || !perf || requested < 1 || (bytes > 0 && !workspace))
    return kBadParam;
  for (const void* p : pointers)
    if (!p) return kBadParam;
  Geometry g;
  if (int status = check_geometry(xd, wd, cd, yd, g)) return status;
  if (bytes > 0) std::memset(workspace, 0xCD, bytes);
  const int algo1 = bytes >= kAlgo1Workspace ? kSuccess : kBadParam;
  const AlgoPerf found[2] = {{0, kSuccess, 0.25f, 0, 1, g.conv->math, {0, 0, 0}},
                             {1, algo1, 0.5f, kAlgo1Workspace, 0, g.conv->math, {0, 0, 0}}};
  *returned = std::min(requested, 2);
  std::copy(found, found + *returned, perf);
  std::lock_guard lock(mutex);
  last_find = std::string(name) + "(workspace=" + std::to_string(bytes) + ")";
  return kSuccess;
}

// What every convolution checks before it runs: handle, descriptors, pointers, algorithm and workspace.
int conv_prologue(void* handle, void* xd, void* wd, void* cd, void* yd, std::initializer_list<const void*> pointers,
                  int algo, void* workspace, size_t bytes, Geometry& g) {
  if (!handle) return kNotInitialized;
  if (!as<Handle>(handle, kHandle)) return kBadParam;
  for (const void* p : pointers)
    if (!p) return kBadParam;
  if (int status = check_geometry(xd, wd, cd, yd, g)) return status;
  return use_workspace(algo, workspace, bytes);
}

// The batch norms' descriptors: x (and y, dy, dx) N x C x H x W of one type and shape, and the parameters'
// 1 x C x 1 x 1 of double for double data and float otherwise.
int check_batch_norm(int mode, std::initializer_list<void*> data, void* bn_desc, const Tensor*& x, const Tensor*& bn) {
  if (mode == kBatchNormPerActivation || mode == kBatchNormSpatialPersistent) return kNotSupported;
  if (mode != kBatchNormSpatial) return kBadParam;
  x = nullptr;
  for (void* d : data) {
    const Tensor* t = as<Tensor>(d, kTensor);
    if (!t || !t->set) return kBadParam;
    if (!x) x = t;
    else if (t->type != x->type || t->n != x->n || t->c != x->c || t->h != x->h || t->w != x->w) return kBadParam;
  }
  bn = as<Tensor>(bn_desc, kTensor);
  if (!bn || !bn->set || bn->n != 1 || bn->c != x->c || bn->h != 1 || bn->w != 1) return kBadParam;
  if (bn->type != (x->type == kFloat64 ? kFloat64 : kFloat32)) return kBadParam;
  return kSuccess;
}

// Per channel: the mean and the biased variance over N x H x W.
void channel_moments(const Tensor& x, const void* data, int64_t c, double& mean, double& var) {
  const double m = double(x.n * x.h * x.w);
  double sum = 0;
  for (int64_t n = 0; n < x.n; ++n)
    for (int64_t h = 0; h < x.h; ++h)
      for (int64_t w = 0; w < x.w; ++w) sum += load(data, x.at(n, c, h, w), x.type);
  mean = sum / m;
  double squares = 0;
  for (int64_t n = 0; n < x.n; ++n)
    for (int64_t h = 0; h < x.h; ++h)
      for (int64_t w = 0; w < x.w; ++w) {
        const double d = load(data, x.at(n, c, h, w), x.type) - mean;
        squares += d * d;
      }
  var = squares / m;
}

// y = alpha (scale (x - mean) invstd + bias) + beta y over channel c.
void normalize_channel(const Tensor& xd, const void* x, const Tensor& yd, void* y, int64_t c, double mean,
                       double invstd, double scale, double bias, double alpha, double beta) {
  for (int64_t n = 0; n < xd.n; ++n)
    for (int64_t h = 0; h < xd.h; ++h)
      for (int64_t w = 0; w < xd.w; ++w) {
        const double v = scale * (load(x, xd.at(n, c, h, w), xd.type) - mean) * invstd + bias;
        blend(y, yd.at(n, c, h, w), yd.type, alpha, v, beta);
      }
}

}  // namespace

extern "C" {

size_t cudnnGetVersion() { return 91900; }

const char* cudnnGetErrorString(int status) {
  switch (status) {
    case kSuccess: return "CUDNN_STATUS_SUCCESS";
    case kNotInitialized: return "CUDNN_STATUS_NOT_INITIALIZED (emulated)";
    case kBadParam: return "CUDNN_STATUS_BAD_PARAM (emulated)";
    case kNotSupported: return "CUDNN_STATUS_NOT_SUPPORTED (emulated)";
    default: return "CUDNN_UNKNOWN_STATUS (emulated)";
  }
}

int cudnnCreate(void** handle) {
  if (!handle) return kBadParam;
  *handle = new Handle;
  return kSuccess;
}
int cudnnDestroy(void* handle) {
  if (!handle) return kNotInitialized;
  if (!as<Handle>(handle, kHandle)) return kBadParam;
  delete static_cast<Handle*>(handle);
  return kSuccess;
}
int cudnnSetStream(void* handle, void* stream) {
  if (!handle) return kNotInitialized;
  if (!as<Handle>(handle, kHandle)) return kBadParam;
  static_cast<Handle*>(handle)->stream = stream;
  return kSuccess;
}

int cudnnCreateTensorDescriptor(void** desc) {
  if (!desc) return kBadParam;
  *desc = new Tensor;
  return kSuccess;
}
int cudnnDestroyTensorDescriptor(void* desc) {
  if (!desc) return kSuccess;
  Tensor* t = as<Tensor>(desc, kTensor);
  if (!t) return kBadParam;
  delete t;
  return kSuccess;
}
int cudnnSetTensor4dDescriptorEx(void* desc, int type, int n, int c, int h, int w, int ns, int cs, int hs, int ws) {
  Tensor* t = as<Tensor>(desc, kTensor);
  if (!t) return kBadParam;
  if (int status = check_type(type)) return status;
  if (n < 1 || c < 1 || h < 1 || w < 1 || ns < 1 || cs < 1 || hs < 1 || ws < 1) return kBadParam;
  *t = Tensor{kTensor, true, type, n, c, h, w, ns, cs, hs, ws};
  return kSuccess;
}

int cudnnCreateFilterDescriptor(void** desc) {
  if (!desc) return kBadParam;
  *desc = new Filter;
  return kSuccess;
}
int cudnnDestroyFilterDescriptor(void* desc) {
  if (!desc) return kSuccess;
  Filter* f = as<Filter>(desc, kFilter);
  if (!f) return kBadParam;
  delete f;
  return kSuccess;
}
int cudnnSetFilter4dDescriptor(void* desc, int type, int format, int k, int c, int h, int w) {
  Filter* f = as<Filter>(desc, kFilter);
  if (!f) return kBadParam;
  if (int status = check_type(type)) return status;
  if (format < 0 || format > kLastFormat || k < 1 || c < 1 || h < 1 || w < 1) return kBadParam;
  if (format != kNCHW) return kNotSupported;
  *f = Filter{kFilter, true, type, k, c, h, w};
  return kSuccess;
}

int cudnnCreateConvolutionDescriptor(void** desc) {
  if (!desc) return kBadParam;
  *desc = new Conv;
  return kSuccess;
}
int cudnnDestroyConvolutionDescriptor(void* desc) {
  if (!desc) return kSuccess;
  Conv* c = as<Conv>(desc, kConv);
  if (!c) return kBadParam;
  delete c;
  return kSuccess;
}
int cudnnSetConvolution2dDescriptor(void* desc, int pad_h, int pad_w, int u, int v, int dilation_h, int dilation_w,
                                    int mode, int compute) {
  Conv* c = as<Conv>(desc, kConv);
  if (!c) return kBadParam;
  if (pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1) return kBadParam;
  if ((mode != kConvolution && mode != kCrossCorrelation) || compute < 0 || compute > kLastDataType) return kBadParam;
  c->pad_h = pad_h, c->pad_w = pad_w, c->u = u, c->v = v, c->dil_h = dilation_h, c->dil_w = dilation_w;
  c->mode = mode, c->compute = compute;
  return kSuccess;
}
int cudnnSetConvolutionGroupCount(void* desc, int groups) {
  Conv* c = as<Conv>(desc, kConv);
  if (!c || groups < 1) return kBadParam;
  c->groups = groups;
  return kSuccess;
}
// DEFAULT, TENSOR_OP, TENSOR_OP_ALLOW_CONVERSION, FMA.
int cudnnSetConvolutionMathType(void* desc, int math) {
  Conv* c = as<Conv>(desc, kConv);
  if (!c || math < 0 || math > 3) return kBadParam;
  c->math = math;
  return kSuccess;
}

int cudnnGetConvolutionForwardAlgorithm_v7(void* handle, void* xDesc, void* wDesc, void* convDesc, void* yDesc,
                                           int requested, int* returned, AlgoPerf* perf) {
  return algorithms(handle, xDesc, wDesc, convDesc, yDesc, requested, returned, perf);
}
int cudnnGetConvolutionBackwardDataAlgorithm_v7(void* handle, void* wDesc, void* dyDesc, void* convDesc,
                                                void* dxDesc, int requested, int* returned, AlgoPerf* perf) {
  return algorithms(handle, dxDesc, wDesc, convDesc, dyDesc, requested, returned, perf);
}
int cudnnGetConvolutionBackwardFilterAlgorithm_v7(void* handle, void* xDesc, void* dyDesc, void* convDesc,
                                                  void* dwDesc, int requested, int* returned, AlgoPerf* perf) {
  return algorithms(handle, xDesc, dwDesc, convDesc, dyDesc, requested, returned, perf);
}

int cudnnFindConvolutionForwardAlgorithmEx(void* handle, void* xDesc, const void* x, void* wDesc, const void* w,
                                           void* convDesc, void* yDesc, void* y, int requested, int* returned,
                                           AlgoPerf* perf, void* workspace, size_t bytes) {
  return find("cudnnFindConvolutionForwardAlgorithmEx", handle, xDesc, wDesc, convDesc, yDesc, {x, w, y}, requested,
              returned, perf, workspace, bytes);
}
int cudnnFindConvolutionBackwardDataAlgorithmEx(void* handle, void* wDesc, const void* w, void* dyDesc,
                                                const void* dy, void* convDesc, void* dxDesc, void* dx, int requested,
                                                int* returned, AlgoPerf* perf, void* workspace, size_t bytes) {
  return find("cudnnFindConvolutionBackwardDataAlgorithmEx", handle, dxDesc, wDesc, convDesc, dyDesc, {w, dy, dx},
              requested, returned, perf, workspace, bytes);
}
int cudnnFindConvolutionBackwardFilterAlgorithmEx(void* handle, void* xDesc, const void* x, void* dyDesc,
                                                  const void* dy, void* convDesc, void* dwDesc, void* dw,
                                                  int requested, int* returned, AlgoPerf* perf, void* workspace,
                                                  size_t bytes) {
  return find("cudnnFindConvolutionBackwardFilterAlgorithmEx", handle, xDesc, dwDesc, convDesc, dyDesc, {x, dy, dw},
              requested, returned, perf, workspace, bytes);
}

int cudnnGetConvolutionForwardWorkspaceSize(void* handle, void* xDesc, void* wDesc, void* convDesc, void* yDesc,
                                            int algo, size_t* size) {
  return workspace_size(handle, xDesc, wDesc, convDesc, yDesc, algo, size);
}
int cudnnGetConvolutionBackwardDataWorkspaceSize(void* handle, void* wDesc, void* dyDesc, void* convDesc,
                                                 void* dxDesc, int algo, size_t* size) {
  return workspace_size(handle, dxDesc, wDesc, convDesc, dyDesc, algo, size);
}
int cudnnGetConvolutionBackwardFilterWorkspaceSize(void* handle, void* xDesc, void* dyDesc, void* convDesc,
                                                   void* dwDesc, int algo, size_t* size) {
  return workspace_size(handle, xDesc, dwDesc, convDesc, dyDesc, algo, size);
}

// y = alpha conv(x, w) + beta y.
int cudnnConvolutionForward(void* handle, const void* alpha, void* xDesc, const void* x, void* wDesc, const void* w,
                            void* convDesc, int algo, void* workspace, size_t bytes, const void* beta, void* yDesc,
                            void* y) {
  Geometry g;
  if (int status = conv_prologue(handle, xDesc, wDesc, convDesc, yDesc, {alpha, x, w, beta, y}, algo, workspace,
                                 bytes, g))
    return status;
  record(static_cast<Handle*>(handle), conv_call("cudnnConvolutionForward", algo, bytes, *g.conv));
  if (kiln_emulated::skip_kernels()) return kSuccess;
  const Tensor &xd = *g.x, &yd = *g.y;
  const int type = xd.type;
  std::vector<double> sum(size_t(yd.n * yd.c * yd.h * yd.w), 0.0);
  for_each_tap(g, [&](int64_t n, int64_t k, int64_t oh, int64_t ow, int64_t ic, int64_t wi, int64_t ih, int64_t iw) {
    sum[size_t(((n * yd.c + k) * yd.h + oh) * yd.w + ow)] += load(x, xd.at(n, ic, ih, iw), type) * load(w, wi, type);
  });
  const double a = scalar(alpha, type), b = scalar(beta, type);
  for (int64_t n = 0, i = 0; n < yd.n; ++n)
    for (int64_t k = 0; k < yd.c; ++k)
      for (int64_t oh = 0; oh < yd.h; ++oh)
        for (int64_t ow = 0; ow < yd.w; ++ow, ++i) blend(y, yd.at(n, k, oh, ow), type, a, sum[size_t(i)], b);
  return kSuccess;
}

// dx = alpha conv^T(w, dy) + beta dx: the adjoint of the forward in x.
int cudnnConvolutionBackwardData(void* handle, const void* alpha, void* wDesc, const void* w, void* dyDesc,
                                 const void* dy, void* convDesc, int algo, void* workspace, size_t bytes,
                                 const void* beta, void* dxDesc, void* dx) {
  Geometry g;
  if (int status = conv_prologue(handle, dxDesc, wDesc, convDesc, dyDesc, {alpha, w, dy, beta, dx}, algo, workspace,
                                 bytes, g))
    return status;
  record(static_cast<Handle*>(handle), conv_call("cudnnConvolutionBackwardData", algo, bytes, *g.conv));
  if (kiln_emulated::skip_kernels()) return kSuccess;
  const Tensor &xd = *g.x, &yd = *g.y;
  const int type = xd.type;
  std::vector<double> sum(size_t(xd.n * xd.c * xd.h * xd.w), 0.0);
  for_each_tap(g, [&](int64_t n, int64_t k, int64_t oh, int64_t ow, int64_t ic, int64_t wi, int64_t ih, int64_t iw) {
    sum[size_t(((n * xd.c + ic) * xd.h + ih) * xd.w + iw)] += load(dy, yd.at(n, k, oh, ow), type) * load(w, wi, type);
  });
  const double a = scalar(alpha, type), b = scalar(beta, type);
  for (int64_t n = 0, i = 0; n < xd.n; ++n)
    for (int64_t c = 0; c < xd.c; ++c)
      for (int64_t h = 0; h < xd.h; ++h)
        for (int64_t ww = 0; ww < xd.w; ++ww, ++i) blend(dx, xd.at(n, c, h, ww), type, a, sum[size_t(i)], b);
  return kSuccess;
}

// dw = alpha sum over n, oh, ow of dy x (at the tap) + beta dw: the adjoint of the forward in w.
int cudnnConvolutionBackwardFilter(void* handle, const void* alpha, void* xDesc, const void* x, void* dyDesc,
                                   const void* dy, void* convDesc, int algo, void* workspace, size_t bytes,
                                   const void* beta, void* dwDesc, void* dw) {
  Geometry g;
  if (int status = conv_prologue(handle, xDesc, dwDesc, convDesc, dyDesc, {alpha, x, dy, beta, dw}, algo, workspace,
                                 bytes, g))
    return status;
  record(static_cast<Handle*>(handle), conv_call("cudnnConvolutionBackwardFilter", algo, bytes, *g.conv));
  if (kiln_emulated::skip_kernels()) return kSuccess;
  const Tensor &xd = *g.x, &yd = *g.y;
  const Filter& wd = *g.w;
  const int type = xd.type;
  std::vector<double> sum(size_t(wd.k * wd.c * wd.h * wd.w), 0.0);
  for_each_tap(g, [&](int64_t n, int64_t k, int64_t oh, int64_t ow, int64_t ic, int64_t wi, int64_t ih, int64_t iw) {
    sum[size_t(wi)] += load(dy, yd.at(n, k, oh, ow), type) * load(x, xd.at(n, ic, ih, iw), type);
  });
  const double a = scalar(alpha, type), b = scalar(beta, type);
  for (size_t i = 0; i < sum.size(); ++i) blend(dw, int64_t(i), type, a, sum[i], b);
  return kSuccess;
}

// Spatial batch norm, training: normalizes with the batch's statistics, moves the running ones by the factor (the
// variance unbiased) and saves the mean and 1 / sqrt(var + epsilon). Each pair of optional outputs is both or
// neither, as cuDNN requires.
int cudnnBatchNormalizationForwardTraining(void* handle, int mode, const void* alpha, const void* beta, void* xDesc,
                                           const void* x, void* yDesc, void* y, void* bnDesc, const void* bnScale,
                                           const void* bnBias, double factor, void* runningMean,
                                           void* runningVariance, double epsilon, void* saveMean,
                                           void* saveInvVariance) {
  if (!handle) return kNotInitialized;
  if (!as<Handle>(handle, kHandle)) return kBadParam;
  const Tensor *xd = nullptr, *bn = nullptr;
  if (int status = check_batch_norm(mode, {xDesc, yDesc}, bnDesc, xd, bn)) return status;
  const Tensor& yd = *as<Tensor>(yDesc, kTensor);
  if (!alpha || !beta || !x || !y || !bnScale || !bnBias || !(epsilon >= 0)) return kBadParam;
  if (!runningMean != !runningVariance || !saveMean != !saveInvVariance) return kBadParam;
  const int64_t m = xd->n * xd->h * xd->w;
  if (runningMean && m < 2) return kBadParam;  // no unbiased variance of one value
  record(static_cast<Handle*>(handle),
         "cudnnBatchNormalizationForwardTraining(factor=" + number(factor) + ", epsilon=" + number(epsilon) + ")");
  if (kiln_emulated::skip_kernels()) return kSuccess;
  const double a = scalar(alpha, xd->type), b = scalar(beta, xd->type);
  for (int64_t c = 0; c < xd->c; ++c) {
    const int64_t p = c * bn->cs;
    double mean = 0, var = 0;
    channel_moments(*xd, x, c, mean, var);
    const double invstd = 1 / std::sqrt(var + epsilon);
    normalize_channel(*xd, x, yd, y, c, mean, invstd, load(bnScale, p, bn->type), load(bnBias, p, bn->type), a, b);
    if (runningMean) {
      const double unbiased = var * double(m) / double(m - 1);
      // factor 1 (the first call of a training run) does not read the running values, which may be uninitialized
      const double keep = 1 - factor;
      store(runningMean, p, bn->type, factor * mean + (keep == 0 ? 0.0 : keep * load(runningMean, p, bn->type)));
      store(runningVariance, p, bn->type,
            factor * unbiased + (keep == 0 ? 0.0 : keep * load(runningVariance, p, bn->type)));
    }
    if (saveMean) {
      store(saveMean, p, bn->type, mean);
      store(saveInvVariance, p, bn->type, invstd);
    }
  }
  return kSuccess;
}

// Spatial batch norm, inference: normalizes with the given mean and variance.
int cudnnBatchNormalizationForwardInference(void* handle, int mode, const void* alpha, const void* beta, void* xDesc,
                                            const void* x, void* yDesc, void* y, void* bnDesc, const void* bnScale,
                                            const void* bnBias, const void* estimatedMean,
                                            const void* estimatedVariance, double epsilon) {
  if (!handle) return kNotInitialized;
  if (!as<Handle>(handle, kHandle)) return kBadParam;
  const Tensor *xd = nullptr, *bn = nullptr;
  if (int status = check_batch_norm(mode, {xDesc, yDesc}, bnDesc, xd, bn)) return status;
  const Tensor& yd = *as<Tensor>(yDesc, kTensor);
  if (!alpha || !beta || !x || !y || !bnScale || !bnBias || !estimatedMean || !estimatedVariance || !(epsilon >= 0))
    return kBadParam;
  record(static_cast<Handle*>(handle), "cudnnBatchNormalizationForwardInference(epsilon=" + number(epsilon) + ")");
  if (kiln_emulated::skip_kernels()) return kSuccess;
  const double a = scalar(alpha, xd->type), b = scalar(beta, xd->type);
  for (int64_t c = 0; c < xd->c; ++c) {
    const int64_t p = c * bn->cs;
    const double invstd = 1 / std::sqrt(load(estimatedVariance, p, bn->type) + epsilon);
    normalize_channel(*xd, x, yd, y, c, load(estimatedMean, p, bn->type), invstd, load(bnScale, p, bn->type),
                      load(bnBias, p, bn->type), a, b);
  }
  return kSuccess;
}

// Spatial batch norm, backward: dx (blended by alphaDataDiff, betaDataDiff) and the gradients of scale and bias
// (blended by alphaParamDiff, betaParamDiff), with the saved mean and inverse deviation when given (both or neither),
// else the batch's recomputed.
int cudnnBatchNormalizationBackward(void* handle, int mode, const void* alphaDataDiff, const void* betaDataDiff,
                                    const void* alphaParamDiff, const void* betaParamDiff, void* xDesc,
                                    const void* x, void* dyDesc, const void* dy, void* dxDesc, void* dx,
                                    void* bnDesc, const void* bnScale, void* dBnScaleResult, void* dBnBiasResult,
                                    double epsilon, const void* savedMean, const void* savedInvVariance) {
  if (!handle) return kNotInitialized;
  if (!as<Handle>(handle, kHandle)) return kBadParam;
  const Tensor *xd = nullptr, *bn = nullptr;
  if (int status = check_batch_norm(mode, {xDesc, dyDesc, dxDesc}, bnDesc, xd, bn)) return status;
  const Tensor &dyd = *as<Tensor>(dyDesc, kTensor), &dxd = *as<Tensor>(dxDesc, kTensor);
  if (!alphaDataDiff || !betaDataDiff || !alphaParamDiff || !betaParamDiff || !x || !dy || !dx || !bnScale ||
      !dBnScaleResult || !dBnBiasResult || !(epsilon >= 0) || !savedMean != !savedInvVariance)
    return kBadParam;
  record(static_cast<Handle*>(handle), "cudnnBatchNormalizationBackward(epsilon=" + number(epsilon) + ")");
  if (kiln_emulated::skip_kernels()) return kSuccess;
  const int type = xd->type;
  const double ad = scalar(alphaDataDiff, type), bd = scalar(betaDataDiff, type);
  const double ap = scalar(alphaParamDiff, type), bp = scalar(betaParamDiff, type);
  const double m = double(xd->n * xd->h * xd->w);
  for (int64_t c = 0; c < xd->c; ++c) {
    const int64_t p = c * bn->cs;
    double mean = 0, invstd = 0;
    if (savedMean) {
      mean = load(savedMean, p, bn->type);
      invstd = load(savedInvVariance, p, bn->type);
    } else {
      double var = 0;
      channel_moments(*xd, x, c, mean, var);
      invstd = 1 / std::sqrt(var + epsilon);
    }
    double dbias = 0, dscale = 0;
    for (int64_t n = 0; n < xd->n; ++n)
      for (int64_t h = 0; h < xd->h; ++h)
        for (int64_t w = 0; w < xd->w; ++w) {
          const double g = load(dy, dyd.at(n, c, h, w), type);
          dbias += g;
          dscale += g * (load(x, xd->at(n, c, h, w), type) - mean) * invstd;
        }
    const double k = load(bnScale, p, bn->type) * invstd / m;
    for (int64_t n = 0; n < xd->n; ++n)
      for (int64_t h = 0; h < xd->h; ++h)
        for (int64_t w = 0; w < xd->w; ++w) {
          const double xhat = (load(x, xd->at(n, c, h, w), type) - mean) * invstd;
          const double g = load(dy, dyd.at(n, c, h, w), type);
          blend(dx, dxd.at(n, c, h, w), type, ad, k * (m * g - dbias - xhat * dscale), bd);
        }
    blend(dBnScaleResult, p, bn->type, ap, dscale, bp);
    blend(dBnBiasResult, p, bn->type, ap, dbias, bp);
  }
  return kSuccess;
}

// For tests: the last convolution or batch norm as "name(algo=..., workspace=bytes, math=..., groups=...)" (math and
// groups: the convolution descriptor's) or "name(factor=..., epsilon=...)" / "name(epsilon=...)", and how many such
// calls there were.
const char* kiln_emulated_cudnn_last_call() {
  static thread_local std::string copy;
  std::lock_guard lock(mutex);
  copy = last_call;
  return copy.c_str();
}
// The stream the last of those calls was issued on (its handle's, cudnnSetStream).
void* kiln_emulated_cudnn_last_stream() {
  std::lock_guard lock(mutex);
  return last_stream;
}
// The last timed search as "name(workspace=bytes)".
const char* kiln_emulated_cudnn_last_find() {
  static thread_local std::string copy;
  std::lock_guard lock(mutex);
  copy = last_find;
  return copy.c_str();
}
long kiln_emulated_cudnn_calls() {
  std::lock_guard lock(mutex);
  return calls;
}

}  // extern "C"
