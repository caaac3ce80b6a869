// The transfer engine (ARCHITECTURE.md section 5; docs/engine.md): epoch-aware commit of block
// transfers between engines, with receiver credits, deadlines, retries and exactly-once commit.
//
// One Engine = a transport::Fabric (the transport core under both faces) with one context per
// distinct service of the engine classes (DEFAULT, KV, A2A, CTRL, CKPT: classes whose services
// are equal share one), each with a worker per rail of the engine's device (several devices of
// PACT_NET_DEVICES are fused into one virtual device, a rail each); a listening control socket;
// and its peers. Every public method takes the engine's one lock; UCX callbacks run inside
// progress() with the lock held, so the engine's state has exactly one writer at a time.
// Failures return a Code and leave a message for lastError() (thread-local), which the C API
// hands out as pact_last_error().
//
// The data path: a transfer's class picks its context, its piece size (`chunk`) and its lanes:
// an ordered class sends its pieces in order over one endpoint, an unordered class spreads them
// over `lanes` endpoints (one per rail, round the rails) with the core's adaptive steering. A
// piece is a UCP active message whose header names the transfer, attempt, block and offset; the
// receiver range-checks each one against what it advertised before any byte moves, and lands it
// itself (memcpy for eager, a rendezvous receive straight into the block otherwise). No remote
// key is ever handed out, so revoking access is removing the transfer from the receiver's
// table; a transfer is final only when no receive still writes into its blocks. Control
// messages travel on the CTRL class's context; a transfer's Done on its class's first lane
// (behind its pieces). Files: engine.cpp (lifecycle, progress, bookkeeping), routes.cpp
// (contexts, lanes, the UCX data path), peers.cpp (connections, handshake, control messages),
// receiver.cpp, sender.cpp, group.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/params.h"
#include "common/scoped_fd.h"
#include "engine/control.h"
#include "engine/credits.h"
#include "engine/dedup.h"
#include "engine/transfer.h"
#include "telemetry/trace.h"
#include "transport/control_socket.h"
#include "transport/fabric.h"
#include "transport/lanes.h"
#include "transport/slab.h"
#include "transport/wire.h"
#include "ucx/reg_cache.h"
#include "ucx/worker.h"

namespace pact::engine {

inline constexpr unsigned kAmControl = 0x5043;  // active message ids on the engine's worker
inline constexpr unsigned kAmPiece = 0x5044;

// Message of the last failing engine call on this thread.
const std::string& lastError();
// Records msg as this thread's last error and returns c.
Code fail(Code c, std::string msg);
const char* codeName(Code c);

struct Registration {
  uint8_t* addr = nullptr;
  uint64_t length = 0;
  // From the core's registration caches: one region per rail of each of the engine's contexts.
  std::vector<std::shared_ptr<ucx::Region>> regions;
  int users = 0;  // unreleased transfers with a block in it
};

// What the application passes for a block (layout of pact_block_t).
struct BlockRef {
  Registration* mr = nullptr;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct EngineConfig {
  std::string name;
  std::string listenIp;  // empty: do not listen
  uint16_t listenPort = 0;
  uint64_t modelEpoch = 0;
  uint64_t creditBudget = 0;  // 0 = unlimited (as PACT_CREDIT_UNLIMITED)
  bool progressThread = false;
};

struct XferInfo {
  State state = State::kAllocated;
  Code result = Code::kInProgress;
  bool final = false;
  uint32_t retries = 0;
  TransferKey key;
  uint64_t peer = 0;
  uint64_t bytes = 0;
};

struct Stats {
  uint64_t committed = 0, aborted = 0, retried = 0, duplicatesDropped = 0, staleRejected = 0,
           outOfRange = 0, checksumFailures = 0, openRegistrations = 0,
           openTransfers = 0, stagedBytes = 0, peakStagedBytes = 0, creditBudget = 0,
           creditStallNs = 0, bytesReceived = 0, bytesSent = 0, faultsInjected = 0;
};

// Called once per verified transfer with the application's destination blocks; true commits.
using CommitHook = std::function<bool(uint64_t xfer, const TransferKey& key, uint64_t from,
                                      std::span<const BlockRef> blocks)>;

class Group;

// What an engine class resolved to (pact-info prints it; tests assert it).
struct ClassRouteInfo {
  std::string name;       // "DEFAULT", "KV", ...
  std::string profile;    // Profile::describe()
  size_t context = 0;     // index among the engine's contexts (equal = shared)
  std::string service;    // the context's service key
  int lanes = 1;          // endpoints per peer (1 for an ordered class)
  uint64_t chunk = 0;     // piece size
};

class Engine {
 public:
  // params: the effective PACT_* configuration (the C API passes Params::global()).
  static Code create(const EngineConfig& config, const Params& params, std::unique_ptr<Engine>* out);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Code address(std::string* out);
  Code progress(int timeoutMs);

