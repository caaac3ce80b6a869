// Comms of the NCCL-style data path: SendComm and RecvComm over one UCX worker per device and
// traffic-class service. See channel.h for ordered vs unordered channels and tags.h for the tag
// layout: both sides count messages per NCCL tag, so the j-th send with tag t lands in the j-th
// receive buffer posted with tag t, whatever order the bytes arrive in.
//
// A comm is small: its connection state lives per peer process (a channel of the session to
// that process, transport/session.h; send comms share the device context's endpoints to the
// peer's workers) and it holds requests from its hub's slab only while they are in flight.
//
// Failure: errors are sticky per comm. A peer that dies is seen through the shared endpoints'
// error or through the session (lost without goodbye); every request of the comm then completes
// with kRemoteError. All state is guarded by the device mutex.
// Close never waits: what UCX still holds of the comm finishes in the background (Reaper).
//
// The class contract (docs/plugin.md): a comm whose contract asks for seals sends one after each
// message's pieces (transport/seal.h); the receiver reports a message done only once its seal is
// judged (epoch, checks, the commit hook), asks for pieces whose check failed again (a verdict on
// the session) and fails a message whose parts do not all land within the timeout; the sender
// reports a send of a verified comm done only at the receiver's verdict. Credits and priority
// act on the send side alone (net/credits.h, transport/priority.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/fault.h"
#include "transport/channel.h"
#include "transport/device_ctx.h"
#include "transport/lanes.h"
#include "net/tags.h"
#include "telemetry/counters.h"
#include "net/credits.h"
#include "net/diag.h"
#include "net/hub.h"
#include "net/kept.h"
#include "transport/rail_set.h"
#include "net/request.h"
#include "transport/session.h"

namespace pact::net {

// The transport core's names the net core uses.
using transport::ChannelConfig;
using transport::Lanes;
using transport::LaneStats;
using transport::Sessions;
using transport::Steering;
using transport::Ticker;
using transport::kRetransmitBackoff;
using transport::piecesFor;

// What regMr hands out: a cache region pinned by this handle, tied to one comm's device.
struct MemHandle {
  static constexpr uint32_t kMagic = 0x524d4350;  // "PCMR"
  uint32_t magic = kMagic;
  std::shared_ptr<Hub> hub;
  std::vector<std::shared_ptr<ucx::Region>> regions;  // one per rail of the device
  uintptr_t base = 0;  // what the caller registered
  size_t size = 0;
  ~MemHandle() { magic = 0; }
};

// The memory type of a registration's bytes on a rail (mh: a MemHandle, may be null: host).
inline ucx::MemoryType memoryTypeOf(const void* mh, size_t rail = 0) {
  const auto* m = static_cast<const MemHandle*>(mh);
  return m != nullptr && rail < m->regions.size() ? m->regions[rail]->type : ucx::MemoryType::kHost;
}



// What a comm with rail failover does with a part that failed (Comm::failover).
enum class Failover {
  kNo,        // a failure: the part completes with its error
  kResent,    // a send: the comm sends it again on a live rail (the part is not done)
  kCopyLost,  // a receive: one copy of a piece on a rail that is out; completes as cancelled
};

class Comm {
 public:
  static constexpr uint32_t kMagic = 0x4d4d4f43;  // "COMM"
  Comm(std::shared_ptr<Hub> hub, std::shared_ptr<Sessions> sessions, uint64_t channel,
       size_t maxInFlight, bool isSend, std::string peer, const ChannelConfig& cfg);
  virtual ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  uint32_t magic = kMagic;
  DeviceCtx& dev() { return hub_->dev(); }
  const std::shared_ptr<Hub>& hub() const { return hub_; }
  bool isSend() const { return isSend_; }
  Status error() const { return error_; }
  // Why the comm failed, as logged (empty while it has not), and of what kind.
  const std::string& failureReason() const { return why_; }
  telemetry::ErrorKind failureKind() const { return errorKind_; }
  const ChannelConfig& channel() const { return cfg_; }
  // The comm's counters (telemetry::kCommCatalog), in the process registry while it lives.
  const telemetry::CounterSet& counters() const { return counters_; }
  // Records the first failure (sticky) and its kind for the class's errors, and logs it once,
  // naming the peer. Safe inside UCX callbacks.
  void fail(Status s, telemetry::ErrorKind kind, const std::string& why);
  // fail() for a cause that is the peer's (its process or an endpoint to it), which every comm
  // to it shares: what UCX holds for the comm is ended with the endpoints.
  void failPeer(Status s, telemetry::ErrorKind kind, const std::string& why);
  // fail() for a reason the peer cannot see, and tells the peer (an abort frame), so that both
  // sides fail instead of one waiting for data that will never come.
  void abort(Status s, telemetry::ErrorKind kind, const std::string& why);
  // Test one request: progress, liveness, completion; ending: see Net::test. Device mutex must be
  // held.
  Status test(Request* r, bool* done, int* sizes, Ending* ending = nullptr);
  // The comm's error, if any. The first call that sees a failure withdraws what UCX still
  // holds for the comm (abortInFlight), so a dead peer's endpoints are closed before anything
  // progresses them again.
  Status failure();
  // Withdraws what is in flight, says goodbye and leaves what UCX still holds to the background;
  // never waits. Device mutex must be held.
  virtual void shutdown() = 0;
  // A part finished (called from UCX callbacks and immediate completions).
  virtual void partDone(Part* p) = 0;
  // A part failed (from UCX callbacks): whether rail failover takes it (transport/rail_set.h).
  virtual Failover failover(Part*) { return Failover::kNo; }

