#include "net/net.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include "common/log.h"

namespace pact::net {

namespace {

template <typename T>
bool valid(const T* p) {
  return p != nullptr && p->magic == T::kMagic;
}

}  // namespace

Result<std::shared_ptr<Net>> Net::create(const Params& params) {
  // No silent keys: PACT_TC_DEFAULT is every NCCL class's base, so a key NCCL comms cannot honour
  // there fails init (PACT_TC_<n> were checked when they were parsed).
  if (Error why; params.classes.checkDefaultFor(Face::kNccl, &why) != Status::kOk) return why;
  std::shared_ptr<Net> net(new Net(params));
  // PACT_FAULT for the plugin: a process on a skewed epoch (its peers refuse it) and one that
  // dies by SIGKILL after kill_after; the data-path faults go to each comm (channelFor).
  if (params.fault.active()) {
    PACT_WARN("fault injection active: %s", params.fault.describe().c_str());
    net->params_.epoch += params.fault.epochSkew;
    armKillAfter(params.fault);
  }
  // RMA only where CUDA memory may be flushed by a loopback read (iflush); host-only processes
  // keep the tag-only endpoints they always had.
  const bool gpu = cuda::Driver::instance(net->params_.cuda_driver).available();
  auto fabric = transport::Fabric::create(net->params_, UCP_FEATURE_TAG | (gpu ? UCP_FEATURE_RMA : 0),
                                          "plugin");
  if (!fabric.ok()) return fabric.error();
  net->fabric_ = std::move(fabric.value());
  net->sessions_ = std::make_shared<Sessions>(
      Sessions::Config{net->params_.epoch, net->params_.auth_key, net->params_.peer_timeout, "plugin"});
  diag::enable(params.diag == 1);
  net->reaper_ = std::make_shared<Reaper>(net->sessions_);
  if (net->fabric_->deviceCount() == 0)
    PACT_WARN("no usable network device (PACT_NET_DEVICES=%s); name lo to use loopback",
              params.net_devices.empty() ? "" : params.net_devices.front().c_str());
  return net;
}

Net::~Net() {
  // A receiver that leaves keeps its workers going until its senders have said goodbye (or the
  // bound passes): UCX 1.13 loses a sender's rendezvous completions (sm/cma) when the receiving
  // worker is destroyed right after the bytes landed, so the sender's send would never finish.
  settle(std::chrono::milliseconds(500), true);
  reaper_.reset();  // stops its thread before the hubs go
}

void Net::settle(std::chrono::milliseconds limit, bool awaitPeers) {
  if (!reaper_) return;  // create() failed before it existed
  std::vector<std::shared_ptr<Hub>> hubs;
  {
    std::lock_guard lock(hubsMu_);
    for (auto& [d, h] : hubs_) hubs.push_back(h);
  }
  reaper_->settle(hubs, limit, awaitPeers);
}

int Net::deviceCount() const { return fabric_->deviceCount(); }

Status Net::makeVDevice(const std::vector<int>& members, int* dev) {
  return fabric_->makeVDevice(members, dev);
}

Result<std::shared_ptr<Hub>> Net::hub(int dev, int trafficClass) {
  auto d = fabric_->open(dev, params_.classes.forNccl(trafficClass), className(trafficClass));
  if (!d.ok()) return d.error();
  std::lock_guard lock(hubsMu_);
  auto& h = hubs_[d->get()];
  if (!h) {
    h = std::make_shared<Hub>(*d, static_cast<uint32_t>(params_.tag_spaces));
    h->setReaper(reaper_);
  }
  return h;
}

Net::Resources Net::resources() const {
  Resources r;
  std::lock_guard lock(hubsMu_);
  for (const auto& [dev, h] : hubs_) {
    DeviceCtx& d = h->dev();
    r.comms += static_cast<int64_t>(d.counters().get(telemetry::kLiveComms));
    r.registrations += static_cast<int64_t>(d.counters().get(telemetry::kLiveMemHandles));
    std::lock_guard devLock(d.mutex());
    r.orphanedRequests += static_cast<int64_t>(d.orphanedRequests() + h->requests().orphaned());
  }
  return r;
}

CommLimits Net::limits() const {
  // Comms hold no descriptor of their own (a session and the shared endpoints are per peer
  // process), so the fd limit bounds peers, not comms. What bounds comms: receive tag spaces per
  // device context, and memory at about kCommBytes per idle comm.
  constexpr int64_t kCommBytes = 8 << 10;
  const int64_t tagBound = params_.tag_spaces;
  const long pages = sysconf(_SC_AVPHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  const int64_t memBound = pages > 0 && pageSize > 0 ? static_cast<int64_t>(pages) * pageSize / kCommBytes : tagBound;
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  CommLimits l;
  l.maxComms = static_cast<int>(std::min(tagBound, memBound));
  l.reason = (tagBound <= memBound ? "receive tag spaces per device context (" + std::to_string(tagBound) + ")"
                                   : "available memory at 8 KiB per comm (" + std::to_string(memBound) + ")") +
             "; descriptors bound peer processes, not comms (RLIMIT_NOFILE " +
             std::to_string(static_cast<unsigned long long>(nofile.rlim_cur)) +
             ": one session per peer plus UCX's connections per shared endpoint)";
  return l;
}

ChannelConfig Net::channelFor(int trafficClass) const {
  const Profile& p = params_.classes.forNccl(trafficClass);
  ChannelConfig c;
  c.className = className(trafficClass);
  c.ordered = p.order == Order::kOrdered;
  c.lanes = p.lanes;
  c.chunk = p.chunk;
  c.steering = p.steer == Steer::kAdaptive ? Steering::kAdaptive : Steering::kRoundRobin;
  c.retries = p.retries;
  c.verify = p.verify;
  c.timeout = p.timeout;
  c.credits = p.credits;
  c.priority = p.priority;
  c.fault = params_.fault;
  return c;
}

Status Net::properties(int dev, Properties* out) const {
  if (dev < 0 || dev >= fabric_->deviceCount()) return Status::kInvalidArgument;
  const ucx::DeviceInfo d = fabric_->deviceInfo(dev);
  Properties p;
  p.name = d.name;
  p.pciPath = d.pciPath;
  p.guid = d.guid;
  p.memory = transport::decideMemory(
      transport::gatherMemoryFacts(d, cuda::Driver::instance(params_.cuda_driver)));
  p.ptrSupport = p.memory.ptrSupport;
  p.regIsGlobal = 1;  // the registration cache serves any comm on the device
  // NCCL calls iflush for every GPUDirect receive already; pact needs no flush beyond those.
  p.forceFlush = 0;
  p.speedMbps = d.speedMbps;
  p.port = d.port;
  p.latencyUs = d.latencyUs;
  p.maxComms = limits().maxComms;
  p.maxRecvs = params_.max_recvs;
  p.vDevs = d.memberIndices.empty() ? std::vector<int>{dev} : d.memberIndices;
  p.maxP2pBytes = size_t{1} << 40;  // NCCL's ceiling; UCX messages are 64-bit sized
  p.maxCollBytes = size_t{1} << 40;
  *out = std::move(p);
  return Status::kOk;
}

Status Net::regMr(Comm* comm, void* data, size_t size, ucx::MemoryType type, int dmabufFd,
                  uint64_t dmabufOffset, MemHandle** out) {
  *out = nullptr;
  if (!valid(comm)) return Status::kInvalidArgument;
  // The fd is checked and not kept (NCCL closes it when this returns); UCP registers the range by
  // address with its memory type (docs/gpu.md: what UCX does with dmabuf).
  const TimePoint entered = now();
  bool hit = false;
  auto regions = comm->dev().registerOnRails({data, size, type}, dmabufFd, dmabufOffset, &hit);
  if (!regions.ok()) {
    PACT_WARN("%s %p+%zu on %s: %s", dmabufFd >= 0 ? "regMrDmaBuf" : "regMr", data, size,
              comm->dev().info().name.c_str(), regions.error().message.c_str());
    return regions.status();
  }
  auto* mh = new MemHandle{MemHandle::kMagic, comm->hub(), std::move(regions.value()),
                          reinterpret_cast<uintptr_t>(data), size};
  comm->dev().counters().addShared(telemetry::kLiveMemHandles);
  if (diag::enabled()) {
    CommDiag& d = comm->diag();
    ++d.registrations;
    d.regBytes += size;
    d.regTime += now() - entered;
    d.regCacheHits += hit ? 1 : 0;
  }
  *out = mh;
  return Status::kOk;
}

Status Net::deregMr(Comm* comm, MemHandle* mh) {
  if (mh == nullptr) return Status::kOk;
  if (!valid(mh)) return Status::kInvalidArgument;
  // After deregMr NCCL may free the buffer: a receive that UCX still holds (one a failed comm
  // cancelled while its rendezvous was under way) must not write into it afterwards.
  {
    std::lock_guard lock(mh->hub->dev().mutex());
    // A failed comm whose error came from isend/irecv still has receives posted: withdraw them
    // first, or a late message of a dead peer could match one while this drains.
    const bool live = valid(comm);
    if (live) (void)comm->failure();
    mh->hub->drainRange(live ? comm : nullptr, mh->base, mh->size);
  }
  mh->hub->dev().counters().subShared(telemetry::kLiveMemHandles);
  delete mh;  // the region unmaps when its last handle is gone
  return Status::kOk;
}

Status Net::isend(SendComm* comm, void* data, size_t size, int tag, MemHandle* mh, Request** out) {
  if (!valid(comm)) return Status::kInvalidArgument;
  std::lock_guard lock(comm->dev().mutex());
  return comm->isend(data, size, tag, mh, out);
}

Status Net::irecv(RecvComm* comm, int n, void** data, const size_t* sizes, const int* tags,
                  MemHandle** mhs, Request** out) {
  if (!valid(comm)) return Status::kInvalidArgument;
  std::lock_guard lock(comm->dev().mutex());
  return comm->irecv(n, data, sizes, tags, mhs, out);
}

Status Net::iflush(RecvComm* comm, int n, void** data, const int* sizes, MemHandle** mhs,
                   Request** out) {
  *out = nullptr;
  if (!valid(comm) || n < 0 || n > kMaxBuffers) return Status::kInvalidArgument;
  for (int i = 0; mhs != nullptr && i < n; ++i)
    if (mhs[i] != nullptr && !valid(mhs[i])) return Status::kInvalidArgument;
  std::lock_guard lock(comm->dev().mutex());
  return comm->iflush(n, data, sizes, mhs, comm->dev().params().gpu_flush, out);
}

Status Net::test(Request* r, bool* done, int* sizes, Ending* ending) {
  *done = false;
  if (!valid(r) || !r->inUse || !valid(r->comm)) return Status::kInvalidArgument;
  Comm* comm = r->comm;
  std::lock_guard lock(comm->dev().mutex());
  return comm->test(r, done, sizes, ending);
}

namespace {
// Shuts a comm down and frees it, under its device's mutex (kept alive past the delete).
template <typename C>
Status closeComm(C* comm) {
  if (comm == nullptr) return Status::kOk;
  if (!valid(comm)) return Status::kInvalidArgument;
  std::shared_ptr<Hub> hub = comm->hub();
  {
    std::lock_guard lock(hub->dev().mutex());
    comm->shutdown();
    delete comm;
  }
  if (auto reaper = hub->reaper()) reaper->add(hub);
  return Status::kOk;
}
}  // namespace

Status Net::closeSend(SendComm* comm) { return closeComm(comm); }
Status Net::closeRecv(RecvComm* comm) { return closeComm(comm); }

}  // namespace pact::net
