// The Routes (routes.h): a context per distinct service of the engine classes (from the
// engine's Fabric), the classes' routes, the workers' progress with the sends held meanwhile, and
// the UCX calls of the data path (pieces and control messages as active messages, from the
// operation slabs, and their handlers): the protocol's Link. A peer's lanes: failover.cpp.
#include "engine/routes.h"

#include <strings.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "engine/ops.h"
#include "engine/peer_table.h"
#include "engine/protocol.h"
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

Routes::Routes(std::string name, const Params& params, const cuda::Driver& driver, PeerTable& peers,
               Events& events)
    : name_(std::move(name)), params_(params), driver_(driver), peers_(peers), events_(events) {}

Routes::~Routes() = default;

Result<void> Routes::open() {
  auto fabric = transport::Fabric::create(params_, UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                                          "engine " + name_, /*eagerWhole=*/true);
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
    if (!d.ok()) return Error{d.status(), "engine " + name_ + ": " + d.error().message};
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
        if (w.setAmHandler(kAmControl, &Routes::onControlAm, amSources_.back().get()) != Status::kOk ||
            w.setAmHandler(kAmPiece, &Routes::onPieceAm, amSources_.back().get()) != Status::kOk ||
            w.setAmHandler(kAmEager, &Routes::onEagerAm, amSources_.back().get()) != Status::kOk)
          return Error{Status::kInternal, "engine " + name_ + ": cannot route active messages"};
      }
      contexts_.push_back(std::move(c));
      it = contexts_.end() - 1;
    }
    r.context = static_cast<size_t>(it - contexts_.begin());
    PACT_INFO("engine %s: class %s on context %zu (%s), %d lane(s), %s pieces",
              name_.c_str(), name.c_str(), r.context, it->dev->serviceKey().c_str(),
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

Result<size_t> Routes::classRoute(const char* what, const char* trafficClass) const {
  if (trafficClass == nullptr || strcasecmp(trafficClass, "DEFAULT") == 0 ||
      ClassTable::isEngineClass(trafficClass))
    return routeFor(trafficClass);
  std::string choices = "DEFAULT";
  for (const auto& n : ClassTable::engineClassNames()) choices += ", " + n;
  return Error{Status::kInvalidArgument, std::string(what) + ": traffic class '" + trafficClass +
                                             "': expected one of " + choices};
}

size_t Routes::routeFor(const char* trafficClass) const {
  if (trafficClass == nullptr) return 0;
  const std::string name = ClassTable::canonicalName(trafficClass);
  auto it = std::find_if(routes_.begin(), routes_.end(), [&](const Route& r) { return r.name == name; });
  return it == routes_.end() ? 0 : static_cast<size_t>(it - routes_.begin());
}

std::vector<ClassRouteInfo> Routes::info() const {
  std::vector<ClassRouteInfo> out;
  for (const Route& r : routes_)
    out.push_back({r.name, r.profile.describe(), r.context,
                   contexts_[r.context].dev->serviceKey(), r.channel.lanes, r.profile.chunk});
  return out;
}

std::string Routes::routableIp() const {
  return fabric_->deviceCount() > 0 ? fabric_->deviceInfo(0).ipAddress : std::string();
}

Result<void> Routes::registerMemory(const MemorySpec& spec, Registration& r) {
  for (Context& c : contexts_) {
    auto regions = c.dev->registerOnRails({spec.addr, spec.length, spec.type, spec.device},
                                          spec.dmabufFd, spec.dmabufOffset);
    if (!regions.ok()) return regions.error();
    r.regions.insert(r.regions.end(), regions->begin(), regions->end());
  }
  return {};
}

// What the engine sends from inside UCX's callbacks starts once UCX has returned (HeldPost). A
// send started here may lead to more (a failed piece's Cancel): they queue behind, in order.
unsigned Routes::progressWorkers() {
  unsigned n = 0;
  holding_ = true;
  for (Context& c : contexts_) n += c.dev->progress();
  for (size_t i = 0; i < held_.size(); ++i) start(HeldPost(held_[i]));  // (held_ may grow)
  held_.clear();
  holding_ = false;
  return n;
}

bool Routes::armWorkers() {
  for (Context& c : contexts_)
    for (size_t i = 0; i < c.dev->rails(); ++i)
      if (!c.dev->worker(i).arm()) return false;
  return true;
}

void Routes::abandonWorkers() {
  for (Context& c : contexts_)
    for (size_t i = 0; i < c.dev->rails(); ++i) {
      c.dev->rail(i).worker.abandon();
      c.dev->rail(i).context.abandon();
    }
}

// Pieces that waited for room on a lane go out now (outside UCX callbacks). An ordered one-lane
// class binds every piece at once, so without an unordered or multi-lane class nothing waits.
void Routes::pumpLanes() {
  if (!queuedLanes_) return;
  peers_.forEach([this](Peer& p) {
    if (p.phase != Peer::Phase::kReady) return;
    for (auto& l : p.lanes) {
      if (l && !l->idle())
        l->pump([this](transport::LanePiece* q, ucx::Endpoint& ep) {
          postPiece(static_cast<PieceOp*>(q), ep);
        });
    }
  });
}

// ---- the Link ---------------------------------------------------------------------------------

std::string Routes::reach(uint64_t peer, size_t route) {
  Peer* p = peers_.byToken(peer);
  if (p == nullptr) return "peer " + std::to_string(peer) + " is not connected";
  auto lanes = lanesTo(*p, route);
  return lanes ? std::string() : lanes.error().message;
}

void Routes::sendControl(uint64_t peer, const Control& m, int route) {
  Peer* p = peers_.byToken(peer);
  if (p == nullptr || !p->ctrl) return;
  // The route's first lane (behind its pieces), or the control lane.
  transport::Lanes* lanes = p->ctrl.get();
  if (route >= 0)
    if (auto own = lanesTo(*p, static_cast<size_t>(route))) lanes = *own;
  sendOn(*p, m, lanes->endpoint(0));
}

void Routes::sendPiece(uint64_t peer, size_t route, const PieceHeader& h, const uint8_t* src,
                       uint64_t n, uint64_t xfer, MemoryType srcType) {
  PieceOp* op = pieceOps_.take();
  *op = PieceOp{};
  op->done = &Routes::onPieceSent;
  op->routes = this;
  op->xfer = xfer;
  op->attempt = h.attempt;
  op->peer = peer;
  op->route = route;
  op->addr = const_cast<uint8_t*>(src);  // read only: UCX sends from it
  op->size = n;
  op->memType = ucx::ucxMemoryType(srcType, driver_);
  Peer* p = peers_.byToken(peer);
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

void Routes::sendEager(uint64_t peer, size_t route, const Offer& m, std::span<const Extent> src,
                       uint64_t xfer) {
  Peer* p = peers_.byToken(peer);
  auto lanes = p == nullptr || !p->ctrl ? Result<transport::Lanes*>(Status::kNotFound, "") : lanesTo(*p, route);
  if (!lanes) {
    proto_->pieceSent(xfer, false);  // at once, as sendPiece does (the protocol holds an op)
    return;
  }
  ControlOp* op = controlOps_.take();
  op->routes = this;
  op->done = &Routes::onEagerSent;
  op->xfer = xfer;
  op->peer = peer;
  encodeInto(m, &op->bytes);  // the AM header: the peer's token, then the offer's frame
  op->bytes.insert(op->bytes.begin(), reinterpret_cast<const uint8_t*>(&p->remoteToken),
                   reinterpret_cast<const uint8_t*>(&p->remoteToken) + sizeof p->remoteToken);
  op->iov.clear();
  for (const Extent& b : src) op->iov.push_back({b.addr, b.length});
  post({HeldPost::Kind::kEager, &(*lanes)->endpoint(0), op});
}

void Routes::onEagerSent(ucx::Op* o, ucs_status_t st) {
  auto* op = static_cast<ControlOp*>(o);
  Routes* r = op->routes;
  const uint64_t xfer = op->xfer;
  if (r->proto_ == nullptr) return r->controlOps_.give(op);  // detached: the engine is gone
  // With rail failover an offer lost with its rail is no failure: it is repeated until answered.
  const Peer* p = r->peers_.find(op->peer);
  const bool failsOver = p != nullptr && p->failsOver();
  r->controlOps_.give(op);
  r->proto_->pieceSent(xfer, st == UCS_OK || failsOver);
  r->events_.changed();
}

void Routes::fetch(void* descriptor, uint8_t* dst, uint64_t n, uint64_t xfer, uint32_t attempt,
                   MemoryType dstType) {
  PieceOp* op = pieceOps_.take();
  *op = PieceOp{};
  op->done = &Routes::onPieceFetched;
  op->routes = this;
  op->xfer = xfer;
  op->attempt = attempt;
  op->addr = dst;
  op->size = n;
  op->memType = ucx::ucxMemoryType(dstType, driver_);
  const ucs_status_t st = fetchWorker_->amRecvData(descriptor, dst, n, op, op->memType);
  if (st != UCS_INPROGRESS) onPieceFetched(op, st);
}

void Routes::post(const HeldPost& h) {
  if (holding_)
    held_.push_back(h);
  else
    start(h);
}

void Routes::start(const HeldPost& h) {
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
        const Peer* p = peers_.find(op->peer);
        PACT_WARN("engine %s: control message to %s failed: %s", name_.c_str(),
                  p == nullptr ? "a closed peer" : p->name.c_str(), ucs_status_string(st));
      }
      controlOps_.give(op);
      return;
    }
  }
}

