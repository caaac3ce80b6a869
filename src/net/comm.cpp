#include "net/comm.h"

#include <algorithm>
#include <atomic>
#include <optional>

#include "common/log.h"
#include "net/contract.h"
#include "net/fence.h"
#include "net/parts.h"
#include "transport/control_socket.h"
#include "transport/seal.h"
#include "ucx/ucx_status.h"

namespace pact::net {

namespace {

// Salt of each comm's fault dice: comms created in the same order draw the same faults.
std::atomic<uint64_t> commsCreated{0};

}  // namespace

Comm::Comm(std::shared_ptr<Hub> hub, std::shared_ptr<Sessions> sessions, uint64_t channel,
           size_t maxInFlight, bool isSend, std::string peer, const ChannelConfig& cfg)
    : hub_(std::move(hub)), sessions_(std::move(sessions)), channel_(channel),
      maxInFlight_(maxInFlight), isSend_(isSend), peer_(std::move(peer)), cfg_(cfg),
      counters_(telemetry::kCommCatalog, std::string(isSend ? "send" : "recv") + " comm to " + peer_,
                {{"direction", isSend ? "send" : "recv"},
                 {"device", hub_->dev().info().name},
                 {"class", cfg_.className},
                 {"peer", transport::hostOf(peer_)}}),  // a bounded label: no port
      class_(telemetry::classCounters("plugin", cfg_.className)) {
  dev().counters().addShared(telemetry::kLiveComms);
  if (cfg_.fault.onPieces()) dice_.emplace(cfg_.fault.seed, commsCreated++ * 2 + (isSend_ ? 1 : 0));
  diag::opened(*this);
}

Comm::~Comm() {
  countError(false);  // a failure nobody tested for
  diag::closed(*this);  // PACT_DIAG: its line
  magic = 0;
  dev().counters().subShared(telemetry::kLiveComms);
}

void Comm::failPeer(Status s, telemetry::ErrorKind kind, const std::string& why) {
  if (error_ != Status::kOk) return;
  peerLost_ = true;
  fail(s, kind, why);
}

void Comm::fail(Status s, telemetry::ErrorKind kind, const std::string& why) {
  if (error_ != Status::kOk) return;
  error_ = s;
  why_ = why;
  errorKind_ = kind;  // counted in the class's errors once the comm is withdrawn (countError)
  // A lost peer process fails every comm to it at once: one warning a second says so, the
  // other comms are logged at INFO, so 1,000 comms do not print 1,000 warnings.
  static std::atomic<int64_t> lastPeerWarning{0};
  const int64_t sec = std::chrono::duration_cast<std::chrono::seconds>(now().time_since_epoch()).count();
  const auto level = peerLost_ && lastPeerWarning.exchange(sec) == sec ? log::Level::kInfo : log::Level::kWarn;
  PACT_LOG_AT(level, "%s comm %p to %s on %s failed: %s", isSend_ ? "send" : "recv",
              static_cast<void*>(this), peer_.c_str(), dev().info().name.c_str(), why.c_str());
}

void Comm::abort(Status s, telemetry::ErrorKind kind, const std::string& why) {
  if (error_ != Status::kOk) return;
  fail(s, kind, why);
  sessions_->abort(channel_, why);
}

void Comm::checkPeer() {
  const auto t = now();
  if (t < nextLivenessCheck_) return;
  nextLivenessCheck_ = t + dev().params().liveness_interval;
  if (byeReceived_) {
    if (t - byeAt_ > dev().params().peer_timeout)
      fail(Status::kRemoteError, telemetry::ErrorKind::kPeerAbort, "peer closed the comm with this request unmatched");
    return;
  }
  readPeer(sessions_->view(channel_));
}

void Comm::readPeer(const transport::ChannelView& v) {
  if (!v.abortReason.empty())
    fail(Status::kRemoteError, telemetry::ErrorKind::kPeerAbort, "the peer failed the comm: " + v.abortReason);
  if (v.peerClosed && !byeReceived_) {
    byeReceived_ = true;
    byeAt_ = v.peerClosedAt;
  }
  if (!byeReceived_ && !v.lostReason.empty() && error_ == Status::kOk) {
    dev().progress();  // drain what UCX already delivered before declaring the loss
    failPeer(Status::kRemoteError, telemetry::ErrorKind::kPeerLost, v.lostReason + " without goodbye (peer process died?)");
  }
}

Request* Comm::acquire(bool isSend, int nbuffers, size_t nparts, bool beyondBound) {
  if (inFlight_ >= maxInFlight_ && !beyondBound) return nullptr;
  Request* r = hub_->requests().acquire(this, isSend, nbuffers, nparts);
  ++inFlight_;
  diag_.requestsPeak = std::max(diag_.requestsPeak, inFlight_);
  r->olderPosted = newestPosted_;
  (newestPosted_ ? newestPosted_->newerPosted : oldestPosted_) = r;
  newestPosted_ = r;
  return r;
}

void Comm::release(Request* r) {
  (r->olderPosted ? r->olderPosted->newerPosted : oldestPosted_) = r->newerPosted;
  (r->newerPosted ? r->newerPosted->olderPosted : newestPosted_) = r->olderPosted;
  --inFlight_;
  if (r->done()) {
    hub_->requests().release(r);
  } else {  // stranded parts (Request::settled): completePart gives it back once UCX lets go
    r->comm = nullptr;
    r->olderPosted = r->newerPosted = nullptr;
    counters_.add(telemetry::kRailStrandedReceives);
  }
}

bool Comm::leaveInFlight() {
  bool left = false;
  for (Request* r = oldestPosted_; r != nullptr;) {
    Request* next = r->newerPosted;
    if (r->done()) {
      hub_->requests().release(r);
    } else {
      r->comm = nullptr;  // completePart gives it back once UCX lets go
      left = true;
    }
    r = next;
  }
  oldestPosted_ = newestPosted_ = nullptr;
  inFlight_ = 0;
  return left;
}

namespace {
// The request's face record, handed over once (closed in the request), and its pieces and lanes.
void endRequest(Request* r, Ending* ending) {
  if (ending == nullptr) return;
  ending->face = r->face;
  r->face.open = 0;
  r->face.postedNs = 0;
  ending->comm = r->comm;
  ending->peer = r->comm != nullptr ? &r->comm->peer() : nullptr;
  ending->send = r->isSend;
  ending->nbuffers = r->nbuffers;
  ending->pieces = static_cast<uint32_t>(r->parts.size());
  ending->laneMask = 0;  // a bit per lane (PACT_MAX_LANES <= 32)
  for (const Part& p : r->parts) ending->laneMask |= 1u << (p.lane & 31u);
}
}  // namespace

Status Comm::test(Request* r, bool* done, int* sizes, Ending* ending) {
  *done = false;
  beforeTest();
  // Ordered: reported only after every earlier request. A request that can be reported already
  // (an eager send) needs no progress.
  auto ready = [&] { return r->settled() && !r->held && !(cfg_.ordered && earlierInFlight(r)); };
  if (!ready()) {
    dev().progress();
    if (r->multiPart()) progressComm(r);
    if (r->held) settle(r);
    if (!ready()) {
      const Status s = notReady();
      if (s != Status::kOk) endRequest(r, ending);  // failed: NCCL will not see it done
      return s;
    }
  }
  // Fail closed: once the application fences, a receive comm whose messages carry no epoch (it
  // was connected before fencing began) reports nothing more.
  if (!isSend_ && !cfg_.sealed && Fence::process().active() && !r->flush) [[unlikely]] {
    abort(Status::kEpochMismatch, telemetry::ErrorKind::kRefused,
          "fencing is on (pact_nccl_set_epoch or a commit hook) but this comm was connected before it "
          "began: its messages carry no epoch, so none is reported done (enable fencing before the "
          "communicators are created)");
    endRequest(r, ending);
    return failure();
  }
  if (!cfg_.ordered && earlierInFlight(r)) counters_.add(telemetry::kMessagesOutOfOrder);
  Status result = finish(r, sizes);
  const bool flush = r->flush;
  uint64_t bytes = 0;  // for the class's counters
  if (isSend_)
    for (const Part& p : r->parts) bytes += p.size;
  else
    for (int b = 0; b < r->nbuffers; ++b) bytes += r->landedBytes[static_cast<size_t>(b)];
  endRequest(r, ending);
  release(r);
  if (result != Status::kOk) {
    (void)failure();  // a failed comm found here is withdrawn like anywhere else
    return result == Status::kCanceled ? Status::kRemoteError : result;
  }
  counters_.add(telemetry::kMessages);
  if (!flush) {
    counters_.add(telemetry::kCommBytes, bytes);
    class_.addShared(isSend_ ? telemetry::kClassMessagesSent : telemetry::kClassMessagesReceived);
    class_.addShared(isSend_ ? telemetry::kClassBytesSent : telemetry::kClassBytesReceived, bytes);
  }
  *done = true;
  return Status::kOk;
}

Status Comm::notReady() {
  checkLinks();
  pollPeer();
  return failure();
}

void Comm::pollPeer() {
  // Reading the clock on every spin of a test() loop costs latency; checking the peer on every
  // 32nd call is plenty (a spinning loop makes millions of calls per second).
  if (error_ == Status::kOk && (++livenessCalls_ & 31u) == 0) checkPeer();
}

void Comm::countError(bool askSession) {
  if (errorCounted_ || error_ == Status::kOk) return;
  errorCounted_ = true;
  // A UCX error on an operation to a peer whose process died: when the session has seen the loss
  // already, that is the better cause. (Shared memory's cma read from a killed process fails with
  // an I/O error before the kernel closes its socket: that one stays a transport error.)
  if (askSession && errorKind_ == telemetry::ErrorKind::kTransport &&
      !sessions_->view(channel_, false).lostReason.empty())
    errorKind_ = telemetry::ErrorKind::kPeerLost;
  class_.addShared(telemetry::classError(errorKind_));
}

Status Comm::failure() {
  if (error_ != Status::kOk && !aborted_) {
    aborted_ = true;
    countError(true);
    if (peerLost_) {
      const auto t = now();
      for (Request* r = oldestPosted_; r != nullptr; r = r->newerPosted) {
        r->peerDead = true;
        r->deadAt = t;
      }
    }
    abortInFlight();
  }
  return isError(error_) ? error_ : Status::kOk;
}

bool Comm::byeLost() { return inject(cfg_.fault.loseRemoteDone); }

bool Comm::peerGone() {
  if (byeReceived_ || isError(error_)) return true;
  readPeer(sessions_->view(channel_));
  return byeReceived_ || isError(error_);
}

}  // namespace pact::net