  Code connect(const std::string& address, int timeoutMs, uint64_t* peer);
  Code waitPeer(const std::string& name, int timeoutMs, uint64_t* peer);
  Code peerCredit(uint64_t peer, uint64_t* budget, uint64_t* inUse);
  // kOk for a ready peer; kNotFound (unknown) or kPeerLost, with the message.
  Code checkPeer(uint64_t peer);

  Code registerMemory(void* addr, size_t length, Registration** out);
  Code deregister(Registration* mr);

  Code setEpoch(uint64_t epoch);
  void setCommitHook(CommitHook hook);
  Code setCredit(uint64_t peer, uint64_t budget);
  Code expect(const TransferKey& key, std::span<const BlockRef> blocks, uint64_t deadlineUs,
              const char* trafficClass, uint64_t* xfer);
  Code send(uint64_t peer, const TransferKey& key, std::span<const BlockRef> blocks,
            uint64_t deadlineUs, const char* trafficClass, uint64_t* xfer);

  Code query(uint64_t xfer, XferInfo* info);
  Code wait(uint64_t xfer, int timeoutMs, XferInfo* info);
  Code release(uint64_t xfer);

  Stats stats();
  // Every engine class and the context it runs on, DEFAULT first.
  std::vector<ClassRouteInfo> routes() const;
  // Pieces sent so far on each lane of a class to a peer (empty before its first send).
  std::vector<transport::LaneStats> laneStats(uint64_t peer, const std::string& cls);
  size_t traceRead(uint64_t* cursor, telemetry::TraceEvent* out, size_t max);

  // For Group (group.cpp): the lock and the blocking wait.
  std::mutex& mutex() { return mu_; }
  // Waits with the lock held (by `lock`) until pred() or the timeout; progresses the engine itself
  // when it has no progress thread. False on timeout.
  bool waitFor(std::unique_lock<std::mutex>& lock, int timeoutMs, const std::function<bool()>& pred);
  Code expectLocked(const TransferKey& key, std::span<const BlockRef> blocks, uint64_t deadlineUs,
                    const char* trafficClass, uint64_t* xfer);
  Code sendLocked(uint64_t peer, const TransferKey& key, std::span<const BlockRef> blocks,
                  uint64_t deadlineUs, const char* trafficClass, uint64_t* xfer);
  Code releaseLocked(uint64_t xfer);
  const Transfer* find(uint64_t xfer) const;
  void markGroupChunk(uint64_t xfer) { xfers_.at(xfer)->groupChunk = true; }

 private:
  struct Peer;
  struct PieceOp;
  struct ControlOp;
  struct AmSource;
  // One UCX context of the engine and the event fds of its rails' workers.
  struct Context {
    std::shared_ptr<transport::DeviceCtx> dev;
    std::vector<int> eventFds;
  };
  // An engine class: its profile, its context, the channel its lanes follow.
  struct Route {
    std::string name;
    Profile profile;
    size_t context = 0;
    transport::ChannelConfig channel;
  };
  // kMissing: Done came but pieces of the attempt did not (dropped); a grace period, then retry.
  // kOffer: an offer waiting for its expect reached the sender's deadline.
  enum class TimerKind : uint8_t { kDeadline, kResendDone, kHandshake, kMissing, kOffer };
  struct Timer {
    uint64_t id;  // transfer id, or peer id for kHandshake
    TimerKind kind;
    uint32_t attempt = 0;  // kMissing, kResendDone: the attempt it was armed for (others: stale)
  };

