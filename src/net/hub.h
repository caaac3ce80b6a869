// Hub: what the net core keeps per device context, shared by the Net, every comm and memory
// handle on the context: the request slab they draw from and the context's receive tag spaces.
// The Net holds each hub for its whole life, so tag-space generations are never forgotten while
// the context's workers live.
#pragma once

#include <memory>

#include "net/request.h"
#include "net/tags.h"
#include "transport/device_ctx.h"

namespace pact::net {

using transport::DeviceCtx;

class Reaper;

class Hub {
 public:
  // tagSpaces: the receive tag-space indices of the context (PACT_TAG_SPACES).
  Hub(std::shared_ptr<DeviceCtx> dev, uint32_t tagSpaces)
      : dev_(std::move(dev)),
        requests_(std::make_unique<RequestSlab>(dev_->ucxRequestSize(), &dev_->counters())),
        tags_(std::make_shared<TagSpaces>(tagSpaces)) {}
  // Requests UCX still holds go to the device context, which keeps them until UCX lets go, and so
  // do the loose operations (late sends, drained copies): UCX aborts if a worker is destroyed
  // under an operation still on one of its endpoints.
  ~Hub() {
    std::lock_guard lock(dev_->mutex());
    if (requests_->stillHeld() > 0) dev_->adoptOrphans(std::move(requests_));
    if (*loose_ > 0) dev_->adoptOrphans(std::make_unique<LooseOps>(loose_));
  }
  Hub(const Hub&) = delete;
  Hub& operator=(const Hub&) = delete;

  DeviceCtx& dev() { return *dev_; }
  RequestSlab& requests() { return *requests_; }  // device mutex
  // Shared: a closed receive comm's session callback gives its space back, maybe after the hub.
  const std::shared_ptr<TagSpaces>& tags() const { return tags_; }
  // Progresses (bounded) while UCX still holds an operation on [base, base + size) of comm (null:
  // none) or of a closed comm: deregMr calls it, so a cancelled receive never writes into a
  // buffer the caller frees. Operations whose peer died are waited for only until 200 ms after
  // the death was noticed: nothing lands later (UCX 1.13's shared memory never ends them).
  // Device mutex must be held.
  void drainRange(const Comm* comm, uintptr_t base, size_t size);
  // Work left for the background: endpoint closes, requests of closed comms, late sends.
  // Device mutex.
  size_t backgroundWork() { return dev_->closing() + requests_->orphaned() + late_.size() + *loose_; }
  // One step of the background work (device mutex): late sends due, progress; what is left.
  size_t stepBackground() {
    postLate();
    dev_->progress();
    return backgroundWork();
  }
  // With no comm left on the device, the request slab's memory goes back; whether it did.
  bool trimIfIdle() {
    if (dev_->counters().get(telemetry::kLiveComms) != 0) return false;
    requests_->trim();
    return true;
  }
  // PACT_FAULT delay: a piece a closed comm's delayed lane still held goes out when its delay
  // ends, as a packet already on the wire would (a copy of its bytes: the caller may free the
  // buffer once the comm is closed). postLate() posts the due ones. Device mutex.
  void sendLate(TimePoint due, std::shared_ptr<transport::SharedEndpoint> ep, uint64_t tag,
                const void* data, size_t size);
  void postLate();
  // Host memory for the checks of GPU pieces (net/contract.h), sized by its first user. Device
  // mutex.
  std::vector<uint8_t>& staging() { return staging_; }
  // UCX operations of the context that no request slot owns (late sends, drained stale copies):
  // their owners count them here, +1 when posted and -1 in their callback. Device mutex.
  const std::shared_ptr<size_t>& looseOps() const { return loose_; }
  // Where a close hands its background work (the Net's; gone with the Net).
  void setReaper(std::weak_ptr<Reaper> r) { reaper_ = std::move(r); }
  std::shared_ptr<Reaper> reaper() const { return reaper_.lock(); }

 private:
  std::weak_ptr<Reaper> reaper_;
  struct LateSend {
    TimePoint due;
    std::shared_ptr<transport::SharedEndpoint> ep;  // kept open until the send completes
    uint64_t tag = 0;
    std::vector<uint8_t> data;
    std::shared_ptr<size_t> inFlight;  // the hub's count, which may be gone by completion
  };
  struct LooseOps final : transport::Orphan {
    explicit LooseOps(std::shared_ptr<size_t> n) : n_(std::move(n)) {}
    size_t stillHeld() override { return *n_; }
    std::shared_ptr<size_t> n_;
  };
  static void onLateSent(void* request, ucs_status_t st, void* user);
  std::vector<std::unique_ptr<LateSend>> late_;
  std::shared_ptr<size_t> loose_ = std::make_shared<size_t>(0);
  std::shared_ptr<DeviceCtx> dev_;
  std::unique_ptr<RequestSlab> requests_;
  std::shared_ptr<TagSpaces> tags_;
  std::vector<uint8_t> staging_;
};

}  // namespace pact::net
