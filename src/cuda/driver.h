// The CUDA driver, loaded with dlopen at run time: pact never links it (a machine without a GPU
// runs host-only, and one build serves both). Only the calls pact needs, each resolved by name
// with the driver version it needs; a missing call or an older driver turns that one capability
// off with a reason, never the whole driver.
//
// The library is PACT_CUDA_DRIVER (default libcuda.so.1, the library the GPU driver installs; the
// toolkit's stubs/libcuda.so only links). Tests point it at the driver double under
// tests/cuda_double, whose "device memory" is host memory: it says so by exporting
// pact_cuda_double_host_backed, and hostBacked() reports it (the one thing the rest of pact asks
// about a double: UCX must then be told host memory, since that is what it is).
//
// One Driver per library path, loaded on first use; thread-safe. The Drivers are static objects of
// the library pact is linked into (destroyed when it is unloaded or the process ends); the driver
// library itself stays loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace pact::cuda {

// What the driver says of one device.
struct DeviceFacts {
  int ordinal = -1;
  bool dmabuf = false;          // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
  bool gdrRdma = false;         // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
  int flushOptions = 0;         // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS bits
  bool hostFlush() const { return (flushOptions & 1) != 0; }  // ..._OPTION_HOST: cuFlushGPUDirectRDMAWrites works
  std::string pciBusId;         // "0000:3b:00.0"
};

// What the driver says of an address.
struct PointerFacts {
  bool device = false;          // CU_MEMORYTYPE_DEVICE (or managed memory resident as device)
  int ordinal = -1;             // the device it was allocated on
  uint64_t bufferId = 0;        // unique per allocation for the life of the process
  uintptr_t rangeStart = 0;     // the allocation holding the address
  size_t rangeSize = 0;
};

class Driver {
 public:
  // The driver of `path` (empty: libcuda.so.1), loaded on the first call for it. Never fails: a
  // driver that is absent or unusable is a Driver with available() false and why() saying so.
  static const Driver& instance(const std::string& path = {});

  bool available() const { return usable_; }
  const std::string& why() const { return why_; }       // why it is not available
  const std::string& path() const { return path_; }
  int version() const { return version_; }              // cuDriverGetVersion: 12080 = 12.8
  int deviceCount() const { return deviceCount_; }
  bool hostBacked() const { return hostBacked_; }       // the test double: device memory is host memory

  // The facts of a device, read once when the driver loaded.
  Result<DeviceFacts> device(int ordinal) const;
  // Facts of addr; a host address (or one the driver does not know) gives device == false.
  Result<PointerFacts> pointer(const void* addr) const;
  // Whether the driver can export a dmabuf of device memory at all (version, entry point).
  bool canExportDmabuf(std::string* why = nullptr) const;
  // A dmabuf fd for [addr, addr + length) (cuMemGetHandleForAddressRange, driver 11.7); the caller
  // owns the fd. addr and length must be page-aligned.
  Result<int> exportDmabuf(const void* addr, size_t length) const;
  // Whether cuFlushGPUDirectRDMAWrites can be called (version, entry point).
  bool canFlush(std::string* why = nullptr) const;
  // Makes earlier GPUDirect RDMA writes into memory of the context owning addr visible to that
  // context (cuFlushGPUDirectRDMAWrites, driver 11.3).
  Status flushRdmaWrites(const void* addr) const;
  // Synchronous copies between host and device memory, in the context owning the device side.
  Status copyToDevice(void* dst, const void* src, size_t length) const;
  Status copyToHost(void* dst, const void* src, size_t length) const;
  // Device memory in the device's primary context, for tools and tests (the GPU check).
  Result<void*> allocate(int ordinal, size_t length) const;
  Status release(void* addr) const;

  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;
  ~Driver();

  struct Api;  // the resolved entry points (driver.cpp)

 private:
  explicit Driver(const std::string& path);
  const Api& api() const { return *api_; }
  bool callable(int need, const void* entry, const char* name, std::string* why) const;
  DeviceFacts readDevice(int ordinal) const;

  std::string path_;
  std::string why_;
  bool usable_ = false;
  bool hostBacked_ = false;
  int version_ = 0;
  int deviceCount_ = 0;
  std::unique_ptr<Api> api_;
  std::vector<DeviceFacts> devices_;  // read at load, one per device
};

}  // namespace pact::cuda
