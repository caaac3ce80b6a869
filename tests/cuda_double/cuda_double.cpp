// TEST DOUBLE of the CUDA driver (libcuda.so.1), for machines without a GPU. pact loads it
// through the same dlopen seam as the real driver (PACT_CUDA_DRIVER=<this library>); it exports
// the entry points src/cuda/driver.cpp resolves, with the real ABI, and nothing else of CUDA.
//
// What it is: "device memory" is host memory (a memfd per allocation, mapped shared), so UCX,
// which cannot see this double, moves it as host memory; pact learns that from the marker
// pact_cuda_double_host_backed. Pointer attributes, contexts, dmabuf export (an fd of the
// allocation's memfd: mappable, with the allocation's size) and GPUDirect flushes (counted) behave
// as the driver documents them.
// What it proves: pact's decisions (which flags, which flush, which copies, which refusals) and
// that bytes reach the right "device" addresses through the driver's copy calls. What it cannot:
// that real device memory is registered by UCX, that a NIC's writes become visible, that a real
// dmabuf fd is accepted by the kernel (ci/gpu-check.sh does those on a GPU machine).
//
// Configured by PACTTEST_CUDA_DOUBLE (read at cuInit) or pact_cuda_double_configure():
//   gpus=N (1), version=V (12080), dmabuf=0|1 (1), gdr=0|1 (1), flush=0|1 (1: the host flush
//   option), export=0|1 (1: cuMemGetHandleForAddressRange works)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {
using CUresult = int;
using CUdeviceptr = unsigned long long;
constexpr CUresult kOk = 0, kInvalidValue = 1, kNotInitialized = 3, kInvalidContext = 201,
                   kInvalidDevice = 101, kNotSupported = 801, kNoDevice = 100;

struct Config {
  int gpus = 1, version = 12080;
  bool dmabuf = true, gdr = true, flush = true, exportOk = true;
};
struct Allocation {
  size_t size = 0;
  int fd = -1;
  int device = 0;
  unsigned long long id = 0;
};

std::mutex mu;
Config config;
bool initialized = false;
std::map<uintptr_t, Allocation> allocations;  // by base address
unsigned long long nextId = 1;
int contexts[16];  // a context is the address of its device's slot
thread_local std::vector<void*> current;
long flushes = 0, copies = 0, exports = 0;

void parse(const char* text) {
  config = Config{};
  std::string s = text ? text : "";
  size_t at = 0;
  while (at < s.size()) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    std::string kv = s.substr(at, end - at);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) {
      std::string k = kv.substr(0, eq);
      int v = std::atoi(kv.c_str() + eq + 1);
      if (k == "gpus") config.gpus = v < 0 ? 0 : (v > 16 ? 16 : v);
      if (k == "version") config.version = v;
      if (k == "dmabuf") config.dmabuf = v != 0;
      if (k == "gdr") config.gdr = v != 0;
      if (k == "flush") config.flush = v != 0;
      if (k == "export") config.exportOk = v != 0;
    }
    at = end + 1;
  }
}

// The allocation holding p (lock held), or nullptr.
const std::pair<const uintptr_t, Allocation>* find(uintptr_t p) {
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return nullptr;
  --it;
  return p < it->first + it->second.size ? &*it : nullptr;
}
void* contextOf(int device) { return &contexts[device]; }
}  // namespace

