// GPU memory without a GPU: the CUDA driver seam (src/cuda) against the driver TEST DOUBLE
// (tests/cuda_double), the ptrSupport rule over a table of facts, the dmabuf fd checks, GPU
// registrations in the cache over a real UCX context, and the copies into and out of GPU memory.
// What the double proves: pact's decisions and that bytes go through the driver's calls. What
// only a GPU can: that real device memory registers in UCX and real flushes happen
// (ci/gpu-check.sh, docs/gpu.md).
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda/abi.h"
#include "cuda/driver.h"
#include "pact_config.h"
#include "transport/memory.h"
#include "transport/memory_copy.h"
#include "ucx/reg_cache.h"

#if PACT_HAVE_CUDA_H
#include <cuda.h>
// The ABI facts src/cuda/abi.h writes down, against the toolkit's header.
namespace cabi = pact::cuda::abi;
static_assert(cabi::kSuccess == CUDA_SUCCESS && cabi::kNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(cabi::kAttrGdrSupported == CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED);
static_assert(cabi::kAttrGdrFlushOptions == CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS);
static_assert(cabi::kAttrDmabufSupported == CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED);
static_assert(cabi::kPtrContext == CU_POINTER_ATTRIBUTE_CONTEXT);
static_assert(cabi::kPtrMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(cabi::kPtrBufferId == CU_POINTER_ATTRIBUTE_BUFFER_ID);
static_assert(cabi::kPtrDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(cabi::kPtrRangeStart == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
static_assert(cabi::kPtrRangeSize == CU_POINTER_ATTRIBUTE_RANGE_SIZE);
static_assert(cabi::kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(cabi::kHandleDmabufFd == CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD);
static_assert(cabi::kFlushTargetCurrentCtx == CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX);
static_assert(cabi::kFlushToOwner == CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
static_assert(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST == 1);  // DeviceFacts::hostFlush
static_assert(sizeof(cabi::CUdeviceptr) == sizeof(CUdeviceptr));
#endif

namespace pact {
namespace {

using transport::kPtrCuda;
using transport::kPtrDmabuf;
using transport::kPtrHost;

// A private copy of the double per configuration: each path is its own library instance (its
// own configuration, its own Driver in pact), so one process can hold several.
struct Double {
  std::string path;
  void* lib = nullptr;
  long (*flushes)() = nullptr;
  long (*copies)() = nullptr;
  long (*exports)() = nullptr;

  explicit Double(const std::string& config) {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("pact-cuda-double-" + std::to_string(getpid()) + "-" + std::to_string(++n) + ".so");
    std::filesystem::copy_file(PACT_CUDA_DOUBLE_PATH, path, std::filesystem::copy_options::overwrite_existing);
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(lib, nullptr) << dlerror();
    reinterpret_cast<void (*)(const char*)>(dlsym(lib, "pact_cuda_double_configure"))(config.c_str());
    flushes = reinterpret_cast<long (*)()>(dlsym(lib, "pact_cuda_double_flushes"));
    copies = reinterpret_cast<long (*)()>(dlsym(lib, "pact_cuda_double_copies"));
    exports = reinterpret_cast<long (*)()>(dlsym(lib, "pact_cuda_double_exports"));
  }
  ~Double() { std::filesystem::remove(path); }  // the library stays loaded (Drivers are immortal)
  const cuda::Driver& driver() const { return cuda::Driver::instance(path); }
};

TEST(CudaDriver, AbsentLibraryIsHostOnlyWithTheReason) {
  const cuda::Driver& d = cuda::Driver::instance("libpact-no-such-cuda-driver.so.1");
  EXPECT_FALSE(d.available());
  EXPECT_NE(d.why().find("libpact-no-such-cuda-driver.so.1"), std::string::npos) << d.why();
  EXPECT_EQ(d.deviceCount(), 0);
  EXPECT_FALSE(d.device(0).ok());
  auto p = d.pointer(&d);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->device);
  EXPECT_EQ(d.copyToDevice(nullptr, nullptr, 0), Status::kUnsupported);
}

TEST(CudaDriver, NoGpuIsHostOnly) {
  Double dbl("gpus=0");
  EXPECT_FALSE(dbl.driver().available());
  EXPECT_NE(dbl.driver().why().find("no device"), std::string::npos) << dbl.driver().why();
}

TEST(CudaDriver, FactsOfDevicesAndPointers) {
  Double dbl("gpus=2,dmabuf=1,gdr=1,flush=1,version=12080");
  const cuda::Driver& d = dbl.driver();
  ASSERT_TRUE(d.available()) << d.why();
  EXPECT_TRUE(d.hostBacked());
  EXPECT_EQ(d.version(), 12080);
  EXPECT_EQ(d.deviceCount(), 2);
  auto f = d.device(1);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->dmabuf);
  EXPECT_TRUE(f->gdrRdma);
  EXPECT_TRUE(f->hostFlush());
  EXPECT_EQ(f->pciBusId, "0000:11:00.0");
  EXPECT_EQ(d.device(2).status(), Status::kInvalidArgument);

  auto mem = d.allocate(1, 100000);
  ASSERT_TRUE(mem.ok()) << mem.error().message;
  auto* base = static_cast<uint8_t*>(*mem);
  auto p = d.pointer(base + 5000);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->device);
  EXPECT_EQ(p->ordinal, 1);
  EXPECT_EQ(p->rangeStart, reinterpret_cast<uintptr_t>(base));
  EXPECT_GE(p->rangeSize, 100000u);
  EXPECT_NE(p->bufferId, 0u);
  int host = 0;
  EXPECT_FALSE(d.pointer(&host)->device);

  // Copies go through the driver, in the allocation's context.
  std::vector<uint8_t> in(4096, 0x5c), out(4096, 0);
  const long before = dbl.copies();
  EXPECT_EQ(d.copyToDevice(base + 100, in.data(), in.size()), Status::kOk);
  EXPECT_EQ(d.copyToHost(out.data(), base + 100, out.size()), Status::kOk);
  EXPECT_EQ(out, in);
  EXPECT_EQ(dbl.copies() - before, 2);
  EXPECT_NE(d.copyToDevice(&host, in.data(), 4), Status::kOk) << "a host address is no copy target";

  // dmabuf export: an fd of the allocation's size; flush counted.
  auto fd = d.exportDmabuf(base, 4096 * 25);
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  EXPECT_GE(*fd, 0);
  std::string why;
  EXPECT_EQ(transport::checkDmabuf(*fd, 0, 100000, &why), Status::kOk) << why;
  close(*fd);
  const long flushes = dbl.flushes();
  EXPECT_EQ(d.flushRdmaWrites(base), Status::kOk);
  EXPECT_EQ(dbl.flushes() - flushes, 1);
  EXPECT_EQ(d.release(base), Status::kOk);
}

TEST(CudaDriver, OldDriverLacksExportButFlushes) {
  Double dbl("version=11040,export=0");
  std::string why;
  EXPECT_FALSE(dbl.driver().canExportDmabuf(&why));
  EXPECT_NE(why.find("11.7"), std::string::npos) << why;
  EXPECT_TRUE(dbl.driver().canFlush(&why));
  EXPECT_EQ(dbl.driver().exportDmabuf(nullptr, 0).status(), Status::kUnsupported);
}

// ---- the ptrSupport rule ------------------------------------------------------------------------

struct Row {
  const char* name;
  bool driver;
  int gpus;
  bool gpuDmabuf;
  bool ucpCuda;
  bool hostBacked;
  bool built;     // UCX headers with dmabuf
  bool mdDmabuf;  // a dmabuf-capable memory domain on the device
  bool exportOk;
  int expected;
  const char* why;  // in the first "no" reason
};

class PtrSupport : public ::testing::TestWithParam<Row> {};

TEST_P(PtrSupport, FlagsFromFacts) {
  const Row& r = GetParam();
  transport::MemoryFacts f;
  f.driver = r.driver;
  f.driverWhy = r.driver ? "" : "no CUDA driver (libcuda.so.1: cannot open)";
  f.gpus = r.gpus;
  f.gpuDmabuf = r.gpuDmabuf;
  f.ucpCuda = r.ucpCuda;
  f.hostBacked = r.hostBacked;
  f.ucxDmabufBuilt = r.built;
  f.mdDmabuf = r.mdDmabuf;
  f.driverExport = r.exportOk;
  f.ucxVersion = "1.x";
  const transport::MemorySupport s = transport::decideMemory(f);
  EXPECT_EQ(s.ptrSupport, r.expected);
  const std::string why = s.cuda() ? s.dmabufWhy : s.cudaWhy;
  if (r.expected != (kPtrHost | kPtrCuda | kPtrDmabuf)) {
    EXPECT_NE(why.find(r.why), std::string::npos) << why;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, PtrSupport,
    ::testing::Values(
        Row{"NoDriver", false, 0, false, true, false, true, true, true, kPtrHost, "libcuda.so.1"},
        Row{"NoGpu", true, 0, true, true, false, true, true, true, kPtrHost, "no GPU"},
        Row{"UcxWithoutCuda", true, 1, true, false, false, true, true, true, kPtrHost, "no CUDA memory type"},
        Row{"Double", true, 1, true, false, true, false, false, true, kPtrHost | kPtrCuda, "headers"},
        Row{"UcxHeadersWithoutDmabuf", true, 1, true, true, false, false, true, true, kPtrHost | kPtrCuda, "headers"},
        Row{"NoDmabufDomain", true, 1, true, true, false, true, false, true, kPtrHost | kPtrCuda, "memory domain"},
        Row{"GpuWithoutDmabuf", true, 1, false, true, false, true, true, true, kPtrHost | kPtrCuda, "no GPU reports"},
        Row{"DriverCannotExport", true, 1, true, true, false, true, true, false, kPtrHost | kPtrCuda, "export"},
        Row{"Everything", true, 8, true, true, false, true, true, true, kPtrHost | kPtrCuda | kPtrDmabuf, ""}),
    [](const ::testing::TestParamInfo<Row>& i) { return std::string(i.param.name); });

TEST(MemoryFacts, FlushMethodFollowsTheDevice) {
  transport::MemoryFacts f;
  f.driver = true;
  f.gpus = 1;
  f.ucpCuda = true;
  EXPECT_NE(transport::decideMemory(f).flushMethod.find("none"), std::string::npos);
  f.rdma = true;
  EXPECT_EQ(transport::decideMemory(f).flushMethod, "loopback read");
  f.gpuDirectRdma = f.hostFlush = true;
  EXPECT_EQ(transport::decideMemory(f).flushMethod, "driver");
}

// ---- dmabuf fd checks ---------------------------------------------------------------------------

TEST(CheckDmabuf, EachCheckNamesWhatFailed) {
  std::string why;
  int fd = memfd_create("pact-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  EXPECT_EQ(transport::checkDmabuf(fd, 0, 1 << 20, &why), Status::kOk) << why;
  EXPECT_EQ(transport::checkDmabuf(fd, 4096, (1 << 20) - 4096, &why), Status::kOk) << why;

  EXPECT_EQ(transport::checkDmabuf(fd, 4096, 1 << 20, &why), Status::kOutOfRange);
  EXPECT_NE(why.find("offset 4096 + size 1048576 exceeds its size 1048576"), std::string::npos) << why;
  EXPECT_EQ(transport::checkDmabuf(fd, 2 << 20, 1, &why), Status::kOutOfRange);
  EXPECT_EQ(transport::checkDmabuf(fd, UINT64_MAX, 2, &why), Status::kOutOfRange) << "no wrap-around";

  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  EXPECT_EQ(transport::checkDmabuf(pipeFds[0], 0, 1, &why), Status::kInvalidArgument);
  EXPECT_NE(why.find("neither a dmabuf nor a mappable file"), std::string::npos) << why;
  close(pipeFds[0]);
  close(pipeFds[1]);

  close(fd);
  EXPECT_EQ(transport::checkDmabuf(fd, 0, 1, &why), Status::kInvalidArgument);
  EXPECT_NE(why.find("not an open file descriptor"), std::string::npos) << why;
  EXPECT_EQ(transport::checkDmabuf(-1, 0, 1, &why), Status::kInvalidArgument);
}

// ---- registrations and copies -------------------------------------------------------------------

class GpuRegistration : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = ucx::Context::create("", "unit");
    ASSERT_TRUE(c.ok()) << c.error().message;
    ctx_ = std::move(c.value());
  }
  ucx::Context ctx_;
};

TEST_F(GpuRegistration, CudaMemoryRegistersWithItsTypeAndStaysInsideItsAllocation) {
  Double dbl("gpus=1");
  ucx::RegCache cache(ctx_, dbl.driver());
  EXPECT_TRUE(cache.cudaMemory());
  auto mem = dbl.driver().allocate(0, 3 * 4096 + 100);
  ASSERT_TRUE(mem.ok());
  auto* base = static_cast<uint8_t*>(*mem);

  auto r = cache.acquire({base + 10, 4096, ucx::MemoryType::kCuda});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->type, ucx::MemoryType::kCuda);
  EXPECT_EQ((*r)->ucxType, UCS_MEMORY_TYPE_HOST) << "the double's device memory is host memory";
  EXPECT_EQ((*r)->device, 0);
  EXPECT_GE((*r)->start, reinterpret_cast<uintptr_t>(base)) << "clipped to the allocation";
  // The same range as host memory is another registration (keyed by memory type).
  auto h = cache.acquire({base + 10, 4096, ucx::MemoryType::kHost});
  ASSERT_TRUE(h.ok());
  EXPECT_NE(h->get(), r->get());

  auto past = cache.acquire({base, 5 * 4096, ucx::MemoryType::kCuda});
  EXPECT_EQ(past.status(), Status::kOutOfRange);
  EXPECT_NE(past.error().message.find("past the end of its allocation"), std::string::npos);
  std::vector<uint8_t> host(4096);
  auto notDevice = cache.acquire({host.data(), host.size(), ucx::MemoryType::kCuda});
  EXPECT_EQ(notDevice.status(), Status::kInvalidArgument);
  EXPECT_NE(notDevice.error().message.find("does not know as device memory"), std::string::npos);
  r = Error{};  // the regions go before the memory
  h = Error{};
  EXPECT_EQ(dbl.driver().release(base), Status::kOk);
}

TEST(GpuCopies, IntoAndOutOfGpuMemoryThroughTheDriver) {
  Double dbl("gpus=1");
  const cuda::Driver& d = dbl.driver();
  const size_t n = 3 * 1000 * 1000 + 7;
  auto mem = d.allocate(0, n);
  ASSERT_TRUE(mem.ok());
  std::vector<uint8_t> src(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  long before = dbl.copies();
  ASSERT_EQ(transport::copyIn(&d, *mem, src.data(), n, ucx::MemoryType::kCuda), Status::kOk);
  EXPECT_EQ(dbl.copies() - before, 1);
  EXPECT_EQ(std::memcmp(*mem, src.data(), n), 0);

  // Read out through a 1 MiB staging buffer: 3 driver copies, the bytes in order.
  std::vector<uint8_t> staging(1 << 20), seen;
  before = dbl.copies();
  ASSERT_EQ(transport::readStaged(&d, *mem, n, ucx::MemoryType::kCuda, staging,
                                  [&](const uint8_t* p, size_t k) { seen.insert(seen.end(), p, p + k); }),
            Status::kOk);
  EXPECT_EQ(dbl.copies() - before, 3);
  EXPECT_EQ(seen, src);
  // Host memory goes straight to the sink; GPU memory without a driver is refused.
  seen.clear();
  ASSERT_EQ(transport::readStaged(nullptr, src.data(), 10, ucx::MemoryType::kHost, {},
                                  [&](const uint8_t* p, size_t k) { seen.insert(seen.end(), p, p + k); }),
            Status::kOk);
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(transport::copyIn(nullptr, *mem, src.data(), 1, ucx::MemoryType::kCuda), Status::kUnsupported);
  EXPECT_EQ(d.release(*mem), Status::kOk);
}

}  // namespace
}  // namespace pact
