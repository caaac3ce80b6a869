// The transfer engine (ARCHITECTURE.md section 5; docs/engine.md): epoch-aware commit of block
// transfers between engines, with receiver credits, deadlines, retries and exactly-once commit.
//
// One Engine = a transport::Fabric (the transport core under both faces) with one context per
// distinct service of the engine classes (DEFAULT, KV, A2A, CTRL, CKPT: classes whose services
// are equal share one), each with a worker per rail of the engine's device (several devices of
// PACT_NET_DEVICES are fused into one virtual device, a rail each); a listening control socket;
// and its peers. Every public method takes the engine's one lock; UCX callbacks run inside
// progress() with the lock held, so the engine's state has exactly one writer at a time.
// Failures return a Result whose Error names what was wrong; the C API keeps the last one's
// message for pact_last_error() (the only thread-local error in pact).
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
// (contexts, lanes, the UCX data path: the engine's Link), peers.cpp (connections, handshake,
// liveness). The commit protocol itself (both sides of every transfer, timers, credits) is a
// Protocol (protocol.h) that knows the connections only through that Link.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "transport/params.h"
#include "common/function_ref.h"
#include "common/scoped_fd.h"
#include "engine/engine_mutex.h"
#include "engine/protocol.h"
#include "engine/timers.h"
#include "engine/types.h"
#include "telemetry/trace.h"
#include "transport/control_socket.h"
#include "transport/fabric.h"
#include "transport/lanes.h"
#include "transport/rail_probe.h"
#include "transport/session.h"
#include "transport/slab.h"
#include "transport/wire.h"
#include "ucx/worker.h"

namespace pact::engine {

inline constexpr unsigned kAmControl = 0x5043;  // active message ids on the engine's worker
inline constexpr unsigned kAmPiece = 0x5044;
inline constexpr unsigned kAmEager = 0x5045;  // an eager offer and its transfer's bytes

struct EngineConfig {
  std::string name;
  std::string listenIp;  // empty: do not listen
  uint16_t listenPort = 0;
  uint64_t modelEpoch = 0;
  uint64_t creditBudget = 0;  // 0 = unlimited (as PACT_CREDIT_UNLIMITED)
  bool progressThread = false;
  size_t exactlyOnceWindow = 1 << 16;  // ProtocolConfig::exactlyOnceWindow
};

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

class Engine final : private Link {
 public:
  // params: the effective PACT_* configuration, read by the entry point and passed down.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config, const Params& params);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Result<std::string> address();
  // Never fails: an engine's troubles end its transfers and peers, each with its own status.
  void progress(int timeoutMs);

  // The new peer's id.
  Result<uint64_t> connect(const std::string& address, int timeoutMs);
  Result<uint64_t> waitPeer(const std::string& name, int timeoutMs);
  Result<CreditView> peerCredit(uint64_t peer);
  // Ok for a ready peer; kNotFound (unknown) or kRemoteError (lost), with the reason.
  Result<void> checkPeer(uint64_t peer);
  // The application's verdict that the peer is gone or restarted: its transfers end kPeerStale.
  Result<void> disconnectPeer(uint64_t peer, const std::string& reason);

  Result<Registration*> registerMemory(const MemorySpec& spec);
  Result<void> deregister(Registration* mr);

  Result<void> setEpoch(uint64_t epoch);
  void setCommitHook(CommitHook hook);
  Result<void> setCredit(uint64_t peer, uint64_t budget);
  // The transfer's id.
  Result<uint64_t> expect(const TransferKey& key, std::span<const BlockRef> blocks, uint64_t deadlineUs,
                          const char* trafficClass);
  Result<uint64_t> send(uint64_t peer, const TransferKey& key, std::span<const BlockRef> blocks,
                        uint64_t deadlineUs, const char* trafficClass);

  Result<XferInfo> query(uint64_t xfer);
  // *info is filled on a timeout too (the state the transfer was left in).
  Result<void> wait(uint64_t xfer, int timeoutMs, XferInfo* info);
  // true: gone, its blocks free; false: a UCX operation still touches its blocks, it is final
  // (and freed) later.
  Result<bool> release(uint64_t xfer);

  // The engine's counters in telemetry::kEngineCatalog order (index with telemetry::EngineCounter).
  std::vector<uint64_t> stats();
  // Every engine class and the context it runs on, DEFAULT first.
  std::vector<ClassRouteInfo> routes() const;
  // Pieces sent so far on each lane of a class to a peer (empty before its first send).
  std::vector<transport::LaneStats> laneStats(uint64_t peer, const std::string& cls);
  size_t traceRead(uint64_t* cursor, telemetry::TraceEvent* out, size_t max);