  // Per-NCCL-tag message counter. A comm sees a handful of tags (one per local rank sharing it),
  // so a flat list beats a hash map on the data path.
  uint32_t nextSeq(int tag) {
    for (auto& [t, n] : seq_)
      if (t == tag) return n++;
    seq_.emplace_back(tag, 1u);
    return 0;
  }
  const std::string& peer() const { return peer_; }
  std::string devName() const { return hub_->dev().info().name; }
  size_t maxInFlight() const { return maxInFlight_; }
  // PACT_DIAG's record of the comm (net/diag.h).
  CommDiag& diag() { return diag_; }
  const CommDiag& diag() const { return diag_; }

 protected:
  // Settles a request with more parts than buffers (Request::multiPart) on each test that finds
  // it unfinished: cancels receives that can no longer match.
  virtual void progressComm(Request* r) = 0;
  // The class contract's step for a request that is done with UCX but held (Request::held): the
  // sender takes its verdicts, the receiver judges its seals.
  virtual void settle(Request* r) = 0;
  // At the start of every test(): a receive comm's lazy acknowledgements leave (rail failover:
  // transport::kLazyAckMax), after the answer to the message they acknowledge, if any.
  virtual void beforeTest() {}
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
  // A request from the hub's slab, appended to the posting-order list (nullptr when the comm
  // already holds its most: back-pressure); release() unlinks it and gives it back.
  // beyondBound: taken even past the bound (an iflush's reads: NCCL tests the receive it flushes
  // first, so they stand in for it, and a NULL flush request would mean "nothing to wait for").
  Request* acquire(bool isSend, int nbuffers, size_t nparts, bool beyondBound = false);
  void release(Request* r);
  // The test of a request that cannot be reported yet: liveness, failure handling.
  Status notReady();
  // Looks at the session on every 32nd call (and then at most every liveness interval).
  void pollPeer();
  void checkPeer();
  // What the peer did, through the session: its goodbye, abort, or loss.
  void readPeer(const transport::ChannelView& v);
  // Whether the peer has closed (its goodbye), died, or the comm failed.
  bool peerGone();
  // The failure into the class's errors, once; askSession: refine a transport error by what the
  // session saw (outside UCX callbacks and closes).
  void countError(bool askSession);
  // Hands the comm's requests to the slab: done ones go back, ones UCX still holds stay there
  // without a comm (the Reaper progresses them), so a late callback never touches the comm.
  // Whether any stayed with UCX.
  bool leaveInFlight();
  // Whether the goodbye is lost once (PACT_FAULT lose_remote_done; the session delivers it late).
  bool byeLost();
  // Something of the comm's own failed (a lane's endpoint): the send side looks.
  virtual void checkLinks() {}
  // Rail failover: counts the rails that went out and came back (transport::RailSet::changes),
  // and holds the session's keepalive while rail 0, where the session's connection lives, is out.
  void railChanges(const transport::RailSet& rails, unsigned out, unsigned back) {
    counters_.add(telemetry::kRailFailovers, static_cast<uint64_t>(__builtin_popcount(out)));
    counters_.add(telemetry::kRailRecoveries, static_cast<uint64_t>(__builtin_popcount(back)));
    counters_.add(telemetry::kRailDownUs, rails.backOutageUs());
    if (((out | back) & 1u) != 0) sessions_->holdLiveness(channel_, !rails.usable(0));
  }
  void countResent(size_t bytes) {
    counters_.add(telemetry::kRailResentPieces);
    counters_.add(telemetry::kRailResentBytes, bytes);
  }
  // One PACT_FAULT decision: true (and counted) with probability p. No dice: never.
  bool inject(double p) {
    if (!dice_ || !dice_->roll(p)) return false;
    countFault();
    return true;
  }
  void countFault() {
    counters_.add(telemetry::kCommFaultsInjected);
    class_.addShared(telemetry::kClassFaultsInjected);
    // The process counts too: a lost goodbye happens at close, when the comm's own are gone.
    telemetry::processCounters().addShared(telemetry::kPluginFaultsInjected);
  }