  Engine(const EngineConfig& config, const Params& params);
  Code init();

  // ---- routes (routes.cpp): contexts, lanes, the UCX data path ----
  Code openContexts();
  // The route of a class name (DEFAULT or an engine class, any case; others are DEFAULT).
  size_t routeFor(const char* trafficClass) const;
  unsigned progressWorkers();
  bool armWorkers();
  void pumpLanes();
  // The lanes of route r to p, created on first use; nullptr (and lastError) when the peer has
  // no context of the route's service.
  transport::Lanes* lanesTo(Peer& p, size_t r);
  void closePeerEndpoints(Peer& p);
  void postPiece(PieceOp* op, ucx::Endpoint& ep);
  static void onPieceSent(ucx::Op* op, ucs_status_t st);
  static void onPieceReceived(ucx::Op* op, ucs_status_t st);
  static void onControlSent(ucx::Op* op, ucs_status_t st);
  // Sends a control message on ep (default: the peer's control endpoint).
  void sendControl(Peer& p, const Control& m, ucx::Endpoint* via = nullptr);
  void shutdown();

  // ---- progress (engine.cpp) ----
  int progressLocked();
  void sleepLocked(std::unique_lock<std::mutex>& lock, int timeoutMs);
  void wake();
  void runProgressThread();
  int fireTimers();
  void addTimer(TimePoint at, uint64_t id, TimerKind kind, uint32_t attempt = 0);

  // ---- peers (engine.cpp) ----
  int acceptConnections();
  int pollPeers();
  Code startPeer(transport::ControlSocket socket, bool outbound, uint64_t* id);
  // PACT_FAULT: true (and counted) when a fault of probability p strikes; one branch when unset.
  bool inject(double p) {
    if (!fault_.active() || !dice_.roll(p)) return false;
    ++stats_.faultsInjected;
    return true;
  }
  Code onHello(Peer& p, const Hello& hello);
  Code onProof(Peer& p, const Proof& proof);
  Code connectEndpoint(Peer& p);
  void sendHandshake(Peer& p, const Control& m);
  void refuse(Peer& p, wire::Field field, uint64_t ours, uint64_t theirs, const std::string& why);
  void peerLost(Peer& p, const std::string& why);
  // The ready peer with this id (our token for it), or nullptr.
  Peer* peerByToken(uint64_t token);
  static ucx::AmVerdict onControlAm(void* arg, const ucx::AmMessage& m);
  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  void dispatch(Peer& p, const Control& m);

  // ---- transfers (engine.cpp) ----
  // peer: the receiver (sender side), 0 until an offer matches (receiver side).
  Transfer& newTransfer(Role role, const TransferKey& key, std::span<const BlockRef> blocks,
                        size_t route, uint64_t peer, uint64_t deadlineUs);
  Code checkBlocks(std::span<const BlockRef> blocks, uint64_t* bytes);
  bool step(Transfer& x, Event e);
  void settle(Transfer& x, Event e, Code result);
  void maybeFinish(Transfer& x);
  void opDone(uint64_t xferId);

  // ---- receiver (receiver.cpp) ----
  void onOffer(Peer& p, const Offer& m);
  void onDone(Peer& p, const Done& m);
  void match(Transfer& x, Peer& p, uint64_t offerDeadlineUs);
  void advertiseWaiting();
  void advertise(Transfer& x);
  void sendVerdict(uint64_t peer, const TransferKey& key, Outcome o, Reason r, uint32_t attempt = 0);
  static ucx::AmVerdict onPieceAm(void* arg, const ucx::AmMessage& m);
  ucx::AmVerdict onPiece(const PieceHeader& h, const ucx::AmMessage& m, ucx::Worker& worker);
  void pieceLanded(uint64_t xferId, uint32_t attempt, uint8_t* dst, uint64_t length, bool ok);
  void checkMissing(Transfer& x);
  void tryComplete(Transfer& x);
  bool retryAttempt(Transfer& x, Event why, Reason reason);
  void receiverAbort(Transfer& x, Event e, Code result, Reason r);
  void releaseCredit(Transfer& x);
  void rememberCanceled(const TransferKey& k);
  bool classCreditFits(const Transfer& x) const;

