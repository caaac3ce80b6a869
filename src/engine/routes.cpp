// The engine on the transport core: a context per distinct service of the engine classes (from
// the engine's Fabric), the lanes of each class to each peer, and the UCX calls of the data path
// (pieces and control messages as active messages, from the operation slabs): the protocol's Link.
#include <strings.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "engine/engine.h"
#include "engine/peer.h"
#include "ucx/ucx_status.h"

namespace pact::engine {

namespace {

transport::ChannelConfig channelOf(const Profile& p) {
  transport::ChannelConfig c;
  c.ordered = p.order == Order::kOrdered;
  c.lanes = c.ordered ? 1 : p.lanes;
  c.chunk = p.chunk;
  c.steering = p.steer == Steer::kAdaptive ? transport::Steering::kAdaptive
                                           : transport::Steering::kRoundRobin;
  c.retries = p.retries;
  return c;  // the engine applies its own faults (PACT_FAULT) per piece, not the lanes' delay
}

}  // namespace

Result<void> Engine::openContexts() {
  auto fabric = transport::Fabric::create(params_, UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                                          "engine " + config_.name, /*eagerWhole=*/true);
  if (!fabric.ok()) return fabric.error();
  fabric_ = std::move(fabric.value());
  // One device: several are fused into a virtual one, a rail each (an unordered class spreads
  // its lanes over them); none matched: UCX's own choice.
  int dev = fabric_->deviceCount() == 0 ? transport::Fabric::kAnyDevice : 0;
  if (fabric_->deviceCount() > 1) {
    std::vector<int> all;
    for (int i = 0; i < fabric_->deviceCount(); ++i) all.push_back(i);
    if (fabric_->makeVDevice(all, &dev) != Status::kOk)
      return Error{Status::kInvalidArgument, "PACT_NET_DEVICES: cannot fuse the devices into rails"};
  }
  std::vector<std::string> names{"DEFAULT"};
  for (const auto& n : ClassTable::engineClassNames()) names.push_back(n);
  for (const std::string& name : names) {
    Route r{name, params_.classes.forName(name), 0, {}};
    r.channel = channelOf(r.profile);
    auto d = fabric_->open(dev, r.profile, name);
    if (!d.ok()) return Error{d.status(), "engine " + config_.name + ": " + d.error().message};
    auto it = std::find_if(contexts_.begin(), contexts_.end(),
                           [&](const Context& c) { return c.dev == *d; });
    if (it == contexts_.end()) {
      if (contexts_.size() == kMaxContexts)
        return Error{Status::kInternal, "more than " + std::to_string(kMaxContexts) + " contexts"};
      Context c{*d, {}};
      for (size_t i = 0; i < c.dev->rails(); ++i) {
        ucx::Worker& w = c.dev->worker(i);
        auto fd = w.eventFd();
        if (!fd.ok()) return fd.error();
        c.eventFds.push_back(*fd);
        amSources_.push_back(std::make_unique<AmSource>(AmSource{this, &w, static_cast<uint8_t>(i)}));
        if (w.setAmHandler(kAmControl, &Engine::onControlAm, amSources_.back().get()) != Status::kOk ||
            w.setAmHandler(kAmPiece, &Engine::onPieceAm, amSources_.back().get()) != Status::kOk ||
            w.setAmHandler(kAmEager, &Engine::onEagerAm, amSources_.back().get()) != Status::kOk)
          return Error{Status::kInternal, "engine " + config_.name + ": cannot route active messages"};
      }
      contexts_.push_back(std::move(c));
      it = contexts_.end() - 1;
    }
    r.context = static_cast<size_t>(it - contexts_.begin());
    PACT_INFO("engine %s: class %s on context %zu (%s), %d lane(s), %s pieces",
              config_.name.c_str(), name.c_str(), r.context, it->dev->serviceKey().c_str(),
              r.channel.lanes, formatSize(r.profile.chunk).c_str());
    if (name == "CTRL") ctrlRoute_ = routes_.size();
    // Pieces may wait for a lane: several lanes, unordered pieces, or a class that stands back for
    // a higher one (transport/priority.h).
    queuedLanes_ = queuedLanes_ || r.channel.lanes > 1 || !r.channel.ordered || params_.classes.mixedPriorities();
    routes_.push_back(std::move(r));
  }
  openRails();
  return {};
}

Result<size_t> Engine::classRoute(const char* what, const char* trafficClass) const {
  if (trafficClass == nullptr || strcasecmp(trafficClass, "DEFAULT") == 0 ||
      ClassTable::isEngineClass(trafficClass))
    return routeFor(trafficClass);
  std::string choices = "DEFAULT";
  for (const auto& n : ClassTable::engineClassNames()) choices += ", " + n;
  return Error{Status::kInvalidArgument, std::string(what) + ": traffic class '" + trafficClass +
                                             "': expected one of " + choices};
}

size_t Engine::routeFor(const char* trafficClass) const {
  if (trafficClass == nullptr) return 0;
  const std::string name = ClassTable::canonicalName(trafficClass);
  auto it = std::find_if(routes_.begin(), routes_.end(), [&](const Route& r) { return r.name == name; });
  return it == routes_.end() ? 0 : static_cast<size_t>(it - routes_.begin());
}

std::vector<ClassRouteInfo> Engine::routes() const {
  std::vector<ClassRouteInfo> out;
  for (const Route& r : routes_)
    out.push_back({r.name, r.profile.describe(), r.context,
                   contexts_[r.context].dev->serviceKey(), r.channel.lanes, r.profile.chunk});
  return out;
}

std::vector<transport::LaneStats> Engine::laneStats(uint64_t peer, const std::string& cls) {
  std::lock_guard lock(mu_);
  std::vector<transport::LaneStats> out;
  auto it = peers_.find(peer);
  const size_t r = routeFor(cls.c_str());
  if (it == peers_.end() || r >= it->second->lanes.size() || !it->second->lanes[r]) return out;
  const transport::Lanes& l = *it->second->lanes[r];
  for (size_t i = 0; i < l.size(); ++i) out.push_back(l.stats(i));
  return out;
}

// What the engine sends from inside UCX's callbacks starts once UCX has returned (HeldPost). A
// send started here may lead to more (a failed piece's Cancel): they queue behind, in order.
unsigned Engine::progressWorkers() {
  unsigned n = 0;
  holding_ = true;
  for (Context& c : contexts_) n += c.dev->progress();
  for (size_t i = 0; i < held_.size(); ++i) start(HeldPost(held_[i]));  // (held_ may grow)
  held_.clear();
  holding_ = false;
  return n;
}

bool Engine::armWorkers() {
  for (Context& c : contexts_)
    for (size_t i = 0; i < c.dev->rails(); ++i)
      if (!c.dev->worker(i).arm()) return false;
  return true;
}

// Pieces that waited for room on a lane go out now (outside UCX callbacks). An ordered one-lane
// class binds every piece at once, so without an unordered or multi-lane class nothing waits.
void Engine::pumpLanes() {
  if (!queuedLanes_) return;
  for (auto& [id, p] : peers_) {
    if (p->phase != Peer::Phase::kReady) continue;
    for (auto& l : p->lanes) {
      if (l && !l->idle())
        l->pump([this](transport::LanePiece* q, ucx::Endpoint& ep) {
          postPiece(static_cast<PieceOp*>(q), ep);
        });
    }
  }
}

Result<transport::Lanes*> Engine::lanesTo(Peer& p, size_t r) {
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
    auto ep = dev.ownEndpoint(k, remote->rails[k], &Engine::onEndpointError, &p);
    if (!ep.ok())
      return Error{ep.status(), "class " + route.name + " lane " + std::to_string(i) + " to " + p.name +
                                    ": " + ep.error().message};
    lanes->add(std::move(ep.value()), static_cast<uint8_t>(k));
  }
  lanes->countAs("class " + route.name + " of engine " + config_.name + " to " + p.name,  // >1 lane: a set each
                 {{"engine", config_.name}, {"class", route.name}, {"peer", p.name}}, dev.railNames());
  if (params_.classes.mixedPriorities())
    lanes->setGate(transport::PeerGate::forPeer(sessions_->peerProcess(p.channel)), route.profile.priority);
  p.lanes[r] = std::move(lanes);
  return p.lanes[r].get();
}

