// The facts of the CUDA driver's ABI that pact relies on (values of cuda.h, written here so that
// pact builds without the toolkit). tests/unit/cuda_driver_test.cpp checks each against the
// toolkit's cuda.h where one is installed.
#pragma once

namespace pact::cuda::abi {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;
constexpr CUresult kSuccess = 0;
constexpr CUresult kNoDevice = 100;
constexpr int kAttrGdrSupported = 116;      // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED
constexpr int kAttrGdrFlushOptions = 117;   // CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS
constexpr int kAttrDmabufSupported = 124;   // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
constexpr int kPtrContext = 1;              // CU_POINTER_ATTRIBUTE_CONTEXT
constexpr int kPtrMemoryType = 2;           // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kPtrBufferId = 7;             // CU_POINTER_ATTRIBUTE_BUFFER_ID
constexpr int kPtrDeviceOrdinal = 9;        // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr int kPtrRangeStart = 11;          // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
constexpr int kPtrRangeSize = 12;           // CU_POINTER_ATTRIBUTE_RANGE_SIZE
constexpr unsigned kMemoryTypeDevice = 2;   // CU_MEMORYTYPE_DEVICE
constexpr int kHandleDmabufFd = 1;          // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
constexpr int kFlushTargetCurrentCtx = 0;   // CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX
constexpr int kFlushToOwner = 100;          // CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER
constexpr int kVersionDmabuf = 11070;       // cuMemGetHandleForAddressRange
constexpr int kVersionFlush = 11030;        // cuFlushGPUDirectRDMAWrites


}  // namespace pact::cuda::abi
