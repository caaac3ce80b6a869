// Routes: what carries the engine's messages, and the protocol's Link on it (link.h). It owns the
// engine's transport::Fabric and its UCX contexts (one per distinct service of the engine
// classes, a worker per rail of the engine's device), the classes' routes (context, lanes,
// chunk), the lanes to each peer (kept in the peer's record, made at the handshake), the
// operation slabs, the active-message handlers, the sends held while UCX is inside its progress,
// and rail failover (the lanes moved off a rail that went out, what went over it sent again).
// Its one job: move the protocol's messages and pieces over UCX, and hand it what arrives.
//
// It finds peers in the PeerTable (and loses one whose every rail is out); everything else of a
// peer's handshake and liveness is the table's. Not synchronized: every call runs under the
// engine's lock, UCX callbacks inside progressWorkers() with it held. Files: routes.cpp
// (contexts, classes, progress and the held posts, the Link and its handlers), peer_lanes.cpp (a
// peer's lanes: made, wired up, failing, closed), failover.cpp (rail failover: lanes moved
// between rails, what went over a rail that went out sent again).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "cuda/driver.h"
#include "engine/control.h"
#include "engine/link.h"
#include "engine/peer.h"
#include "engine/types.h"
#include "transport/channel.h"
#include "transport/fabric.h"
#include "transport/lanes.h"
#include "transport/params.h"
#include "transport/rail_probe.h"
#include "transport/slab.h"
#include "transport/wire.h"
#include "ucx/worker.h"

namespace pact::engine {

inline constexpr unsigned kAmControl = 0x5043;  // active message ids on the engine's worker
inline constexpr unsigned kAmPiece = 0x5044;
inline constexpr unsigned kAmEager = 0x5045;  // an eager offer and its transfer's bytes

// What an engine class resolved to (pact-info prints it; tests assert it).
struct ClassRouteInfo {
  std::string name;       // "DEFAULT", "KV", ...
  std::string profile;    // Profile::describe()
  size_t context = 0;     // index among the engine's contexts (equal = shared)
  std::string service;    // the context's service key
  int lanes = 1;          // endpoints per peer (1 for an ordered class)
  uint64_t chunk = 0;     // piece size
};

struct PieceOp;
struct ControlOp;
struct AmSource;
class PeerTable;
class Protocol;

class Routes final : private Link {
 public:
  // An engine class: its profile, its context, the channel its lanes follow.
  struct Route {
    std::string name;
    Profile profile;
    size_t context = 0;
    transport::ChannelConfig channel;
  };
  // What the routes tell their owner (the engine).
  class Events {
   public:
    // Something a waiter may wait for happened (a completion, a message handed to the protocol).
    virtual void changed() = 0;

   protected:
    ~Events() = default;
  };

  // name, params, driver: the engine's (they outlive the routes).
  Routes(std::string name, const Params& params, const cuda::Driver& driver, PeerTable& peers, Events& events);
  ~Routes();
  Routes(const Routes&) = delete;
  Routes& operator=(const Routes&) = delete;

  // The fabric, a context per distinct service of the engine classes with its handlers, and the
  // rails' prober when failover is wanted.
  Result<void> open();
  // The protocol the Link hands what arrives to (before the first progress).
  void attach(Protocol& proto) { proto_ = &proto; }
  // The engine's teardown, before its protocol and peer table go (they are destroyed before the
  // routes): a send or fetch callback from then on (a worker's destruction ending what UCX still
  // held) only gives its op back. No message comes: nothing progresses the workers any more.
  void detach() { proto_ = nullptr; }
  Link& link() { return *this; }