void Engine::closePeerEndpoints(Peer& p) {
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
  dropKept(p);
}

// ---- the Link ---------------------------------------------------------------------------------

std::string Engine::reach(uint64_t peer, size_t route) {
  Peer* p = peerByToken(peer);
  if (p == nullptr) return "peer " + std::to_string(peer) + " is not connected";
  auto lanes = lanesTo(*p, route);
  return lanes ? std::string() : lanes.error().message;
}

void Engine::sendControl(uint64_t peer, const Control& m, int route) {
  Peer* p = peerByToken(peer);
  if (p == nullptr || !p->ctrl) return;
  // The route's first lane (behind its pieces), or the control lane.
  transport::Lanes* lanes = p->ctrl.get();
  if (route >= 0)
    if (auto own = lanesTo(*p, static_cast<size_t>(route))) lanes = *own;
  sendOn(*p, m, lanes->endpoint(0));
}

void Engine::sendPiece(uint64_t peer, size_t route, const PieceHeader& h, const uint8_t* src,
                       uint64_t n, uint64_t xfer, MemoryType srcType) {
  PieceOp* op = pieceOps_.take();
  *op = PieceOp{};
  op->done = &Engine::onPieceSent;
  op->engine = this;
  op->xfer = xfer;
  op->attempt = h.attempt;
  op->peer = peer;
  op->route = route;
  op->addr = const_cast<uint8_t*>(src);  // read only: UCX sends from it
  op->size = n;
  op->memType = ucx::ucxMemoryType(srcType, *driver_);
  Peer* p = peerByToken(peer);
  auto lanes = p == nullptr ? Result<transport::Lanes*>(Status::kNotFound, "") : lanesTo(*p, route);
  if (!lanes) {
    onPieceSent(op, UCS_ERR_NOT_CONNECTED);
    return;
  }
  PieceHeader header = h;
  header.token = p->remoteToken;
  encodePiece(header, op->header);
  (*lanes)->dispatch(op, [this](transport::LanePiece* q, ucx::Endpoint& ep) {
    post({HeldPost::Kind::kPiece, &ep, static_cast<PieceOp*>(q)});
  });
}