  std::shared_ptr<Hub> hub_;
  std::shared_ptr<Sessions> sessions_;
  uint64_t channel_;
  size_t maxInFlight_;
  size_t inFlight_ = 0;
  bool isSend_;
  std::string peer_;
  ChannelConfig cfg_;
  telemetry::CounterSet counters_;
  telemetry::CounterSet& class_;  // the traffic class's, shared by its comms (telemetry::kClassCatalog)
  Status error_ = Status::kOk;
  std::string why_;
  telemetry::ErrorKind errorKind_ = telemetry::ErrorKind::kOther;
  bool errorCounted_ = false;
  bool aborted_ = false;
  bool peerLost_ = false;  // the failure is the peer's (its process, an endpoint): not this comm's
  bool byeReceived_ = false;
  TimePoint byeAt_{};
  TimePoint nextLivenessCheck_{};
  uint32_t livenessCalls_ = 0;
  std::vector<std::pair<int, uint32_t>> seq_;
  Request* oldestPosted_ = nullptr;  // requests handed out and not yet reported done
  Request* newestPosted_ = nullptr;
  std::optional<FaultDice> dice_;  // only with PACT_FAULT data-path faults
  CommDiag diag_;
};

class SendComm final : public Comm, private Ticker {
 public:
  SendComm(std::shared_ptr<Hub> hub, std::shared_ptr<Sessions> sessions, uint64_t channel,
           uint32_t tagSpace, std::string peer, const ChannelConfig& cfg);
  ~SendComm() override;
  // Takes the device context's endpoint per lane to the receiver's worker (shared with every
  // other comm to that worker; a new one wires up in progress).
  Status connectLanes(const std::vector<std::vector<uint8_t>>& remoteRails);
  // Posts a send; *out = nullptr when the comm has its most sends in flight or the class's
  // credits to the peer are spent (retry later).
  Status isend(const void* data, size_t size, int tag, MemHandle* mh, Request** out);
  void shutdown() override;
  void partDone(Part* p) override;
  const Lanes& lanes() const { return lanes_; }
  // The class's budget to the peer (credits) and its priority gate (priority); each may be null.
  void setCredits(std::shared_ptr<SendCredits> c) { credits_ = std::move(c); }
  const SendCredits* credits() const { return credits_.get(); }
  void setGate(std::shared_ptr<transport::PeerGate> gate);
  // Rail failover: the watched rails (before connectLanes); inactive ones change nothing.
  // acks (non-null when the receiver offered failover): the receiver acknowledges each message
  // there (transport::AckSink); a send completes only then, so what a rail that went out
  // swallowed after UCX took it is known and sent again.
  void setRails(transport::RailSet rails, std::shared_ptr<transport::AckSink> acks);
  const transport::RailSet& rails() const { return rails_; }
  // Bytes handed to UCX on rail r.
  uint64_t railBytes(size_t r) const { return r < railBytes_.size() ? railBytes_[r] : 0; }
  Failover failover(Part* p) override;