void Routes::postPiece(PieceOp* op, ucx::Endpoint& ep) {
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

void Routes::onPieceSent(ucx::Op* o, ucs_status_t st) {
  auto* op = static_cast<PieceOp*>(o);
  Routes* r = op->routes;
  if (r->proto_ == nullptr) return r->pieceOps_.give(op);  // detached: the engine is gone
  op->status = st == UCS_OK ? Status::kOk : ucx::toStatus(st);
  Peer* p = r->peers_.find(op->peer);
  if (p != nullptr && op->route < p->lanes.size() && p->lanes[op->route])
    p->lanes[op->route]->completed(*op);
  if (p != nullptr && op->posted && r->railsTake(*p, op, st)) {
    r->events_.changed();
    return;
  }
  const uint64_t xfer = op->xfer;
  r->pieceOps_.give(op);
  // A piece withdrawn before it left (cancelled) is no delivery failure.
  r->proto_->pieceSent(xfer, st == UCS_OK || st == UCS_ERR_CANCELED);
  r->events_.changed();
}

void Routes::onPieceFetched(ucx::Op* o, ucs_status_t st) {
  auto* op = static_cast<PieceOp*>(o);
  Routes* r = op->routes;
  const uint64_t xfer = op->xfer;
  const uint32_t attempt = op->attempt;
  uint8_t* dst = op->addr;
  const uint64_t length = op->size;
  r->pieceOps_.give(op);
  if (r->proto_ == nullptr) return;  // detached: the engine is gone
  // A fetch that failed with its rail: the sender sends the piece again over another.
  const Transfer* x = st == UCS_OK ? nullptr : r->proto_->find(xfer);
  const Peer* p = x == nullptr ? nullptr : r->peers_.find(x->peer);
  if (p != nullptr && p->failsOver())
    r->proto_->pieceLost(xfer, attempt, dst);
  else
    r->proto_->pieceFetched(xfer, attempt, dst, length, st == UCS_OK);
  r->events_.changed();
}

void Routes::onControlSent(ucx::Op* o, ucs_status_t) {
  auto* op = static_cast<ControlOp*>(o);
  op->routes->controlOps_.give(op);
}

void Routes::sendOn(Peer& p, const Control& m, ucx::Endpoint& ep) {
  ControlOp* op = controlOps_.take();
  op->routes = this;
  op->done = &Routes::onControlSent;
  encodeInto(m, &op->bytes);
  op->token = p.remoteToken;
  op->peer = p.id;
  post({HeldPost::Kind::kControl, &ep, op});
}

ucx::AmVerdict Routes::onControlAm(void* arg, const ucx::AmMessage& msg) {
  Routes* r = static_cast<AmSource*>(arg)->routes;
  uint64_t token = 0;
  if (msg.headerLength != sizeof token || msg.rendezvous) {
    PACT_WARN("engine %s: malformed control message dropped", r->name_.c_str());
    return ucx::AmVerdict::kRefuse;
  }
  std::memcpy(&token, msg.header, sizeof token);
  Peer* p = r->peers_.find(token);
  if (p == nullptr || p->phase == Peer::Phase::kLost) return ucx::AmVerdict::kDone;  // a closed connection
  auto m = decode(std::span(static_cast<const uint8_t*>(msg.data), msg.length), &r->spareAdvertise_);
  if (!m.ok()) {
    PACT_WARN("engine %s: control message from %s refused: %s", r->name_.c_str(),
              p->name.c_str(), m.error().message.c_str());
    return ucx::AmVerdict::kDone;
  }
  if (std::holds_alternative<Wired>(*m)) {
    // The peer's side is wired up (it may be, before its Hello's answer reached this side). When
    // this side's is too, the peer is ready now, before any message it sends once it is (those
    // follow its Wired on this endpoint).
    p->wiredThere = true;
    if (p->wiredHere) r->peers_.wiredUp(*p);
    r->events_.changed();
    return ucx::AmVerdict::kDone;
  }
  if (!p->connected()) return ucx::AmVerdict::kDone;  // its Hello not read here yet
  r->proto_->onControl(p->id, *m);
  if (auto* a = std::get_if<Advertise>(&*m)) r->spareAdvertise_ = std::move(*a);  // for the next one
  r->events_.changed();
  return ucx::AmVerdict::kDone;
}

// An eager offer: the header is the sender's token of the connection and the offer's frame,
// the data every byte of the transfer (never rendezvous; one that came so is dropped by UCX, the
// offer stands and the bytes come again as pieces).
ucx::AmVerdict Routes::onEagerAm(void* arg, const ucx::AmMessage& m) {
  Routes* r = static_cast<AmSource*>(arg)->routes;
  uint64_t token = 0;
  if (m.headerLength < sizeof token) {
    PACT_WARN("engine %s: malformed eager offer dropped", r->name_.c_str());
    return ucx::AmVerdict::kDone;
  }
  std::memcpy(&token, m.header, sizeof token);
  Peer* p = r->peers_.byToken(token);
  if (p == nullptr) return ucx::AmVerdict::kDone;  // from a connection already closed
  const auto* h = static_cast<const uint8_t*>(m.header);
  auto c = decode(std::span(h + sizeof token, m.headerLength - sizeof token));
  const Offer* offer = c.ok() ? std::get_if<Offer>(&*c) : nullptr;
  if (offer == nullptr || (offer->flags & kOfferEager) == 0) {
    PACT_WARN("engine %s: eager offer from %s refused: %s", r->name_.c_str(), p->name.c_str(),
              c.ok() ? "not an eager offer" : c.error().message.c_str());
    return ucx::AmVerdict::kDone;
  }
  r->proto_->onEager(p->id, *offer, m.rendezvous ? nullptr : static_cast<const uint8_t*>(m.data),
                     m.rendezvous ? 0 : m.length);
  r->events_.changed();
  return ucx::AmVerdict::kDone;
}

ucx::AmVerdict Routes::onPieceAm(void* arg, const ucx::AmMessage& m) {
  auto* src = static_cast<AmSource*>(arg);
  Routes* r = src->routes;
  auto h = decodePiece(std::span(static_cast<const uint8_t*>(m.header), m.headerLength));
  if (!h.ok()) {
    PACT_WARN("engine %s: data piece refused: %s", r->name_.c_str(), h.error().message.c_str());
    return ucx::AmVerdict::kRefuse;
  }
  Peer* p = r->peers_.byToken(h->token);
  if (p != nullptr && p->rails.active()) p->rails.heard(src->rail);
  r->fetchWorker_ = src->worker;
  const PieceVerdict v =
      r->proto_->onPiece(p == nullptr ? 0 : p->id, *h, m.data, m.length, m.rendezvous, m.data);
  r->fetchWorker_ = nullptr;
  return v == PieceVerdict::kRefuse ? ucx::AmVerdict::kRefuse : ucx::AmVerdict::kDone;
}

}  // namespace pact::engine
