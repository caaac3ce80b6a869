// Rail failover, the Routes' (routes.h), on the engine's face (docs/reliability.md, "Rail
// failover"): the plugin's detection (transport/rail_set.h: a UDP probe per rail, endpoint errors), per peer. A rail taken
// out moves every lane to the peer that ran on it, the control lane's too, to a live rail, shuts
// down UCX's TCP connections over it (nothing it held can land later), and sends again every
// piece of a live attempt that went over it: those UCX still held come back failed (parked) and
// those it had completed are kept until their transfer settles (over TCP a completed send is
// only in the kernel). The commit protocol is untouched: the receiver keeps the first copy of a
// piece, waits for missing pieces while they still arrive, and each side repeats the control
// messages of its own that the rail may have swallowed (Protocol::railOut). A peer whose every
// rail is out is lost (PeerTable::lose).
#include <algorithm>
#include <bit>

#include "common/log.h"
#include "common/parse.h"
#include "engine/ops.h"
#include "engine/peer_table.h"
#include "engine/protocol.h"
#include "engine/routes.h"

namespace pact::engine {

// ---- rail failover ------------------------------------------------------------------------------

void Routes::openRails() {
  transport::DeviceCtx& dev = *contexts_[routes_[ctrlRoute_].context].dev;
  if (!transport::failoverWanted(dev.rails(), params_.rail_timeout)) return;
  prober_ = transport::RailProber::acquire();
  probes_ = transport::probesOf(dev, *prober_, params_.rail_timeout);
  if (probes_.empty()) prober_.reset();
}

void Routes::watchRails(Peer& p, const std::vector<wire::ProbeAddress>& peerProbes) {
  if (!prober_ || peerProbes.empty()) return;
  p.rails = transport::RailSet(*contexts_[routes_[ctrlRoute_].context].dev, prober_, probes_, peerProbes,
                               params_.rail_timeout);
  if (!p.rails.active()) return;
  if (!params_.trace_file.empty())
    p.rails.trace("engine " + name_ + " to " + p.name, 4 * static_cast<size_t>(params_.trace_events));
  // A receiver waits this long for pieces missing after Done: the detection bound and a margin.
  proto_->setRailFailover(p.id, 4 * params_.rail_timeout);
  PACT_INFO("engine %s: peer %s: rail failover over %zu rails (PACT_RAIL_TIMEOUT %s)", name_.c_str(),
            p.name.c_str(), p.rails.size(), formatDuration(params_.rail_timeout).c_str());
}

bool Routes::railsTake(Peer& p, PieceOp* op, ucs_status_t st) {
  if (!p.failsOver()) return false;
  const Transfer* x = proto_->find(op->xfer);
  if (x == nullptr || !x->live() || x->attempt != op->attempt) return false;
  if (st != UCS_OK) {  // went with its rail: sent again once the lanes moved (checkRails)
    p.rails.suspend(op->rail);
    p.parked.push_back(op);
    return true;
  }
  p.rails.heard(op->rail);
  p.sent.push_back(op);
  if (p.sent.size() >= p.sentPruneAt) pruneSent(p);
  proto_->pieceSent(op->xfer, true);
  return true;
}

void Routes::pruneSent(Peer& p) {
  std::erase_if(p.sent, [&](PieceOp* op) {
    const Transfer* x = proto_->find(op->xfer);
    if (x != nullptr && x->live() && x->attempt == op->attempt) return false;
    pieceOps_.give(op);
    return true;
  });
  p.sentPruneAt = std::max<size_t>(Peer::kMinSentPrune, 2 * p.sent.size());
}

void Routes::dropKept(Peer& p) {
  for (PieceOp* op : std::exchange(p.parked, {})) {
    const uint64_t xfer = op->xfer;
    pieceOps_.give(op);
    proto_->pieceSent(xfer, false);
  }
  for (PieceOp* op : std::exchange(p.sent, {})) pieceOps_.give(op);
}

void Routes::checkRails() {
  if (!prober_) return;
  peers_.forEach([this](Peer& p) {
    if (p.failsOver()) checkRails(p);
  });
}

void Routes::checkRails(Peer& p) {
  if (!p.leaving.empty()) {
    const auto t = now();
    std::erase_if(p.leaving, [&](auto& e) {
      if (e.first > t) return false;
      e.second->ep.closeLater(false);  // UCX finishes it (ucx::Pending)
      return true;
    });
  }
  forEachLaneSet(p, [&](transport::Lanes& l, size_t, const char*) {
    for (size_t i = 0; i < l.size(); ++i)
      if (l.shared(i)->failed()) p.rails.suspend(l.rail(i));
  });
  const auto [out, back] = p.rails.changes();
  if (out != 0) proto_->count(telemetry::kEngineRailFailovers, static_cast<uint64_t>(std::popcount(out)));
  if (back != 0) {
    proto_->count(telemetry::kEngineRailRecoveries, static_cast<uint64_t>(std::popcount(back)));
    proto_->count(telemetry::kEngineRailDownUs, p.rails.backOutageUs());
  }
  // While rail 0 is out the rails judge whether the peer lives, not the session's keepalive (its
  // connection may ride rail 0: Sessions::holdLiveness).
  if (((out | back) & 1u) != 0) peers_.holdLiveness(p, !p.rails.usable(0));
  const bool waiting = !p.rails.anyUsable();  // every rail out, some only suspended: parked until one is back
  if (waiting && !p.rails.anyAnswering()) {
    const std::string why = "every rail to the peer is out: " + p.rails.causes();
    PACT_WARN("engine %s: peer %s: %s", name_.c_str(), p.name.c_str(), why.c_str());
    peers_.lose(p, why);
    return;
  }
  unsigned left = 0;  // rails a lane left: what went over them may be lost with their connections
  const std::string moved = moveLanes(p, &left);
  std::vector<PieceOp*> again = std::exchange(p.parked, {});  // still pending: no new count
  uint64_t resentBytes = 0;
  size_t resent = 0;
  // Sent again: what UCX completed over a rail that went out, and over one a lane left on its way
  // home (the peer closing its own endpoint there may end the connection before its bytes were
  // read; the receiver drops a second copy).
  if (const unsigned resendFrom = out | left; resendFrom != 0) {
    pruneSent(p);
    std::erase_if(p.sent, [&](PieceOp* op) {
      if ((resendFrom & (1u << op->rail)) == 0) return false;
      proto_->pieceResent(op->xfer, op->size);  // the attempt waits for it again
      again.push_back(op);
      resentBytes += op->size;
      ++resent;
      return true;
    });
  }
  if (out == 0 && left != 0) proto_->railOut(p.id);  // control messages over a left rail: repeated too
  if (waiting) {
    p.parked.insert(p.parked.end(), again.begin(), again.end());
    again.clear();
  }
  for (PieceOp* op : again) {
    transport::Lanes* lanes = op->route < p.lanes.size() ? p.lanes[op->route].get() : nullptr;
    if (lanes == nullptr) {
      op->posted = false;  // not a rail's failure: reported as one
      onPieceSent(op, UCS_ERR_NOT_CONNECTED);
      continue;
    }
    lanes->dispatch(op, [this](transport::LanePiece* q, ucx::Endpoint& ep) { postPiece(static_cast<PieceOp*>(q), ep); });
  }
  for (size_t r = 0; r < p.rails.size(); ++r) {
    if (out & (1u << r)) {
      proto_->railOut(p.id);
      const int resets = p.rails.reset(r);  // not inside the log line: it runs whatever the log level
      PACT_WARN("engine %s: peer %s: %s out (%s): %s; %zu piece(s) UCX had completed over it (%s) go again; "
                "%d TCP connection(s) on it reset",
                name_.c_str(), p.name.c_str(), p.rails.name(r).c_str(), p.rails.cause(r).c_str(),
                moved.empty() ? "no lane on it" : moved.c_str(), resent, formatSize(resentBytes).c_str(), resets);
    }
    if (back & (1u << r))
      PACT_WARN("engine %s: peer %s: %s back after %lld ms out: %s", name_.c_str(), p.name.c_str(),
                p.rails.name(r).c_str(), static_cast<long long>(p.rails.lastOutage(r).count()),
                moved.empty() ? "no lane returns to it" : moved.c_str());
  }
}

// Lanes off their rail: to a live one (failover) or home again (recovery). What the old endpoint
// of a lane leaving an out rail holds fails now (forced close) and comes back parked.
std::string Routes::moveLanes(Peer& p, unsigned* left) {
  std::string moved;
  forEachLaneSet(p, [&](transport::Lanes& l, size_t context, const char* name) {
    const std::vector<std::vector<uint8_t>>* remote = nullptr;
    for (size_t i = 0; i < l.size(); ++i) {
      const size_t from = l.rail(i);
      const size_t home = l.home(i);  // the common case needs no count of lanes per rail
      const int to = p.rails.usable(home) ? static_cast<int>(home) : p.rails.pick(home, l.lanesOn(p.rails.size()));
      // A lane whose endpoint failed on a rail that is usable again gets a new endpoint there.
      if (to < 0 || (static_cast<size_t>(to) == from && !l.shared(i)->failed())) continue;
      if (remote == nullptr) remote = remoteRails(p, context);
      if (remote == nullptr || static_cast<size_t>(to) >= remote->size()) continue;
      auto ep = contexts_[context].dev->ownEndpoint(static_cast<size_t>(to), (*remote)[static_cast<size_t>(to)],
                                                     &Routes::onEndpointError, &p);
      if (!ep.ok()) {  // that rail is no better: tried again at the next look
        p.rails.suspend(static_cast<size_t>(to));
        continue;
      }
      std::shared_ptr<transport::SharedEndpoint> old = l.shared(i);
      l.moveLane(i, std::move(*ep), static_cast<uint8_t>(to));
      *left |= 1u << from;
      moved += (moved.empty() ? "" : ", ") + std::string(name) + " lane " + std::to_string(i) + " to rail " +
               std::to_string(to);
      if (!p.rails.usable(from) || old->failed()) {
        if (!old->failed()) old->error = UCS_ERR_CANCELED;
        old->ep.close(true);
      } else {
        // Home again from a live rail: what the old endpoint holds is delivered first (a forced
        // close would reset the connection the peer's endpoints share with it), and only once
        // the peer has had time to come home too (Peer::leaving).
        p.leaving.emplace_back(now() + 4 * p.rails.timeout(), std::move(old));
      }
    }
  });
  return moved;
}

const std::vector<std::vector<uint8_t>>* Routes::remoteRails(const Peer& p, size_t context) const {
  const std::string& service = contexts_[context].dev->serviceKey();
  for (const ContextAddress& c : p.contexts)
    if (c.service == service) return &c.rails;
  return nullptr;
}

}  // namespace pact::engine
