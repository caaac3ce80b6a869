#include "transport/device_ctx.h"

#include "common/clock.h"
#include "common/log.h"

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
    rail->cache = std::make_unique<ucx::RegCache>(rail->context.get());
    PACT_INFO("device %s rail %s opened: ucx worker address %zu bytes", info.name.c_str(),
              port.c_str(), rail->worker.address().size());
    d->rails_.push_back(std::move(rail));
  }
  return d;
}

DeviceCtx::~DeviceCtx() {
  // Give UCX a moment to finish what closed comms left behind.
  const auto deadline = now() + std::chrono::milliseconds(500);
  for (adoptOrphans(nullptr); !orphans_.empty() && now() < deadline; adoptOrphans(nullptr))
    for (auto& r : rails_) r->worker.progress();
  if (orphans_.empty()) return;
  PACT_WARN("device %s: UCX still holds operations of closed comms (a peer lost mid-transfer); "
            "its UCX workers are left allocated rather than destroyed under them",
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
