// Comms of the NCCL-style data path: SendComm and RecvComm over one UCX worker per device and
// traffic-class service. See channel.h for ordered vs unordered channels and the tag layout:
// both sides count messages per NCCL tag, so the j-th send with tag t lands in the j-th receive
// buffer posted with tag t, whatever order the bytes arrive in.
//
// Failure: errors are sticky per comm. A peer that dies is seen through the UCX endpoint error
// handler or through the control socket (EOF without BYE); every request of the comm then
// completes with kRemoteError. All state is guarded by the device mutex.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/fault.h"
#include "transport/channel.h"
#include "transport/control_socket.h"
#include "transport/device_ctx.h"
#include "transport/lanes.h"
#include "net/tags.h"
#include "telemetry/counters.h"
#include "net/request.h"

namespace pact::net {

// The transport core's names the net core uses.
using transport::ChannelConfig;
using transport::ControlSocket;
using transport::DeviceCtx;
using transport::Frame;
using transport::Lanes;
using transport::LaneStats;
using transport::Listener;
using transport::Steering;
using transport::Ticker;
using transport::kRetransmitBackoff;
using transport::acceptOne;
using transport::enableKeepalive;
using transport::listenOn;
using transport::piecesFor;

// What regMr hands out: a cache region pinned by this handle, tied to one comm's device.
struct MemHandle {
  static constexpr uint32_t kMagic = 0x524d4350;  // "PCMR"
  uint32_t magic = kMagic;
  std::shared_ptr<DeviceCtx> dev;
  std::vector<std::shared_ptr<ucx::Region>> regions;  // one per rail of the device
  uintptr_t base = 0;  // what the caller registered
  size_t size = 0;
  ~MemHandle() { magic = 0; }
};



class Comm {
 public:
  static constexpr uint32_t kMagic = 0x4d4d4f43;  // "COMM"
  Comm(std::shared_ptr<DeviceCtx> dev, ControlSocket sock, size_t poolSize, bool isSend,
       std::string peer, const ChannelConfig& cfg);
  virtual ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  uint32_t magic = kMagic;
  DeviceCtx& dev() { return *dev_; }
  const std::shared_ptr<DeviceCtx>& devPtr() const { return dev_; }
  bool isSend() const { return isSend_; }
  Status error() const { return error_; }
  const ChannelConfig& channel() const { return cfg_; }
  // The comm's counters (telemetry::kCommCatalog), in the process registry while it lives.
  const telemetry::CounterSet& counters() const { return counters_; }
  // Records the first failure (sticky) and logs it once, naming the peer. Safe inside UCX callbacks.
  void fail(Status s, const std::string& why);
  // fail() for a reason the peer cannot see, and tells the peer (an abort frame), so that both
  // sides fail instead of one waiting for data that will never come.
  void abort(Status s, const std::string& why);
  // Test one request: progress, liveness, completion. Device mutex must be held.
  Status test(Request* r, bool* done, int* sizes);
  // Progresses (bounded, like close) while UCX still holds an operation on [base, base + size):
  // deregMr calls it, so a cancelled receive does not write into a buffer the caller frees.
  void drainRange(uintptr_t base, size_t size);
  // Cancels what is in flight and says goodbye. Device mutex must be held.
  virtual void shutdown() = 0;
  // A part finished (called from UCX callbacks and immediate completions).
  virtual void partDone(Part* p) = 0;

  // Per-NCCL-tag message counter. A comm sees a handful of tags (one per local rank sharing it),
  // so a flat list beats a hash map on the data path.
  uint32_t nextSeq(int tag) {
    for (auto& [t, n] : seq_)
      if (t == tag) return n++;
    seq_.emplace_back(tag, 1u);
    return 0;
  }
  const std::string& peer() const { return peer_; }

