// DeviceCtx: the UCX state of one network device and the mutex that serializes every use of it,
// by every comm on the device and every thread. A device has one rail per port: a physical port
// one, a virtual device (makeVDevice) one per member, each a UCP context pinned to that port with
// its own worker and registration cache, so a comm's lanes can be pinned to rails.
// Shared (shared_ptr) by the Net that opened it and by each comm and memory handle on it, so it
// lives until the last of them is gone.
#pragma once

#include <atomic>
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "transport/endpoint.h"

#include "transport/params.h"
#include "ucx/devices.h"
#include "ucx/reg_cache.h"
#include "telemetry/counters.h"
#include "ucx/worker.h"

namespace pact::transport {

// Work that must advance whenever the device progresses, whichever comm is being tested (the
// injected lane delay releases pieces this way). Device mutex held when tick() runs.
class Ticker {
 public:
  virtual void tick() = 0;

 protected:
  ~Ticker() = default;
};

// What UCX may still call back into after its owner closed (a closed comm's request slots): kept
// alive by the device until nothing is held, so a late callback never touches freed memory.
class Orphan {
 public:
  virtual ~Orphan() = default;
  virtual size_t stillHeld() = 0;  // operations UCX still holds
  // Of those, the ones that will never end (receives stranded on a rail that went out: UCX 1.22
  // never ends them). Nothing waits for them; their memory is never freed.
  virtual size_t stranded() { return 0; }
};

class DeviceCtx {
 public:
  // settings: the UCX settings of the traffic-class service this context serves (service.h);
  // features: UCP_FEATURE_* of its contexts; serviceKey: what tells it apart (ServiceConfig::key).
  static Result<std::shared_ptr<DeviceCtx>> open(const ucx::DeviceInfo& info, const Params& params,
                                                 const ucx::Context::Settings& settings,
                                                 uint64_t features, std::string serviceKey);
  ~DeviceCtx();
  DeviceCtx(const DeviceCtx&) = delete;
  DeviceCtx& operator=(const DeviceCtx&) = delete;

  const ucx::DeviceInfo& info() const { return info_; }
  const std::string& serviceKey() const { return serviceKey_; }
  const Params& params() const { return params_; }
  std::mutex& mutex() { return mu_; }

  struct Rail {
    // Destroyed in reverse order: cache (regions) before the worker before the context.
    ucx::Context context;
    ucx::Worker worker;
    std::unique_ptr<ucx::RegCache> cache;
    bool peerFailureSupported = true;  // cleared once UCX says the transports lack it
  };
  size_t rails() const { return rails_.size(); }
  // The port rail r runs on ("pa0"; the device's own name when it is one port).
  const std::string& railName(size_t r) const { return r < info_.members.size() ? info_.members[r] : info_.name; }
  std::vector<std::string> railNames() const {
    std::vector<std::string> out;
    for (size_t r = 0; r < rails(); ++r) out.push_back(railName(r));
    return out;
  }
  const cuda::Driver& driver() const { return driver_; }
  // Registers req on every rail (one region each, in rail order), for both faces. A dmabuf fd
  // (>= 0) is checked first (transport::checkDmabuf) and never kept. hit (may be null): whether
  // the first rail's cache served it from a region already mapped. Thread-safe (the caches are).
  Result<std::vector<std::shared_ptr<ucx::Region>>> registerOnRails(const ucx::RegRequest& req,
                                                                    int dmabufFd = -1,
                                                                    uint64_t dmabufOffset = 0,
                                                                    bool* hit = nullptr);
  Rail& rail(size_t i) { return *rails_[i]; }
  ucx::Worker& worker(size_t railIndex = 0) { return rails_[railIndex]->worker; }
  // The request memory UCX needs per operation on any rail (ucx::Context::requestSize).
  size_t ucxRequestSize() const {
    size_t n = 0;
    for (const auto& r : rails_) n = std::max(n, r->context.requestSize());
    return n;
  }
  // Progresses every rail's worker once and runs the tickers; returns the number of events.
  // Inline: test() calls it on every spin.
  unsigned progress() {
    unsigned n = 0;
    inProgress_ = true;
    for (auto& r : rails_) n += r->worker.progress();
    inProgress_ = false;
    for (Ticker* t : tickers_) t->tick();
    if (!closing_.empty()) reapClosing();
    return n;
  }
  void addTicker(Ticker* t) { tickers_.push_back(t); }
  void removeTicker(Ticker* t) { std::erase(tickers_, t); }
  // Every rail's worker address, in rail order (what the peer needs to reach each rail).
  std::vector<std::vector<uint8_t>> addresses() const;