  // ---- the classes ----
  const std::vector<Route>& list() const { return routes_; }  // DEFAULT, then the engine classes
  // The route of a class name (DEFAULT or an engine class, any case; others are DEFAULT).
  size_t routeFor(const char* trafficClass) const;
  // The route of an application's class name (NULL: DEFAULT); any name but DEFAULT or an engine
  // class (any case) is kInvalidArgument, naming the choices.
  Result<size_t> classRoute(const char* what, const char* trafficClass) const;
  std::vector<ClassRouteInfo> info() const;
  // Pieces sent so far on each lane of a class to p (empty before its first send; p null: empty).
  std::vector<transport::LaneStats> laneStats(const Peer* p, const std::string& cls) const;
  // The engine's first device's address (empty: none), what a wildcard listener publishes.
  std::string routableIp() const;
  // Registers memory on every rail of every context (its regions join r's).
  Result<void> registerMemory(const MemorySpec& spec, Registration& r);

  // ---- a peer's lanes ----
  // This engine's Hello to p (its workers' and rails' addresses), as a channel payload.
  std::vector<uint8_t> hello(const Peer& p, uint64_t epoch) const;
  // p's Hello came: on the side that connected, makes p's lanes (makeLanes) and starts their
  // wiring; the accepting side makes its own once p's Wired came (wired()).
  Result<void> connect(Peer& p);
  // Whether p is wired up on both sides: every endpoint's flush ended here (then this side's
  // Wired goes) and p's Wired came. An error: an endpoint failed while being wired up.
  Result<bool> wired(Peer& p);
  // Rail failover with p when both sides have rails to watch (peerProbes: its Hello's).
  void watchRails(Peer& p, const std::vector<wire::ProbeAddress>& peerProbes);
  // Closes p's lanes, forced: whatever UCX still has in flight with it fails.
  void closePeerEndpoints(Peer& p);

  // ---- progress (the engine's loop) ----
  // Every worker's progress; what was asked for inside it starts once it returned. The events.
  unsigned progressWorkers();
  // Arms every worker's event fd; false when events are pending already.
  bool armWorkers();
  template <class F>
  void forEachEventFd(F&& f) const {
    for (const Context& c : contexts_)
      for (int fd : c.eventFds) f(fd);
  }
  // Pieces that waited for room on a lane go out now.
  void pumpLanes();
  // Rail failover's look at every failed-over peer (nothing without failover).
  void checkRails();
  // Shutdown with UCX operations still pending: the workers and contexts are leaked, not destroyed.
  void abandonWorkers();

 private:
  // One UCX context of the engine and the event fds of its rails' workers.
  struct Context {
    std::shared_ptr<transport::DeviceCtx> dev;
    std::vector<int> eventFds;
  };
  // A UCX send held while UCX is inside its progress (holding_ below).
  struct HeldPost {
    enum class Kind : uint8_t { kControl, kPiece, kEager } kind;
    ucx::Endpoint* ep;  // lives until the hold ends: nothing closes endpoints inside progress
    ucx::Op* op;
  };

  // ---- the Link of the protocol and its handlers (routes.cpp) ----
  std::string reach(uint64_t peer, size_t route) override;
  void sendControl(uint64_t peer, const Control& m, int route) override;
  void sendPiece(uint64_t peer, size_t route, const PieceHeader& h, const uint8_t* src, uint64_t n,
                 uint64_t xfer, MemoryType srcType) override;
  void sendEager(uint64_t peer, size_t route, const Offer& m, std::span<const Extent> src,
                 uint64_t xfer) override;
  void fetch(void* descriptor, uint8_t* dst, uint64_t n, uint64_t xfer, uint32_t attempt,
             MemoryType dstType) override;
  void postPiece(PieceOp* op, ucx::Endpoint& ep);
  void sendOn(Peer& p, const Control& m, ucx::Endpoint& ep);
  // Starts h now, or after UCX's progress returned when called from inside it (holding_).
  void post(const HeldPost& h);
  void start(const HeldPost& h);
  static void onPieceSent(ucx::Op* op, ucs_status_t st);
  static void onPieceFetched(ucx::Op* op, ucs_status_t st);
  static void onControlSent(ucx::Op* op, ucs_status_t st);
  static void onEagerSent(ucx::Op* op, ucs_status_t st);
  static ucx::AmVerdict onEagerAm(void* arg, const ucx::AmMessage& m);
  static ucx::AmVerdict onControlAm(void* arg, const ucx::AmMessage& m);
  static ucx::AmVerdict onPieceAm(void* arg, const ucx::AmMessage& m);

