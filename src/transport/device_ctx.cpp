#include "transport/device_ctx.h"

#include "transport/memory.h"

#include "common/clock.h"
#include "common/log.h"

#include <cstring>

namespace pact::transport {

Result<std::shared_ptr<DeviceCtx>> DeviceCtx::open(const ucx::DeviceInfo& info, const Params& params,
                                                   const ucx::Context::Settings& settings,
                                                   uint64_t features, std::string serviceKey) {
  std::shared_ptr<DeviceCtx> d(new DeviceCtx(info, params));
  d->serviceKey_ = std::move(serviceKey);
  const std::vector<std::string> ports = info.members.empty() ? std::vector<std::string>{info.name}
                                                              : info.members;
  for (const auto& port : ports) {
    auto rail = std::make_unique<Rail>();
    auto ctx = ucx::Context::create(port, "pact-" + (port.empty() ? std::string("any") : port),
                                    settings, features);
    if (!ctx.ok()) return ctx.error();
    rail->context = std::move(ctx.value());
    auto worker = ucx::Worker::create(rail->context);
    if (!worker.ok()) return worker.error();
    rail->worker = std::move(worker.value());
    rail->cache = std::make_unique<ucx::RegCache>(rail->context, d->driver_);
    PACT_INFO("device %s rail %s opened: ucx worker address %zu bytes", info.name.c_str(),
              port.c_str(), rail->worker.address().size());
    d->rails_.push_back(std::move(rail));
  }
  return d;
}

Result<std::vector<std::shared_ptr<ucx::Region>>> DeviceCtx::registerOnRails(const ucx::RegRequest& req,
                                                                             int dmabufFd,
                                                                             uint64_t dmabufOffset,
                                                                             bool* hit) {
  if (dmabufFd >= 0) {
    std::string why;
    if (Status s = checkDmabuf(dmabufFd, dmabufOffset, req.length, &why); s != Status::kOk)
      return Error{s, why};
  }
  std::vector<std::shared_ptr<ucx::Region>> regions;
  for (auto& rail : rails_) {
    auto region = rail->cache->acquire(req, regions.empty() ? hit : nullptr);
    if (!region.ok()) return region.error();
    regions.push_back(std::move(region.value()));
  }
  return regions;
}

namespace {
// How long a background endpoint close may run before it is given up.
constexpr auto kCloseBound = std::chrono::seconds(2);

void onSharedEndpointError(void* arg, ucp_ep_h, ucs_status_t st) {
  auto* e = static_cast<SharedEndpoint*>(arg);
  if (e->error == UCS_OK) e->error = st;
}
}  // namespace

Result<std::shared_ptr<SharedEndpoint>> DeviceCtx::endpoint(size_t rail, size_t lane,
                                                            const std::vector<uint8_t>& remote) {
  std::string key(sizeof rail + sizeof lane, '\0');
  std::memcpy(key.data(), &rail, sizeof rail);
  std::memcpy(key.data() + sizeof rail, &lane, sizeof lane);
  key.append(remote.begin(), remote.end());
  auto& slot = endpoints_[key];
  if (auto live = slot.lock(); live && !live->failed()) return live;
  auto owned = std::make_unique<SharedEndpoint>();
  auto& r = this->rail(rail);
  auto ep = ucx::Endpoint::create(r.worker.get(), remote, onSharedEndpointError, owned.get(),
                                  &r.peerFailureSupported);
  if (!ep.ok()) {
    if (slot.expired()) endpoints_.erase(key);
    return ep.error();
  }
  owned->ep = std::move(ep.value());
  // Its wire-up flush, from the start: a comm that waits for it (Lanes::awaitWireUp) on an
  // endpoint made long before finds it ended, even when the peer progresses nothing now.
  owned->wiring = owned->ep.flushLater();
  counters_.add(telemetry::kLiveEndpoints);
  std::shared_ptr<SharedEndpoint> shared(owned.release(),
                                         [this, key](SharedEndpoint* e) { retire(e, key); });
  slot = shared;
  return shared;
}

Result<std::shared_ptr<SharedEndpoint>> DeviceCtx::ownEndpoint(size_t rail, const std::vector<uint8_t>& remote,
                                                               ucx::Endpoint::ErrorHandler onError, void* arg) {
  auto& r = this->rail(rail);
  auto ep = ucx::Endpoint::create(r.worker.get(), remote, onError, arg, &r.peerFailureSupported);
  if (!ep.ok()) return ep.error();
  return SharedEndpoint::own(std::move(ep.value()));
}

void DeviceCtx::retire(SharedEndpoint* ep, const std::string& key) {
  counters_.sub(telemetry::kLiveEndpoints);
  if (auto it = endpoints_.find(key); it != endpoints_.end() && it->second.expired())
    endpoints_.erase(it);
  // Its wire-up flush no longer matters: freed now, while the worker lives (UCX releases it when
  // it ends; an endpoint whose close is given up outlives the workers).
  ep->wiring = ucx::Pending();
  counters_.add(telemetry::kClosingEndpoints);
  closing_.push_back(Closing{std::unique_ptr<SharedEndpoint>(ep), {}, {}, false});
  if (!inProgress_) reapClosing();  // outside UCX's progress: the close starts now
}

void DeviceCtx::reapClosing() {
  const auto t = now();
  std::erase_if(closing_, [&](Closing& c) {
    if (!c.started) {
      c.close = c.ep->ep.closeLater(c.ep->failed() || c.ep->forceClose);
      c.deadline = t + kCloseBound;
      c.started = true;
    }
    const bool finished = c.close.done();
    if (!finished && t < c.deadline) return false;
    if (!finished) {
      counters_.add(telemetry::kClosesAbandoned);
      PACT_INFO("device %s: an endpoint close did not finish within %lld ms; left to UCX",
                info_.name.c_str(), static_cast<long long>(std::chrono::milliseconds(kCloseBound).count()));
      abandoned_.push_back(std::move(c.ep));  // UCX may still call its error callback
    }
    counters_.sub(telemetry::kClosingEndpoints);
    return true;
  });
}

DeviceCtx::~DeviceCtx() {
  // Give UCX a moment to finish what closed comms left behind.
  const auto deadline = now() + std::chrono::milliseconds(500);
  auto waiting = [&] {
    size_t live = 0;
    for (auto& o : orphans_) live += o->stillHeld() - o->stranded();
    return live != 0 || !closing_.empty();
  };
  for (adoptOrphans(nullptr); waiting() && now() < deadline; adoptOrphans(nullptr)) progress();
  if (orphans_.empty()) return;
  PACT_WARN("device %s: UCX still holds operations of closed comms (a peer lost mid-transfer, or "
            "receives stranded on a rail that went out); its UCX workers are left allocated rather "
            "than destroyed under them",
            info_.name.c_str());
  for (auto& p : orphans_) (void)p.release();  // UCX may still call back into these slots
  for (auto& r : rails_) {
    r->worker.abandon();
    r->context.abandon();
  }
}

std::vector<std::vector<uint8_t>> DeviceCtx::addresses() const {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& r : rails_) out.push_back(r->worker.address());
  return out;
}

void DeviceCtx::adoptOrphans(std::unique_ptr<Orphan> orphan) {
  std::erase_if(orphans_, [](const std::unique_ptr<Orphan>& o) { return o->stillHeld() == 0; });
  if (orphan) orphans_.push_back(std::move(orphan));
}

size_t DeviceCtx::orphanedRequests() {
  adoptOrphans(nullptr);  // frees the orphans whose operations all ended
  size_t n = 0;
  for (auto& o : orphans_) n += o->stillHeld();
  return n;
}


}  // namespace pact::transport