void Engine::sendEager(uint64_t peer, size_t route, const Offer& m, std::span<const Extent> src,
                       uint64_t xfer) {
  Peer* p = peerByToken(peer);
  auto lanes = p == nullptr || !p->ctrl ? Result<transport::Lanes*>(Status::kNotFound, "") : lanesTo(*p, route);
  if (!lanes) {
    proto_->pieceSent(xfer, false);  // at once, as sendPiece does (the protocol holds an op)
    return;
  }
  ControlOp* op = controlOps_.take();
  op->engine = this;
  op->done = &Engine::onEagerSent;
  op->xfer = xfer;
  op->peer = peer;
  encodeInto(m, &op->bytes);  // the AM header: the peer's token, then the offer's frame
  op->bytes.insert(op->bytes.begin(), reinterpret_cast<const uint8_t*>(&p->remoteToken),
                   reinterpret_cast<const uint8_t*>(&p->remoteToken) + sizeof p->remoteToken);
  op->iov.clear();
  for (const Extent& b : src) op->iov.push_back({b.addr, b.length});
  post({HeldPost::Kind::kEager, &(*lanes)->endpoint(0), op});
}

void Engine::onEagerSent(ucx::Op* o, ucs_status_t st) {
  auto* op = static_cast<ControlOp*>(o);
  Engine* e = op->engine;
  const uint64_t xfer = op->xfer;
  // With rail failover an offer lost with its rail is no failure: it is repeated until answered.
  auto p = e->peers_.find(op->peer);
  const bool failsOver = p != e->peers_.end() && p->second->failsOver();
  e->controlOps_.give(op);
  e->proto_->pieceSent(xfer, st == UCS_OK || failsOver);
  e->cv_.notify_all();
}