 private:
  void progressComm(Request* r) override;
  void settle(Request* r) override;
  // The seal goes once every data piece of the message was handed to UCX (or lost on the way).
  void postSeal(Request* r);
  void applyVerdict(const wire::Verdict& v);
  // How isend cuts a message of `bytes`: an ordered one whole, an unordered one in chunks; the
  // size of piece k of r's message (what a re-send sends again).
  size_t chunkFor(uint64_t bytes) const { return cfg_.ordered ? std::max<size_t>(bytes, 1) : cfg_.chunk; }
  size_t pieceSize(const Request& r, uint32_t k) const {
    const size_t c = chunkFor(r.msgBytes);
    return std::min<size_t>(c, r.msgBytes - std::min<size_t>(r.msgBytes, size_t{k} * c));
  }
  // Piece k of r again (a verdict asked for it), now or once UCX is done with its last send.
  void resend(Request* r, uint32_t k);
  void dispatch(Part* p);
  void abortInFlight() override;
  Status finish(Request* r, int* sizes) override;
  void post(Part* p, ucx::Endpoint& ep);
  void checkLinks() override;
  // Rail failover: lanes on a rail that is out move to a live one (their old endpoint is closed,
  // so what it held comes back through failover() and goes again); lanes go home once their rail
  // is back; the comm fails when no rail is left.
  void checkRails();
  // Whether a piece a rail that went out took goes again as a copy the comm does not wait for
  // (acknowledged comms, host memory: the receiver drops a second one, and a copy UCX holds for a
  // receiver that already has the piece never holds the message back), or as itself.
  bool loose(const Part& p) const;
  void sendLoose(Part* p);
  // Rail failover, small host messages (net/kept.h): whether the send completes from a kept copy
  // (else it waits for its acknowledgement); every copy not acknowledged goes again (a rail went
  // out): the pieces sent.
  bool keepCopy(const void* data, size_t size, uint32_t tag, uint32_t seq, MemHandle* mh);
  size_t resendKept();
  void tick() override;  // binds waiting pieces to lanes with room, releases held ones
  // PACT_FAULT drop: whether this attempt of p is lost (then it is sent again later, or the comm
  // fails).
  bool lostAttempt(Part* p);
  // PACT_FAULT stall and corrupt: whether the fault took the piece (held for ever, or a corrupted
  // copy sent in its place).
  bool wireFault(Part* p, ucx::Endpoint& ep);
  // PACT_FAULT lane_fail: the lane's endpoint is marked failed (as UCX's error callback marks one)
  // once `posted` is the spec's count of data pieces posted; the comm's next look at its links
  // reacts as to a real failure (a failover, or the comm fails with its one rail).
  void failLaneAt(uint64_t posted);
  void startTicking();
  // Completes every piece that is held back (lane queues, retransmissions) as cancelled.
  void dropHeld();
  bool ticking() const { return !cfg_.ordered || cfg_.fault.delayLane >= 0 || cfg_.fault.onPieces(); }

