// listen / connect / accept over the process's sessions (transport/session.h):
//   connector                               listener
//   [session to the listener's process: made once per pair of processes, then shared]
//   OPEN{listen id, channel, CommShape}     ->  checks the listen id
//                                          <- OPENED{CommAccept: tag space, rail addresses}
//                                             | OPEN_REFUSED
// connect and accept each step their side and return a null comm until done, so both may be
// called alternately from one thread (NCCL's GDR probe).
#include <cstring>

#include "common/log.h"
#include "net/contract.h"
#include "net/fence.h"
#include "net/net.h"
#include "transport/priority.h"

namespace pact::net {

namespace {

constexpr size_t kScratchOffset = 64;  // where connect keeps its state pointer inside the handle
static_assert(kScratchOffset >= wire::kHandleAddressBytes &&
              kScratchOffset + sizeof(void*) <= wire::kHandleSize);

}  // namespace

class ListenComm {
 public:
  static constexpr uint32_t kMagic = 0x4e54534c;  // "LSTN"
  uint32_t magic = kMagic;
  std::shared_ptr<Hub> hub;
  std::shared_ptr<Sessions> sessions;
  uint64_t listenId = 0;
  int trafficClass = -1;  // the class listen was called with: its receive comms count there
  SetupClock clock;  // PACT_DIAG: the accept calls since the last comm it gave
  ~ListenComm() { magic = 0; }
};

struct ConnectState {
  std::shared_ptr<Hub> hub;
  uint64_t channel = 0;
  TimePoint start = now();
  ChannelConfig cfg;
  SetupClock clock;  // PACT_DIAG: the calls before this one
  std::shared_ptr<transport::RailProber> prober;  // rail failover: answers the peer's probes
  std::vector<wire::ProbeAddress> probes;         // this side's, as offered
  std::shared_ptr<transport::AckSink> acks;       // where the receiver acknowledges messages
};

std::shared_ptr<transport::RailProber> Net::railProber(DeviceCtx& dev, std::vector<wire::ProbeAddress>* probes,
                                                      std::vector<wire::ProbeAddress>* acks) {
  if (!transport::failoverWanted(dev.rails(), params_.rail_timeout)) return nullptr;
  std::shared_ptr<transport::RailProber> prober;
  {
    std::lock_guard lock(hubsMu_);
    if (!prober_) prober_ = transport::RailProber::acquire();
    prober = prober_;
  }
  *probes = transport::probesOf(dev, *prober, params_.rail_timeout, acks);
  return probes->empty() ? nullptr : prober;
}

Status Net::listen(int dev, int trafficClass, void* handle, ListenComm** out) {
  *out = nullptr;
  auto h = hub(dev, trafficClass);
  if (!h.ok()) {
    PACT_WARN("listen on device %d: %s", dev, h.error().message.c_str());
    return h.status();
  }
  const ucx::DeviceInfo& info = (*h)->dev().info();
  if (info.ipAddress.empty()) {
    PACT_WARN("listen on %s: the device has no IP address for the connection bootstrap",
              info.name.c_str());
    return Status::kSystemError;
  }
  auto lh = sessions_->listen(info.ipAddress);
  if (!lh.ok()) {
    PACT_WARN("listen on %s (%s): %s", info.name.c_str(), info.ipAddress.c_str(),
              lh.error().message.c_str());
    return lh.status();
  }
  auto lc = std::make_unique<ListenComm>();
  lc->hub = *h;
  lc->sessions = sessions_;
  lc->listenId = lh->listenId;
  lc->trafficClass = trafficClass;
  wire::encodeHandle(*lh, static_cast<uint8_t*>(handle));
  PACT_DEBUG("listen on %s: %s port %u, listen id %#llx", info.name.c_str(),
             info.ipAddress.c_str(), lh->port, static_cast<unsigned long long>(lh->listenId));
  *out = lc.release();
  return Status::kOk;
}

Status Net::connect(int dev, int trafficClass, void* handle, SendComm** out) {
  *out = nullptr;
  const TimePoint entered = now();
  auto* bytes = static_cast<uint8_t*>(handle);
  ConnectState* st = nullptr;
  std::memcpy(&st, bytes + kScratchOffset, sizeof st);
  auto finish = [&](Status s) {
    if (st != nullptr && s != Status::kOk && st->channel != 0) sessions_->forget(st->channel);
    delete st;
    st = nullptr;
    std::memcpy(bytes + kScratchOffset, &st, sizeof st);
    return s;
  };
  if (st == nullptr) {
    auto h = wire::decodeHandle(std::span<const uint8_t>(bytes, wire::kHandleSize));
    if (!h.ok()) {
      PACT_WARN("connect: bad handle: %s", h.error().message.c_str());
      return h.status();
    }
    auto hb = hub(dev, trafficClass);
    if (!hb.ok()) {
      PACT_WARN("connect on device %d: %s", dev, hb.error().message.c_str());
      return hb.status();
    }
    const ChannelConfig cfg = channelFor(trafficClass);
    PACT_DEBUG("connect on %s: traffic class %s, profile %s", (*hb)->dev().info().name.c_str(),
               cfg.className.c_str(),
               params_.classes.forNccl(trafficClass).describe().c_str());
    wire::CommShape shape;
    shape.unordered = cfg.ordered ? 0 : 1;
    shape.lanes = static_cast<uint8_t>(cfg.ordered ? 1 : cfg.lanes);
    shape.chunk = cfg.chunk;
    shape.rails = static_cast<uint8_t>((*hb)->dev().rails());
    shape.contract = offerOf(params_.classes.forNccl(trafficClass));
    std::vector<wire::ProbeAddress> probes;
    auto prober = railProber((*hb)->dev(), &probes, &shape.ackTo);
    shape.probes = probes;
    std::shared_ptr<transport::AckSink> sink = prober ? prober->ackSink() : nullptr;
    shape.ackSink = sink ? sink->id() : 0;
    auto channel = sessions_->open(*h, wire::encode(shape));
    if (!channel.ok()) {
      PACT_WARN("connect: %s", channel.error().message.c_str());
      return channel.status();
    }
    st = new ConnectState{*hb, *channel, now(), cfg, SetupClock{}, std::move(prober), std::move(probes), std::move(sink)};
    std::memcpy(bytes + kScratchOffset, &st, sizeof st);
  }
  auto opened = sessions_->opened(st->channel);
  if (!opened.ok()) {
    st->channel = 0;  // the sessions forgot it already
    PACT_WARN("connect: %s", opened.error().message.c_str());
    return finish(opened.status());
  }
  if (!opened.value()) {
    if (now() - st->start <= params_.peer_timeout) {
      st->clock.returned(entered);
      return Status::kOk;
    }
    PACT_WARN("connect to %s: no answer within PACT_PEER_TIMEOUT",
              sessions_->peerName(st->channel).c_str());
    return finish(Status::kTimeout);
  }
  auto o = wire::decodeCommAccept((*opened)->payload);
  if (!o.ok()) {
    PACT_WARN("connect: %s", o.error().message.c_str());
    return finish(Status::kInvalidArgument);
  }
  const std::string peer = sessions_->peerName(st->channel);
  // The receiver decided the contract from both classes: the comm does what it says.
  ChannelConfig cfg = st->cfg;
  applyContract(o->contract, &cfg);
  const uint64_t peerProcess = sessions_->peerProcess(st->channel);
  std::lock_guard lock(st->hub->dev().mutex());
  auto comm = std::make_unique<SendComm>(st->hub, sessions_, st->channel, o->tagSpace, peer, cfg);
  if (cfg.credits != 0) comm->setCredits(credits_.budgetFor(cfg.className, peerProcess, cfg.credits));
  if (params_.classes.mixedPriorities()) comm->setGate(transport::PeerGate::forPeer(peerProcess));
  st->channel = 0;  // the comm owns it now
  transport::RailSet rails(st->hub->dev(), st->prober, st->probes, o->probes, params_.rail_timeout);
  if (!params_.trace_file.empty()) rails.trace("send comm to " + peer, 4 * static_cast<size_t>(params_.trace_events));
  comm->setRails(std::move(rails), o->probes.empty() ? nullptr : st->acks);
  if (Status s = comm->connectLanes(o->railAddresses); s != Status::kOk) {
    comm->shutdown();
    comm.reset();
    // As any close: the endpoints it let go of close in the background.
    if (auto reaper = st->hub->reaper()) reaper->add(st->hub);
    return finish(s);
  }
  // One line per comm at INFO (NCCL_DEBUG=INFO shows it, as NET/IB's connections).
  PACT_INFO("send comm %p connected to %s on %s: class %s (%s, %d lane(s), chunk %zu), tag space %#x",
            static_cast<void*>(comm.get()), peer.c_str(), st->hub->dev().info().name.c_str(),
            st->cfg.className.c_str(), st->cfg.ordered ? "ordered" : "unordered",
            st->cfg.ordered ? 1 : st->cfg.lanes, st->cfg.chunk, o->tagSpace);
  st->clock.returned(entered);
  comm->diag().setup = st->clock;
  comm->diag().setupTotal = now() - st->clock.first;
  *out = comm.release();
  return finish(Status::kOk);
}

Status Net::accept(ListenComm* lc, RecvComm** out) {
  *out = nullptr;
  if (lc == nullptr || lc->magic != ListenComm::kMagic) return Status::kInvalidArgument;
  const TimePoint entered = now();
  auto in = lc->sessions->nextOpen(lc->listenId);
  if (!in.ok()) {
    PACT_WARN("accept: %s", in.error().message.c_str());
    return in.status();
  }
  if (!in.value()) {
    lc->clock.returned(entered);
    return Status::kOk;
  }
  const transport::Sessions::Incoming& inc = **in;
  Hub& hub = *lc->hub;
  auto shape = wire::decodeCommShape(inc.open.payload);
  if (!shape.ok()) {
    PACT_WARN("accept from %s: %s", inc.peer.c_str(), shape.error().message.c_str());
    lc->sessions->refuseOpen(inc, wire::Refuse{wire::Field::kVersion, wire::kVersion, 0});
    return Status::kOk;  // the connector fails; this listen comm goes on
  }
  auto space = hub.tags()->take();
  if (!space.ok()) {
    PACT_WARN("accept from %s on %s: %s", inc.peer.c_str(), hub.dev().info().name.c_str(),
              space.error().message.c_str());
    lc->sessions->refuseOpen(inc, wire::Refuse{wire::Field::kCapacity, hub.tags()->capacity(), 0});
    return space.status();
  }
  // The contract: the stronger of the sender's class and listen's, and seals when this process
  // fences.
  const Profile& mine = params_.classes.forNccl(lc->trafficClass);
  const wire::Contract contract = decideContract(shape->contract, mine, Fence::process().active());
  // Rail failover when both sides offer it.
  std::vector<wire::ProbeAddress> probes;
  std::shared_ptr<transport::RailProber> prober;
  if (!shape->probes.empty() && shape->ackSink != 0 && shape->ackTo.size() == shape->probes.size())
    prober = railProber(hub.dev(), &probes);
  transport::RailSet rails(hub.dev(), prober, probes, shape->probes, params_.rail_timeout);
  if (!rails.active()) probes.clear();  // offered only when this side can watch and acknowledge
  auto channel = lc->sessions->acceptOpen(
      inc, wire::encode(wire::CommAccept{*space, hub.dev().addresses(), contract, probes}));
  if (!channel.ok()) {
    // The connector's process went away between its open and this accept: nothing to accept.
    hub.tags()->give(*space);
    PACT_INFO("accept: %s", channel.error().message.c_str());
    return Status::kOk;
  }
  // The sender's channel, with this process's PACT_FAULT (reject, lose_remote_done).
  ChannelConfig cfg = channelFor(-1);
  cfg.className = className(lc->trafficClass);
  cfg.ordered = shape->unordered == 0;
  cfg.lanes = shape->lanes;
  cfg.chunk = shape->chunk;
  // Each piece's receive is posted on every rail it may come on: those its lanes use, or, with
  // failover, every rail both sides have (a lane moves when its rail is out).
  cfg.rails = static_cast<int>(std::min<size_t>({probes.empty() ? shape->lanes : size_t{wire::kMaxRails},
                                                 shape->rails, hub.dev().rails()}));
  applyContract(contract, &cfg);
  std::lock_guard lock(hub.dev().mutex());
  auto* comm = new RecvComm(lc->hub, lc->sessions, *channel, *space, inc.peer, cfg);
  std::shared_ptr<transport::AckSource> acks =
      probes.empty() ? nullptr : prober->ackSource(shape->ackSink, rails.watches(), shape->ackTo);
  if (!params_.trace_file.empty()) rails.trace("recv comm from " + inc.peer, 4 * static_cast<size_t>(params_.trace_events));
  comm->setRails(std::move(rails), std::move(acks));
  lc->clock.returned(entered);
  comm->diag().setup = lc->clock;
  comm->diag().setupTotal = now() - lc->clock.first;
  lc->clock = SetupClock{};  // the next comm's calls start afresh
  PACT_INFO("recv comm %p accepted from %s on %s: class %s (%s), tag space %#x", static_cast<void*>(comm),
            inc.peer.c_str(), hub.dev().info().name.c_str(), cfg.className.c_str(),
            cfg.ordered ? "ordered" : "unordered", *space);
  *out = comm;
  return Status::kOk;
}

Status Net::closeListen(ListenComm* lc) {
  if (lc == nullptr) return Status::kOk;
  if (lc->magic != ListenComm::kMagic) return Status::kInvalidArgument;
  lc->sessions->unlisten(lc->listenId);
  delete lc;
  return Status::kOk;
}

}  // namespace pact::net