extern "C" {
__attribute__((visibility("default"))) int pact_cuda_double_host_backed = 1;

__attribute__((visibility("default"))) void pact_cuda_double_configure(const char* text) {
  std::lock_guard lock(mu);
  parse(text);
}
__attribute__((visibility("default"))) long pact_cuda_double_flushes() { std::lock_guard l(mu); return flushes; }
__attribute__((visibility("default"))) long pact_cuda_double_copies() { std::lock_guard l(mu); return copies; }
__attribute__((visibility("default"))) long pact_cuda_double_exports() { std::lock_guard l(mu); return exports; }

__attribute__((visibility("default"))) CUresult cuInit(unsigned) {
  std::lock_guard lock(mu);
  if (!initialized && std::getenv("PACTTEST_CUDA_DOUBLE") != nullptr) parse(std::getenv("PACTTEST_CUDA_DOUBLE"));
  initialized = true;
  return config.gpus == 0 ? kNoDevice : kOk;
}
__attribute__((visibility("default"))) CUresult cuDriverGetVersion(int* v) {
  std::lock_guard lock(mu);
  *v = config.version;
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuDeviceGetCount(int* n) {
  std::lock_guard lock(mu);
  if (!initialized) return kNotInitialized;
  *n = config.gpus;
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuDeviceGet(int* dev, int ordinal) {
  std::lock_guard lock(mu);
  if (ordinal < 0 || ordinal >= config.gpus) return kInvalidDevice;
  *dev = ordinal;
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  std::lock_guard lock(mu);
  if (dev < 0 || dev >= config.gpus) return kInvalidDevice;
  switch (attr) {
    case 116: *v = config.gdr; return kOk;              // GPU_DIRECT_RDMA_SUPPORTED
    case 117: *v = config.flush ? 1 : 0; return kOk;    // ..._FLUSH_WRITES_OPTIONS: HOST bit
    case 124: *v = config.dmabuf; return kOk;           // DMA_BUF_SUPPORTED
    default: *v = 0; return kInvalidValue;
  }
}
__attribute__((visibility("default"))) CUresult cuDeviceGetPCIBusId(char* out, int len, int dev) {
  if (len < 13) return kInvalidValue;
  std::snprintf(out, static_cast<size_t>(len), "0000:%02x:00.0", 0x10 + dev);
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr p) {
  std::lock_guard lock(mu);
  const auto* a = find(static_cast<uintptr_t>(p));
  if (a == nullptr) return kInvalidValue;  // what the driver says of memory it did not allocate
  switch (attr) {
    case 1: *static_cast<void**>(data) = contextOf(a->second.device); return kOk;
    case 2: *static_cast<unsigned*>(data) = 2; return kOk;  // CU_MEMORYTYPE_DEVICE
    case 7: *static_cast<unsigned long long*>(data) = a->second.id; return kOk;
    case 9: *static_cast<int*>(data) = a->second.device; return kOk;
    case 11: *static_cast<CUdeviceptr*>(data) = a->first; return kOk;
    case 12: *static_cast<size_t*>(data) = a->second.size; return kOk;
    default: return kInvalidValue;
  }
}
__attribute__((visibility("default"))) CUresult cuCtxPushCurrent_v2(void* ctx) {
  current.push_back(ctx);
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuCtxPopCurrent_v2(void** ctx) {
  if (current.empty()) return kInvalidContext;
  if (ctx) *ctx = current.back();
  current.pop_back();
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  std::lock_guard lock(mu);
  if (dev < 0 || dev >= config.gpus) return kInvalidDevice;
  *ctx = contextOf(dev);
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t size) {
  if (current.empty()) return kInvalidContext;
  const int dev = static_cast<int>(static_cast<int*>(current.back()) - contexts);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (size + page - 1) / page * page;
  int fd = memfd_create("pact-cuda-double", MFD_CLOEXEC);
  if (fd < 0) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    close(fd);
    return 2;
  }
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return 2;
  }
  std::lock_guard lock(mu);
  allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{rounded, fd, dev, nextId++};
  *out = reinterpret_cast<uintptr_t>(p);
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr p) {
  std::lock_guard lock(mu);
  auto it = allocations.find(static_cast<uintptr_t>(p));
  if (it == allocations.end()) return kInvalidValue;
  munmap(reinterpret_cast<void*>(it->first), it->second.size);
  close(it->second.fd);
  allocations.erase(it);
  return kOk;
}
// Copies need a current context and the device side inside an allocation, as the driver's do.
__attribute__((visibility("default"))) CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  if (current.empty()) return kInvalidContext;
  std::lock_guard lock(mu);
  const auto* a = find(static_cast<uintptr_t>(dst));
  if (a == nullptr || dst + n > a->first + a->second.size) return kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  ++copies;
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  if (current.empty()) return kInvalidContext;
  std::lock_guard lock(mu);
  const auto* a = find(static_cast<uintptr_t>(src));
  if (a == nullptr || src + n > a->first + a->second.size) return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  ++copies;
  return kOk;
}
// The exported fd is a new open of the allocation's memfd: the range must start at the
// allocation (the double keeps no sub-range views), page-aligned, and fit in it.
__attribute__((visibility("default"))) CUresult cuMemGetHandleForAddressRange(void* handle, CUdeviceptr p, size_t size,
                                                                               int type, unsigned long long flags) {
  std::lock_guard lock(mu);
  if (!config.exportOk || !config.dmabuf) return kNotSupported;
  if (type != 1 || flags != 0) return kInvalidValue;
  auto it = allocations.find(static_cast<uintptr_t>(p));
  if (it == allocations.end() || size == 0 || size > it->second.size) return kInvalidValue;
  const std::string path = "/proc/self/fd/" + std::to_string(it->second.fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return kInvalidValue;
  *static_cast<int*>(handle) = fd;
  ++exports;
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuFlushGPUDirectRDMAWrites(int target, int scope) {
  if (current.empty()) return kInvalidContext;
  std::lock_guard lock(mu);
  if (!config.flush || target != 0 || (scope != 100 && scope != 200)) return kNotSupported;
  ++flushes;
  return kOk;
}
__attribute__((visibility("default"))) CUresult cuGetErrorString(CUresult r, const char** text) {
  switch (r) {
    case kOk: *text = "no error"; return kOk;
    case kInvalidValue: *text = "invalid argument"; return kOk;
    case kInvalidContext: *text = "invalid device context"; return kOk;
    case kNotSupported: *text = "operation not supported"; return kOk;
    case kNoDevice: *text = "no CUDA-capable device is detected"; return kOk;
    default: *text = "an error of the CUDA driver test double"; return kOk;
  }
}
}  // extern "C"