  Lanes lanes_;
  transport::RailSet rails_;
  std::vector<std::vector<uint8_t>> remoteRails_;  // the receiver's worker address per rail
  std::vector<Part*> failedOver_;  // pieces a rail that went out gave back: sent again by tick()
  bool closing_ = false;
  std::shared_ptr<transport::AckSink> ackSink_;  // non-null: sends wait for the receiver's acknowledgement
  KeptCopies kept_;  // small sends completed before their acknowledgement
  std::array<uint64_t, transport::RailSet::kMax> railBytes_{};
  std::vector<std::pair<TimePoint, Part*>> retransmit_;  // lost attempts and when to resend
  std::vector<Part*> stalled_;  // PACT_FAULT stall: pieces never sent
  uint64_t firstPosts_ = 0;     // data pieces posted (first attempts): PACT_FAULT lane_fail
  bool ticker_ = false;
  uint32_t tagSpace_;
  std::shared_ptr<SendCredits> credits_;
  size_t awaitingVerdicts_ = 0;  // sends held for their verdict
  size_t resendsDeferred_ = 0;   // pieces asked again while UCX still had them
  std::vector<wire::Verdict> verdicts_;  // scratch
};

class RecvComm final : public Comm {
 public:
  RecvComm(std::shared_ptr<Hub> hub, std::shared_ptr<Sessions> sessions, uint64_t channel,
           uint32_t tagSpace, std::string peer, const ChannelConfig& cfg);
  ~RecvComm() override;
  Status irecv(int n, void* const* data, const size_t* sizes, const int* tags,
               MemHandle* const* mhs, Request** out);
  // Makes the received bytes in CUDA buffers visible to the GPU (PACT_GPU_FLUSH, docs/gpu.md):
  // *out stays null when nothing is needed or the driver's flush already did it, otherwise a
  // request for the loopback reads.
  Status iflush(int n, void* const* data, const int* sizes, MemHandle* const* mhs, GpuFlush mode,
                Request** out);
  void shutdown() override;
  void partDone(Part* p) override;
  // Rail failover: the sender's rails, watched from here; the comm fails when all are out.
  // acks: this side offered failover, so it acknowledges each message it reports (SendComm).
  void setRails(transport::RailSet rails, std::shared_ptr<transport::AckSource> acks) {
    rails_ = std::move(rails);
    acks_ = std::move(acks);
  }
  const transport::RailSet& rails() const { return rails_; }
  Failover failover(Part* p) override;

 private:
  void progressComm(Request* r) override;
  void settle(Request* r) override;
  void beforeTest() override {
    if (acks_) acks_->flush();
  }
  void abortInFlight() override;
  Status finish(Request* r, int* sizes) override;
  void cancel(Part& p);
  void checkRails();
  // Marks the receives UCX still holds on rail as stranded (Request::settled): a message whose
  // pieces all landed on other rails is reported without waiting for them.
  void strand(int rail);
  // Copies of r's pieces cancelled because another copy landed, that UCX has not ended within
  // kOvertakenBound: a rendezvous matched on a connection that failed while this side's rails
  // stayed in (the sender's endpoint failed, its probes still answer). UCX 1.13 never ends such a
  // receive and a cancel cannot reach it. The rail's TCP connections to the peer are shut (so
  // nothing of it can land later) and the copy is stranded: the message is reported without it.
  void strandOvertaken(Request* r);
  // Posts the receive of part p (one rail of one piece, or a seal) into [data, data + size).
  void postPart(Part* p, void* data, size_t size);
  // Every copy of buffer b's piece k posted again (its check did not match): the part count and
  // bytes landed forget it.
  void repost(Request* r, int b, uint32_t piece);
  // Judges r's seals: epoch, size, checks, the commit hook. Whether r may be reported.
  bool judge(Request* r);
  // Fails the comm when a message's parts did not all land within the timeout of its first.
  void checkDeadlines();
  void checkLinks() override {
    checkDeadlines();
    if (rails_.active()) checkRails();
  }
  // The stale copies of tag's messages in the blocks of 64 behind seq, when seq enters a block
  // (tags.h).
  void drainStale(int tag, uint32_t seq);
  // Receives and drops what waits unexpected on every rail under probe/mask (counted as filtered).
  void dropUnexpected(uint64_t probe, uint64_t mask);
  Status flushByRead(int n, void* const* data,
                     const std::array<ucx::Region*, kMaxBuffers>& regions, int count,
                     Request** out);

  // The loopback endpoint's lane (past any data lane) on rail 0.
  static constexpr size_t kFlushLane = 255;
  uint32_t tagSpace_;
  transport::RailSet rails_;
  std::shared_ptr<transport::AckSource> acks_;
  std::shared_ptr<transport::SharedEndpoint> flushEp_;  // to this device's own worker
  uint64_t flushWord_ = 0;  // where the flush reads land (the value is never looked at)
};

}  // namespace pact::net