 protected:
  // Settles a request with more parts than buffers (Request::multiPart) on each test that finds
  // it unfinished: cancels receives that can no longer match.
  virtual void progressComm(Request* r) = 0;
  // Failure was recorded: cancel/abort what UCX still holds so every part completes.
  virtual void abortInFlight() = 0;
  // Final status and sizes of a finished request.
  virtual Status finish(Request* r, int* sizes) = 0;
  // Whether a request posted before r is still in flight. The list is in posting order and NCCL
  // tests in posting order, so r is almost always the oldest and this is one comparison.
  bool earlierInFlight(const Request* r) const {
    for (const Request* o = oldestPosted_; o != r; o = o->newerPosted)
      if (!o->done()) return true;
    return false;
  }
  // A pool slot, appended to the posting-order list; release() unlinks it and frees the slot.
  Request* acquire(bool isSend, int nbuffers, size_t nparts);
  void release(Request* r);
  // The test of a request that cannot be reported yet: liveness, failure handling.
  Status notReady();
  // Reads the control socket on every 32nd call (and then at most every liveness interval).
  void pollPeer();
  // The comm's error, if any. The first call that sees a failure withdraws what UCX still
  // holds for the comm (abortInFlight), so a dead peer's endpoints are closed before anything
  // progresses them again.
  Status failure();
  // Progresses the device while more() holds, at most as long as close may take; returns more().
  template <typename More>
  bool progressWhile(More&& more);
  void checkPeer();
  // Whether the peer has closed (BYE read now or before), died, or the comm failed.
  bool peerGone();
  // Reads what the control socket holds (noting a BYE); the reason when the connection is lost.
  std::optional<std::string> readControl();
  // Progresses until no part is owned by UCX (bounded); parts UCX still holds after that keep
  // their pool alive in the device's graveyard, so a late callback never touches freed memory.
  void drainParts();
  void sayBye();
  // One PACT_FAULT decision: true (and counted) with probability p. No dice: never.
  bool inject(double p) {
    if (!dice_ || !dice_->roll(p)) return false;
    counters_.add(telemetry::kCommFaultsInjected);
    // The process counts too: a lost goodbye happens at close, when the comm's own are gone.
    telemetry::processCounters().addShared(telemetry::kPluginFaultsInjected);
    return true;
  }

  std::shared_ptr<DeviceCtx> dev_;
  ControlSocket sock_;
  std::unique_ptr<RequestPool> pool_;
  bool isSend_;
  std::string peer_;
  ChannelConfig cfg_;
  telemetry::CounterSet counters_;
  Status error_ = Status::kOk;
  bool aborted_ = false;
  bool byeReceived_ = false;
  TimePoint byeAt_{};
  TimePoint nextLivenessCheck_{};
  uint32_t livenessCalls_ = 0;
  std::vector<std::pair<int, uint32_t>> seq_;
  Request* oldestPosted_ = nullptr;  // requests handed out and not yet reported done
  Request* newestPosted_ = nullptr;
  std::optional<FaultDice> dice_;  // only with PACT_FAULT data-path faults
};

class SendComm final : public Comm, private Ticker {
 public:
  SendComm(std::shared_ptr<DeviceCtx> dev, ControlSocket sock, uint32_t tagSpace, std::string peer,
           const ChannelConfig& cfg);
  ~SendComm() override;
  // Creates one UCX endpoint per lane to the receiver's worker (non-blocking; wire-up continues
  // in progress).
  Status connectLanes(const std::vector<std::vector<uint8_t>>& remoteRails);
  // Posts a send; *out = nullptr when the request pool is full (retry later).
  Status isend(const void* data, size_t size, int tag, MemHandle* mh, Request** out);
  void shutdown() override;
  void partDone(Part* p) override;
  const Lanes& lanes() const { return lanes_; }

 private:
  void progressComm(Request* r) override;
  void abortInFlight() override;
  Status finish(Request* r, int* sizes) override;
  void post(Part* p, ucx::Endpoint& ep);
  void tick() override;  // binds waiting pieces to lanes with room, releases held ones
  // PACT_FAULT: whether this attempt of p is lost (then it is sent again later, or the comm fails).
  bool lostAttempt(Part* p);
  // Completes every piece that is held back (lane queues, retransmissions) as cancelled.
  void dropHeld();
  bool ticking() const { return !cfg_.ordered || cfg_.fault.delayLane >= 0 || cfg_.fault.onPieces(); }

  Lanes lanes_;
  std::vector<std::pair<TimePoint, Part*>> retransmit_;  // lost attempts and when to resend
  uint32_t tagSpace_;
};

class RecvComm final : public Comm {
 public:
  RecvComm(std::shared_ptr<DeviceCtx> dev, ControlSocket sock, uint32_t tagSpace, std::string peer,
           const ChannelConfig& cfg);
  ~RecvComm() override;
  Status irecv(int n, void* const* data, const size_t* sizes, const int* tags,
               MemHandle* const* mhs, Request** out);
  void shutdown() override;
  void partDone(Part* p) override;

 private:
  void progressComm(Request* r) override;
  void abortInFlight() override;
  Status finish(Request* r, int* sizes) override;
  void cancel(Part& p);

  uint32_t tagSpace_;
};

}  // namespace pact::net