  // ---- a peer's lanes and rail failover (failover.cpp) ----
  // p's control lane, to the worker of its Hello, and every class's lanes to it (those it can
  // have: a class without a context there says so at first use); starts their wiring.
  Result<void> makeLanes(Peer& p);
  // The lanes of route r to p, made at the first call (the handshake); an error when the peer
  // has no context of the route's service or an endpoint cannot be made.
  Result<transport::Lanes*> lanesTo(Peer& p, size_t r);
  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  // f(lanes, context, name) for each of a peer's lane sets, once: the control lane, then each
  // class's lanes (a class of one lane may share the control lane). No allocation: it runs on
  // every progress of a failed-over peer.
  template <class F>
  void forEachLaneSet(Peer& p, F&& f);
  void openRails();  // the prober and this side's probe addresses, when failover is wanted
  // A piece UCX ended (posted: it was handed to UCX): whether failover keeps it (completed: until
  // its transfer settles; failed with its rail: parked until the lanes moved).
  bool railsTake(Peer& p, PieceOp* op, ucs_status_t st);
  void pruneSent(Peer& p);
  void dropKept(Peer& p);
  void checkRails(Peer& p);
  // Lanes off their rail: to a live one (failover) or home (recovery); what moved, for the log
  // (empty: nothing). *left gains a bit for each rail a lane left.
  std::string moveLanes(Peer& p, unsigned* left);
  const std::vector<std::vector<uint8_t>>* remoteRails(const Peer& p, size_t context) const;

  const std::string name_;  // the engine's
  const Params& params_;    // the engine's
  const cuda::Driver& driver_;  // PACT_CUDA_DRIVER's (GPU blocks)
  PeerTable& peers_;
  Events& events_;
  Protocol* proto_ = nullptr;  // attach(); null again after detach()
  // Operation slabs outlive the fabric's workers (declared first): UCX completes into them.
  transport::Slab<PieceOp> pieceOps_;
  transport::Slab<ControlOp> controlOps_;
  std::vector<std::unique_ptr<AmSource>> amSources_;
  std::unique_ptr<transport::Fabric> fabric_;
  std::vector<Context> contexts_;
  std::vector<Route> routes_;  // DEFAULT, then ClassTable::engineClassNames()
  size_t ctrlRoute_ = 0;
  bool queuedLanes_ = false;  // a class is unordered or has several lanes (pieces may wait)
  ucx::Worker* fetchWorker_ = nullptr;  // the worker of the active message being handled
  // UCX sends asked for while UCX is inside its progress wait here and start once it returned
  // (progressWorkers): UCX 1.13's tcp transport aborts when a send from inside its batch of socket
  // events meets a dead peer whose event is still queued in that batch (tcp_iface.c:307).
  bool holding_ = false;
  std::vector<HeldPost> held_;  // keeps its capacity: no allocation per progress
  std::shared_ptr<transport::RailProber> prober_;  // rail failover: answers the peers' probes
  std::vector<wire::ProbeAddress> probes_;           // this side's rails' probe addresses
  Advertise spareAdvertise_;  // the last Advertise decoded: the next one reuses its vectors
};

template <class F>
void Routes::forEachLaneSet(Peer& p, F&& f) {
  if (p.ctrl) f(*p.ctrl, routes_[ctrlRoute_].context, static_cast<const char*>("control"));
  for (size_t r = 0; r < p.lanes.size(); ++r)
    if (p.lanes[r] && p.lanes[r] != p.ctrl) f(*p.lanes[r], routes_[r].context, routes_[r].name.c_str());
}

}  // namespace pact::engine
