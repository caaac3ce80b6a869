// A peer's lanes, the Routes' (routes.h): its Hello's addresses, its control lane and every class's
// lanes made at the handshake and their wiring (a flush of each endpoint, then Wired both ways),
// their endpoints' errors, their forced close. Rail failover moves them between rails
// (failover.cpp).
#include <algorithm>

#include "common/log.h"
#include "engine/ops.h"
#include "engine/peer_table.h"
#include "engine/protocol.h"
#include "engine/routes.h"

namespace pact::engine {

std::vector<uint8_t> Routes::hello(const Peer& p, uint64_t epoch) const {
  transport::DeviceCtx& ctrl = *contexts_[routes_[ctrlRoute_].context].dev;
  Hello hello{name_, p.id, epoch, ctrl.worker(0).address(), {}, probes_};
  for (const Context& c : contexts_) hello.contexts.push_back({c.dev->serviceKey(), c.dev->addresses()});
  return encode(Control(hello));
}

Result<void> Routes::connect(Peer& p) {
  // The accepting side makes its endpoints once the connecting side's are wired (wired()): UCP
  // then finds each of them already made by that wireup (matched in order), so no connection is
  // opened from both ends at once. UCX 1.22's tcp transport could abort a process whose peer died
  // or left during such a crossing (stubs.c:107, docs/engine.md).
  if (!p.outbound) return {};
  return makeLanes(p);
}

Result<void> Routes::makeLanes(Peer& p) {
  auto ep = contexts_[routes_[ctrlRoute_].context].dev->ownEndpoint(0, p.peerWorker, &Routes::onEndpointError, &p);
  if (!ep.ok()) return ep.error();
  p.ctrl = std::make_shared<transport::Lanes>();
  p.ctrl->configure(routes_[ctrlRoute_].channel);
  p.ctrl->add(std::move(*ep), 0);
  // Every lane now rather than at a class's first use: their UCX wireup is over once connect
  // returns (a peer leaving during a wireup can abort this process under UCX 1.13).
  for (size_t r = 0; r < routes_.size(); ++r) (void)lanesTo(p, r);
  forEachLaneSet(p, [&](transport::Lanes& l, size_t, const char*) {
    for (size_t i = 0; i < l.size(); ++i) p.wiring.push_back(l.endpoint(i).flushLater());
  });
  return {};
}

Result<bool> Routes::wired(Peer& p) {
  if (!p.ctrl) {
    if (!p.wiredThere) return false;  // the connecting side is still wiring its endpoints
    if (auto made = makeLanes(p); !made) return made.error();
  }
  bool flushed = true;
  for (ucx::Pending& f : p.wiring) flushed = f.done() && flushed;
  if (!flushed) return false;
  for (const ucx::Pending& f : p.wiring)
    if (f.status() != UCS_OK)
      return Error{Status::kRemoteError,
                   std::string("a UCX endpoint to the peer failed while being wired up: ") + ucs_status_string(f.status())};
  p.wiring.clear();
  if (!p.wiredHere) {
    sendOn(p, Wired{}, p.ctrl->endpoint(0));
    p.wiredHere = true;
  }
  return p.wiredThere;
}

Result<transport::Lanes*> Routes::lanesTo(Peer& p, size_t r) {
  if (p.lanes.size() < routes_.size()) p.lanes.resize(routes_.size());
  if (p.lanes[r]) return p.lanes[r].get();
  const Route& route = routes_[r];
  // With classes of different priority, a class below the highest gets lanes of its own that
  // stand back for higher classes to the peer; the control lane never does (it carries every
  // class's offers and verdicts).
  const bool yields = params_.classes.yields(route.profile);
  if (route.context == routes_[ctrlRoute_].context && route.channel.lanes == 1 && p.ctrl && !yields) {
    p.lanes[r] = p.ctrl;
    return p.ctrl.get();
  }
  transport::DeviceCtx& dev = *contexts_[route.context].dev;
  auto remote = std::find_if(p.contexts.begin(), p.contexts.end(), [&](const ContextAddress& c) {
    return c.service == dev.serviceKey();
  });
  if (remote == p.contexts.end())
    return Error{Status::kRefused, "peer " + p.name + " has no context for service " + dev.serviceKey() +
                                       " of class " + route.name + " (set PACT_TC_" + route.name +
                                       " alike on both sides)"};
  auto lanes = std::make_shared<transport::Lanes>();
  lanes->configure(route.channel);
  // Lane i runs on rail i mod (rails both sides have): rail k of this side talks to rail k there.
  const size_t rails = std::min(dev.rails(), remote->rails.size());
  for (int i = 0; i < route.channel.lanes; ++i) {
    const size_t k = static_cast<size_t>(i) % rails;
    auto ep = dev.ownEndpoint(k, remote->rails[k], &Routes::onEndpointError, &p);
    if (!ep.ok())
      return Error{ep.status(), "class " + route.name + " lane " + std::to_string(i) + " to " + p.name +
                                    ": " + ep.error().message};
    lanes->add(std::move(ep.value()), static_cast<uint8_t>(k));
  }
  lanes->countAs("class " + route.name + " of engine " + name_ + " to " + p.name,  // >1 lane: a set each
                 {{"engine", name_}, {"class", route.name}, {"peer", p.name}}, dev.railNames());
  if (params_.classes.mixedPriorities())
    lanes->setGate(transport::PeerGate::forPeer(peers_.process(p)), route.profile.priority);
  p.lanes[r] = std::move(lanes);
  return p.lanes[r].get();
}

void Routes::closePeerEndpoints(Peer& p) {
  // Pieces still waiting for a lane never leave: they end as failed sends.
  std::vector<PieceOp*> waiting;
  for (auto& l : p.lanes)
    if (l) l->dropDelayed([&](transport::LanePiece* q) { waiting.push_back(static_cast<PieceOp*>(q)); });
  for (PieceOp* op : waiting) onPieceSent(op, UCS_ERR_CANCELED);
  // Forced close fails whatever UCX still has in flight with the peer, so no receive keeps
  // writing into application memory.
  for (auto& l : p.lanes)
    if (l) l->closeAll();
  if (p.ctrl) p.ctrl->closeAll();
  p.wiring.clear();  // ended by the forced closes
  dropKept(p);
}

void Routes::onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* p = static_cast<Peer*>(arg);
  // Runs inside ucp_worker_progress with the engine lock held. The peer's session reports a dead
  // peer (PeerTable::poll -> lose); this keeps UCX's reason for a send refused before that, and
  // marks the lane's endpoint failed (rail failover takes its rail out: failover.cpp).
  const auto mark = [&](transport::Lanes* l) {
    for (size_t i = 0; l != nullptr && i < l->size(); ++i)
      if (l->endpoint(i).get() == ep) l->shared(i)->error = status;
  };
  mark(p->ctrl.get());
  for (auto& l : p->lanes) mark(l.get());
  if (p->lostReason.empty() && !p->rails.active()) p->lostReason = std::string("ucx: ") + ucs_status_string(status);
}

std::vector<transport::LaneStats> Routes::laneStats(const Peer* p, const std::string& cls) const {
  std::vector<transport::LaneStats> out;
  const size_t r = routeFor(cls.c_str());
  if (p == nullptr || r >= p->lanes.size() || !p->lanes[r]) return out;
  const transport::Lanes& l = *p->lanes[r];
  for (size_t i = 0; i < l.size(); ++i) out.push_back(l.stats(i));
  return out;
}

}  // namespace pact::engine