  // The endpoint from `rail` of this context to the peer worker at `remote`, for lane `lane`:
  // shared by every caller asking for the same three while one holds it (a failed one is
  // replaced by a new one). Releasing the last reference starts a background close (a flush, or
  // forced when the endpoint failed) at once, or in the next progress() when the release comes
  // inside UCX's progress (a send's completion letting go): UCX, failing that endpoint, still uses
  // it after a close started there freed it (UCX 1.22: SIGSEGV in ucp_stream_ep_cleanup), while
  // deferring every close makes UCX 1.13 abort a later one ("got REP message": abi
  // CloseSendWithPendingSends). Closes still running after the bound are given up (counted,
  // logged). Device mutex must be held, also for the release.
  Result<std::shared_ptr<SharedEndpoint>> endpoint(size_t rail, size_t lane,
                                                   const std::vector<uint8_t>& remote);
  // An endpoint from `rail` to the peer worker at `remote` with one owner (the engine's lanes to a
  // peer), onError(arg) its UCX error callback: not shared, closed forced and bounded when its
  // last reference goes. Peer-failure handling as the rail's transports allow (Rail).
  Result<std::shared_ptr<SharedEndpoint>> ownEndpoint(size_t rail, const std::vector<uint8_t>& remote,
                                                      ucx::Endpoint::ErrorHandler onError, void* arg);
  // Endpoint closes still under way. Device mutex must be held.
  size_t closing() const { return closing_.size(); }

  // Keeps what a closed owner left with UCX alive while UCX still holds operations on it; orphans
  // with nothing held are freed here. Device mutex must be held.
  void adoptOrphans(std::unique_ptr<Orphan> orphan);
  // Operations of closed owners that UCX still holds. Device mutex must be held.
  size_t orphanedRequests();

  // Open comms and registrations on this context (telemetry::kDeviceCatalog).
  telemetry::CounterSet& counters() { return counters_; }

 private:
  DeviceCtx(ucx::DeviceInfo info, const Params& params)
      : info_(std::move(info)), params_(params), driver_(cuda::Driver::instance(params_.cuda_driver)),
        counters_(telemetry::kDeviceCatalog, "device " + info_.name, {{"device", info_.name}}) {}

  ucx::DeviceInfo info_;
  Params params_;
  const cuda::Driver& driver_;  // PACT_CUDA_DRIVER's
  std::string serviceKey_;
  telemetry::CounterSet counters_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Orphan>> orphans_;  // outlives the workers (declared first)
  // Endpoints whose close was given up: UCX may still call their error callback, so they live
  // until the workers are gone (declared before the rails).
  std::vector<std::unique_ptr<SharedEndpoint>> abandoned_;
  struct Closing {
    std::unique_ptr<SharedEndpoint> ep;  // UCX's error callback may still name it
    ucx::Pending close;
    TimePoint deadline{};  // the close's bound, from its start
    bool started = false;  // the close starts in progress(), after the workers' progress returned
  };
  void retire(SharedEndpoint* ep, const std::string& key);
  void reapClosing();

  std::vector<std::unique_ptr<Rail>> rails_;
  std::vector<Ticker*> tickers_;
  bool inProgress_ = false;  // inside the workers' progress: a released endpoint's close waits
  // Declared after the rails: destroyed first, while the workers still exist.
  std::unordered_map<std::string, std::weak_ptr<SharedEndpoint>> endpoints_;
  std::vector<Closing> closing_;
};

}  // namespace pact::transport