  // ---- all-to-all steps, for Group (group.cpp); each call takes the lock once ----
  // One chunk of a step, received from or sent to `peer` (a pact_peer_t), on the A2A class.
  struct StepChunk {
    uint64_t peer = 0;
    TransferKey key;
    BlockRef block;
  };
  // Expects every chunk of recv (each ends kRemoteError, PEER_LOST, as soon as its peer is lost,
  // offered or not), then sends every chunk of send: ids in that order. A send to a peer already
  // lost is not started: its id is 0 and unsent[i] says why. Any other failure releases what was
  // started and returns it; *failedAt is the chunk's index (recv first, then send).
  Result<void> startStep(std::span<const StepChunk> recv, std::span<const StepChunk> send,
                         uint64_t deadlineUs, std::vector<uint64_t>* ids,
                         std::vector<std::string>* unsent, size_t* failedAt);
  // Waits until every transfer of ids is final, or one failed (kTimeout, nothing released,
  // otherwise); then fills their results (kOk for an id 0, kInProgress for one still open: it is
  // aborted) and releases them, and waits (within the same timeout) until no UCX operation touches
  // their blocks any more: kBusy, with the results filled, when one still does.
  Result<void> finishStep(std::span<const uint64_t> ids, int timeoutMs, std::vector<Status>* results);
  // Releases (aborting) what is still open of ids.
  void releaseStep(std::span<const uint64_t> ids);

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
  enum class TimerKind : uint8_t { kHandshake };
  // A UCX send held while UCX is inside its progress (holding_ below).
  struct HeldPost {
    enum class Kind : uint8_t { kControl, kPiece, kEager } kind;
    ucx::Endpoint* ep;  // lives until the hold ends: nothing closes endpoints inside progress
    ucx::Op* op;
  };

  Engine(const EngineConfig& config, const Params& params);
  Result<void> init();
  void publishRoutable();  // listening on the wildcard: publish a routable address instead
  void shutdown();
  void writeTrace();
  // The blocks' total bytes, once each is checked against the registrations.
  Result<uint64_t> checkBlocks(std::span<const BlockRef> blocks);

  // ---- the Link of the protocol, and the contexts and lanes under it (routes.cpp) ----
  std::string reach(uint64_t peer, size_t route) override;
  void sendControl(uint64_t peer, const Control& m, int route) override;
  void sendPiece(uint64_t peer, size_t route, const PieceHeader& h, const uint8_t* src, uint64_t n,
                 uint64_t xfer, MemoryType srcType) override;
  void sendEager(uint64_t peer, size_t route, const Offer& m, std::span<const Extent> src,
                 uint64_t xfer) override;
  void fetch(void* descriptor, uint8_t* dst, uint64_t n, uint64_t xfer, uint32_t attempt,
             MemoryType dstType) override;
  Result<void> openContexts();
  // The route of a class name (DEFAULT or an engine class, any case; others are DEFAULT).
  size_t routeFor(const char* trafficClass) const;
  // The route of an application's class name (NULL: DEFAULT); any name but DEFAULT or an engine
  // class (any case) is kInvalidArgument, naming the choices.
  Result<size_t> classRoute(const char* what, const char* trafficClass) const;
  unsigned progressWorkers();
  bool armWorkers();
  void pumpLanes();
  // The lanes of route r to p, created on first use; an error when the peer has no context of
  // the route's service or an endpoint cannot be made.
  Result<transport::Lanes*> lanesTo(Peer& p, size_t r);
  void closePeerEndpoints(Peer& p);
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

  // The application's calls with the lock held (engine.cpp).
  Result<uint64_t> expectLocked(const TransferKey& key, std::span<const BlockRef> blocks,
                                uint64_t deadlineUs, const char* trafficClass);
  Result<uint64_t> sendLocked(uint64_t peer, const TransferKey& key, std::span<const BlockRef> blocks,
                              uint64_t deadlineUs, const char* trafficClass);
  // Waits with the lock held (by `lock`) until pred() or the timeout; progresses the engine itself
  // when it has no progress thread. False on timeout.
  bool waitFor(EngineLock& lock, int timeoutMs, FunctionRef<bool()> pred);

  // ---- progress (engine.cpp) ----
  int progressLocked();
  void sleepLocked(EngineLock& lock, int timeoutMs);
  void wake();
  // Whether the engine had something to do within PACT_PROGRESS_SPIN: then its progress thread
  // and its waiters poll instead of sleeping.
  bool spinning() const;
  // Clock ticks of now() into at; whether at lies within window of now().
  static void stamp(std::atomic<int64_t>& at);
  static bool within(const std::atomic<int64_t>& at, std::chrono::microseconds window);
  void yieldLocked(EngineLock& lock);
  void runProgressThread();
  int fireTimers();