void Engine::fetch(void* descriptor, uint8_t* dst, uint64_t n, uint64_t xfer, uint32_t attempt,
                   MemoryType dstType) {
  PieceOp* op = pieceOps_.take();
  *op = PieceOp{};
  op->done = &Engine::onPieceFetched;
  op->engine = this;
  op->xfer = xfer;
  op->attempt = attempt;
  op->addr = dst;
  op->size = n;
  op->memType = ucx::ucxMemoryType(dstType, *driver_);
  const ucs_status_t st = fetchWorker_->amRecvData(descriptor, dst, n, op, op->memType);
  if (st != UCS_INPROGRESS) onPieceFetched(op, st);
}

void Engine::post(const HeldPost& h) {
  if (holding_)
    held_.push_back(h);
  else
    start(h);
}

void Engine::start(const HeldPost& h) {
  switch (h.kind) {
    case HeldPost::Kind::kPiece: return postPiece(static_cast<PieceOp*>(h.op), *h.ep);
    case HeldPost::Kind::kEager: {
      auto* op = static_cast<ControlOp*>(h.op);
      const ucs_status_t st = h.ep->amSendIov(kAmEager, op->bytes.data(), op->bytes.size(), op->iov, true, op);
      if (st != UCS_INPROGRESS) onEagerSent(op, st);
      return;
    }
    case HeldPost::Kind::kControl: {
      auto* op = static_cast<ControlOp*>(h.op);
      const ucs_status_t st =
          h.ep->amSend(kAmControl, &op->token, sizeof op->token, op->bytes.data(), op->bytes.size(), true, op);
      if (st == UCS_INPROGRESS) return;
      if (st != UCS_OK) {
        auto p = peers_.find(op->peer);
        PACT_WARN("engine %s: control message to %s failed: %s", config_.name.c_str(),
                  p == peers_.end() ? "a closed peer" : p->second->name.c_str(), ucs_status_string(st));
      }
      controlOps_.give(op);
      return;
    }
  }
}

void Engine::postPiece(PieceOp* op, ucx::Endpoint& ep) {
  const Transfer* x = proto_->find(op->xfer);
  if (x == nullptr || !x->live() || x->attempt != op->attempt) {
    onPieceSent(op, UCS_ERR_CANCELED);  // settled while the piece waited for its lane
    return;
  }
  op->posted = true;
  const ucs_status_t st =
      ep.amSend(kAmPiece, op->header, kPieceHeaderSize, op->addr, op->size, false, op, op->memType);
  if (st != UCS_INPROGRESS) onPieceSent(op, st);
}

void Engine::onPieceSent(ucx::Op* o, ucs_status_t st) {
  auto* op = static_cast<PieceOp*>(o);
  Engine* e = op->engine;
  op->status = st == UCS_OK ? Status::kOk : ucx::toStatus(st);
  auto p = e->peers_.find(op->peer);
  if (p != e->peers_.end() && op->route < p->second->lanes.size() && p->second->lanes[op->route])
    p->second->lanes[op->route]->completed(*op);
  if (p != e->peers_.end() && op->posted && e->railsTake(*p->second, op, st)) {
    e->cv_.notify_all();
    return;
  }
  const uint64_t xfer = op->xfer;
  e->pieceOps_.give(op);
  // A piece withdrawn before it left (cancelled) is no delivery failure.
  e->proto_->pieceSent(xfer, st == UCS_OK || st == UCS_ERR_CANCELED);
  e->cv_.notify_all();
}