  // ---- sender (sender.cpp) ----
  void onAdvertise(Peer& p, const Advertise& m);
  void onVerdict(Peer& p, const Verdict& m);
  void onEpochChange(Peer& p, const EpochChange& m);
  void onCancel(Peer& p, const Cancel& m);
  // The sender's application gave the transfer up: before its Done left the receiver is told
  // (Cancel) and never commits; after, the verdict still settles it (a release cannot un-commit).
  // waitVerdict: a release (the transfer stays open until its verdict); a destroy settles now.
  void senderWithdraw(Transfer& x, Code result, bool waitVerdict);
  void postPieces(Transfer& x);
  void sendDone(Transfer& x);
  void pieceSent(uint64_t xferId, bool ok);

  Transfer* openReceiver(const TransferKey& key);
  // Calls fn on every live transfer matching pred; fn may settle (and so free) it.
  void forEachLive(const std::function<bool(const Transfer&)>& pred,
                   const std::function<void(Transfer&)>& fn);
  static std::string keyText(const TransferKey& k);

  EngineConfig config_;
  Params params_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Operation slabs outlive the fabric's workers (declared first): UCX completes into them.
  transport::Slab<PieceOp> pieceOps_;
  transport::Slab<ControlOp> controlOps_;
  std::vector<std::unique_ptr<AmSource>> amSources_;
  std::unique_ptr<transport::Fabric> fabric_;
  std::vector<Context> contexts_;
  std::vector<Route> routes_;  // DEFAULT, then ClassTable::engineClassNames()
  size_t ctrlRoute_ = 0;
  ScopedFd wakeFd_;
  transport::Listener listener_;
  bool listening_ = false;
  std::thread thread_;
  bool stop_ = false;

  uint64_t nextId_ = 1;
  std::map<uint64_t, std::unique_ptr<Peer>> peers_;
  std::unordered_map<uint64_t, std::unique_ptr<Transfer>> xfers_;
  std::list<std::unique_ptr<Registration>> registrations_;
  std::multimap<TimePoint, Timer> timers_;
  TimePoint lastSocketCheck_{};
  size_t handshaking_ = 0;  // peers in Phase::kHandshake (their sockets are polled every call)

  // Receiver.
  uint64_t epoch_ = 0;
  CommitHook hook_;
  CreditLedger credits_;
  struct PendingOffer {
    uint64_t peer;
    Offer offer;
    uint64_t id = 0;  // for its expiry timer
  };
  std::map<std::tuple<uint64_t, uint64_t, uint32_t>, PendingOffer> offers_;
  std::map<std::tuple<uint64_t, uint64_t, uint32_t>, uint64_t> receiving_;  // open receivers
  std::list<uint64_t> waitingCredit_;
  bool creditSet_ = false;  // the application set a budget (config or set_credit)
  // Staged bytes per (sender, route), against the class's `credits` when the application set none.
  std::map<std::pair<uint64_t, size_t>, uint64_t> classStaged_;
  // Sender: open transfers by (peer, request, transfer, generation).
  std::map<std::tuple<uint64_t, uint64_t, uint64_t, uint32_t>, uint64_t> sending_;
  DedupSet committed_{1 << 16};
  // Expects the application released before an offer came: a later offer is told kCanceled.
  std::set<std::tuple<uint64_t, uint64_t, uint32_t>> canceled_;
  std::list<std::tuple<uint64_t, uint64_t, uint32_t>> canceledOrder_;  // oldest first (bounded)
  GenerationTracker generations_{1 << 16};

  Stats stats_;
  telemetry::TraceRing trace_;
  // PACT_FAULT: copied at creation; fault_.active() is the one branch the data path pays.
  FaultSpec fault_;
  FaultDice dice_{1, 0};
};

}  // namespace pact::engine