  // ---- connections (peers.cpp) ----
  // Steps the sessions: engines connecting here, answers to this side's connects, peers that
  // closed or were lost.
  int pollPeers();
  Peer& newPeer(bool outbound);
  // This engine's Hello to p, as a channel payload.
  std::vector<uint8_t> helloFor(const Peer& p);
  // Whether p is ready now (else it was lost, with the reason).
  bool onHello(Peer& p, const Hello& hello);
  bool connectEndpoint(Peer& p);
  void peerLost(Peer& p, const std::string& why, Status transfers = Status::kRemoteError);
  // The ready peer with this id (our token for it), or nullptr.
  Peer* peerByToken(uint64_t token);
  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);

  // ---- rail failover (failover.cpp) ----
  // f(lanes, context, name) for each of a peer's lane sets, once: the control lane, then each
  // class's lanes (a class of one lane may share the control lane). No allocation: it runs on
  // every progress of a failed-over peer.
  template <class F>
  void forEachLaneSet(Peer& p, F&& f);
  void openRails();  // the prober and this side's probe addresses, when failover is wanted
  void watchRails(Peer& p, const std::vector<wire::ProbeAddress>& peerProbes);
  // A piece UCX ended (posted: it was handed to UCX): whether failover keeps it (completed: until
  // its transfer settles; failed with its rail: parked until the lanes moved).
  bool railsTake(Peer& p, PieceOp* op, ucs_status_t st);
  void pruneSent(Peer& p);
  void dropKept(Peer& p);
  void checkRails();  // every failed-over peer, on every progress
  void checkRails(Peer& p);
  // Lanes off their rail: to a live one (failover) or home (recovery); what moved, for the log
  // (empty: nothing). *left gains a bit for each rail a lane left.
  std::string moveLanes(Peer& p, unsigned* left);
  const std::vector<std::vector<uint8_t>>* remoteRails(const Peer& p, size_t context) const;

  EngineConfig config_;
  Params params_;
  const cuda::Driver* driver_ = nullptr;  // PACT_CUDA_DRIVER's (GPU blocks)
  EngineMutex mu_;
  std::atomic<int64_t> lastActivity_{0};  // now() of the last event or call, in Clock ticks
  int pollingWaiters_ = 0;                // waits polling the engine themselves (under mu_)
  std::atomic<int64_t> lastAppPoll_{0};   // the last pact_progress call, in Clock ticks
  // A progress thread stands aside this long after the application last called pact_progress.
  static constexpr auto kAppPollGrace = std::chrono::microseconds(200);
  // The longest a thread polls for the engine lock before it sleeps (EngineMutex): a progress
  // round with nothing to do takes a few microseconds; 30-100 us gave the same latencies.
  static constexpr auto kLockSpin = std::chrono::microseconds(50);
  std::condition_variable_any waitersDone_;   // the last of them stopped
  std::condition_variable_any cv_;
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
  ScopedFd wakeFd_;
  // The per-peer-process control connections of the one core (the plugin's Net has its own).
  std::unique_ptr<transport::Sessions> sessions_;
  wire::ListenHandle listenHandle_;  // where other engines connect (listen id 0 reaches it)
  bool listening_ = false;
  std::thread thread_;
  bool stop_ = false;

  uint64_t nextId_ = 1;
  std::map<uint64_t, std::unique_ptr<Peer>> peers_;
  std::list<std::unique_ptr<Registration>> registrations_;
  Timers<TimerKind> timers_;
  TimePoint lastSessionCheck_{};
  size_t handshaking_ = 0;  // peers in Phase::kHandshake (the sessions are stepped every call)
  // UCX sends asked for while UCX is inside its progress wait here and start once it returned
  // (progressWorkers): UCX 1.13's tcp transport aborts when a send from inside its batch of socket
  // events meets a dead peer whose event is still queued in that batch (tcp_iface.c:307).
  bool holding_ = false;
  std::vector<HeldPost> held_;  // keeps its capacity: no allocation per progress
  std::unique_ptr<Protocol> proto_;  // after the contexts are open (it needs the routes)
  std::shared_ptr<transport::RailProber> prober_;  // rail failover: answers the peers' probes
  std::vector<wire::ProbeAddress> probes_;           // this side's rails' probe addresses
  Advertise spareAdvertise_;  // the last Advertise decoded: the next one reuses its vectors
};

}  // namespace pact::engine