void Engine::onPieceFetched(ucx::Op* o, ucs_status_t st) {
  auto* op = static_cast<PieceOp*>(o);
  Engine* e = op->engine;
  const uint64_t xfer = op->xfer;
  const uint32_t attempt = op->attempt;
  uint8_t* dst = op->addr;
  const uint64_t length = op->size;
  e->pieceOps_.give(op);
  // A fetch that failed with its rail: the sender sends the piece again over another.
  const Transfer* x = st == UCS_OK ? nullptr : e->proto_->find(xfer);
  auto p = x == nullptr ? e->peers_.end() : e->peers_.find(x->peer);
  if (p != e->peers_.end() && p->second->failsOver())
    e->proto_->pieceLost(xfer, attempt, dst);
  else
    e->proto_->pieceFetched(xfer, attempt, dst, length, st == UCS_OK);
  e->cv_.notify_all();
}

void Engine::onControlSent(ucx::Op* o, ucs_status_t) {
  auto* op = static_cast<ControlOp*>(o);
  op->engine->controlOps_.give(op);
}

void Engine::sendOn(Peer& p, const Control& m, ucx::Endpoint& ep) {
  ControlOp* op = controlOps_.take();
  op->engine = this;
  op->done = &Engine::onControlSent;
  encodeInto(m, &op->bytes);
  op->token = p.remoteToken;
  op->peer = p.id;
  post({HeldPost::Kind::kControl, &ep, op});
}

// An eager offer: the header is the sender's token of the connection and the offer's frame,
// the data every byte of the transfer (never rendezvous; one that came so is dropped by UCX, the
// offer stands and the bytes come again as pieces).
ucx::AmVerdict Engine::onEagerAm(void* arg, const ucx::AmMessage& m) {
  Engine* e = static_cast<AmSource*>(arg)->engine;
  uint64_t token = 0;
  if (m.headerLength < sizeof token) {
    PACT_WARN("engine %s: malformed eager offer dropped", e->config_.name.c_str());
    return ucx::AmVerdict::kDone;
  }
  std::memcpy(&token, m.header, sizeof token);
  Peer* p = e->peerByToken(token);
  if (p == nullptr) return ucx::AmVerdict::kDone;  // from a connection already closed
  const auto* h = static_cast<const uint8_t*>(m.header);
  auto c = decode(std::span(h + sizeof token, m.headerLength - sizeof token));
  const Offer* offer = c.ok() ? std::get_if<Offer>(&*c) : nullptr;
  if (offer == nullptr || (offer->flags & kOfferEager) == 0) {
    PACT_WARN("engine %s: eager offer from %s refused: %s", e->config_.name.c_str(), p->name.c_str(),
              c.ok() ? "not an eager offer" : c.error().message.c_str());
    return ucx::AmVerdict::kDone;
  }
  e->proto_->onEager(p->id, *offer, m.rendezvous ? nullptr : static_cast<const uint8_t*>(m.data),
                     m.rendezvous ? 0 : m.length);
  e->cv_.notify_all();
  return ucx::AmVerdict::kDone;
}

ucx::AmVerdict Engine::onPieceAm(void* arg, const ucx::AmMessage& m) {
  auto* src = static_cast<AmSource*>(arg);
  Engine* e = src->engine;
  auto h = decodePiece(std::span(static_cast<const uint8_t*>(m.header), m.headerLength));
  if (!h.ok()) {
    PACT_WARN("engine %s: data piece refused: %s", e->config_.name.c_str(), h.error().message.c_str());
    return ucx::AmVerdict::kRefuse;
  }
  Peer* p = e->peerByToken(h->token);
  if (p != nullptr && p->rails.active()) p->rails.heard(src->rail);
  e->fetchWorker_ = src->worker;
  const PieceVerdict v =
      e->proto_->onPiece(p == nullptr ? 0 : p->id, *h, m.data, m.length, m.rendezvous, m.data);
  e->fetchWorker_ = nullptr;
  return v == PieceVerdict::kRefuse ? ucx::AmVerdict::kRefuse : ucx::AmVerdict::kDone;
}

}  // namespace pact::engine
