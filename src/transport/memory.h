// Memory: what memory a device can move and how pact touches GPU memory, for both faces.
//   - MemoryFacts: what the CUDA driver and the loaded UCX say (gathered at run time), and
//     decideMemory(), the pure rule from those facts to NCCL's ptrSupport bits with a reason for
//     every "no" (pact-info prints them; tests/unit/memory_test.cpp walks the table).
//   - checkDmabuf(): the checks of a dmabuf fd and offset a caller hands in (regMrDmaBuf,
//     pact_mem_register_ex) before anything is registered. Nothing keeps the fd: NCCL closes it
//     right after the call, and UCP (up to 1.22) takes no dmabuf fd, so the range is registered by
//     address with its memory type and UCX exports its own dmabuf where a NIC needs one.
//   - copyIn()/readStaged(): bytes into a block of either memory type (the driver's copy for
//     CUDA, never a CPU store into device memory) and bytes out of one through a bounded host
//     staging buffer (checksums of GPU blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/function_ref.h"
#include "common/status.h"
#include "cuda/driver.h"
#include "ucx/devices.h"
#include "ucx/reg_cache.h"

namespace pact::transport {

// NCCL_PTR_* (plugin/abi/net_common.h has the ABI's own names).
inline constexpr int kPtrHost = 0x1;
inline constexpr int kPtrCuda = 0x2;
inline constexpr int kPtrDmabuf = 0x4;

struct MemoryFacts {
  // The CUDA driver.
  bool driver = false;
  std::string driverWhy;        // why not, when !driver
  int gpus = 0;
  bool hostBacked = false;      // the driver double
  bool gpuDmabuf = false;       // some GPU reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
  bool driverExport = false;    // the driver can export a dmabuf (>= 11.7, entry point present)
  std::string exportWhy;
  bool gpuDirectRdma = false;   // some GPU reports CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
  bool hostFlush = false;       // ... and the host flush option (cuFlushGPUDirectRDMAWrites)
  // The loaded UCX.
  std::string ucxVersion;
  bool ucpCuda = false;         // the UCP context lists UCS_MEMORY_TYPE_CUDA
  bool ucxDmabufBuilt = false;  // built against headers with UCT_MD_FLAG_REG_DMABUF
  bool mdDmabuf = false;        // a memory domain of the device's transports registers dmabuf fds
  bool rdma = false;            // the device has RC/UD transports (NIC writes into memory)
};

struct MemorySupport {
  int ptrSupport = kPtrHost;
  bool cuda() const { return (ptrSupport & kPtrCuda) != 0; }
  bool dmabuf() const { return (ptrSupport & kPtrDmabuf) != 0; }
  std::string cudaWhy;    // why no CUDA, when !cuda()
  std::string dmabufWhy;  // why no dmabuf, when !dmabuf()
  // How a receive into CUDA memory is flushed under PACT_GPU_FLUSH=auto: "none (...)", "driver",
  // "loopback read".
  std::string flushMethod;
};

// The rule (docs/gpu.md): CUDA when the driver sees a GPU and UCX can register and move CUDA
// memory (its context lists the CUDA memory type; the double's host-backed memory counts);
// dmabuf when CUDA holds, UCX has a dmabuf-capable memory domain on the device, and the driver
// can export a dmabuf of a GPU that supports it.
MemorySupport decideMemory(const MemoryFacts& f);

// The facts of one device: the process's driver and UCX (a probe UCP context, once per process).
MemoryFacts gatherMemoryFacts(const ucx::DeviceInfo& device, const cuda::Driver& driver);
// The loaded UCX's version and whether its UCP context lists CUDA memory (cached probe).
bool ucpListsCuda(std::string* version = nullptr);

// A dmabuf fd and offset for `size` bytes: the fd is open, is a dmabuf or at least a mappable
// file, and [offset, offset + size) lies inside it. The error names the check that failed.
Status checkDmabuf(int fd, uint64_t offset, size_t size, std::string* why);

}  // namespace pact::transport
