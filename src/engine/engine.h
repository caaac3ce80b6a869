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
// (behind its pieces).
//
// The Engine is a facade over three objects it wires together, and owns what they share: the
// lock, the progress loop (and thread) and the waits, the registrations. A PeerTable
// (peer_table.h: the peers, the sessions and the listener, the handshake, liveness) tells it of
// a peer's handshake, readiness and loss through PeerTable::Events; the Routes (routes.h: the
// fabric and its contexts, the classes' routes, each peer's lanes, the op slabs, the sends held
// while UCX is inside its progress, rail failover) are the Link of the Protocol (protocol.h: the
// commit protocol, both sides of every transfer, timers, credits), which knows the connections
// only through that Link. Files: engine.cpp (lifecycle, the wiring, progress, the transfer and
// memory calls), engine_peers.cpp (its calls on its peers), engine_steps.cpp (the step API for
// Group), peer_table.cpp (the PeerTable), routes.cpp, peer_lanes.cpp and failover.cpp (the
// Routes).
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

#include "common/function_ref.h"
#include "common/scoped_fd.h"
#include "cuda/driver.h"
#include "engine/engine_mutex.h"
#include "engine/peer_table.h"
#include "engine/protocol.h"
#include "engine/routes.h"
#include "engine/types.h"
#include "telemetry/trace.h"
#include "transport/lanes.h"
#include "transport/params.h"

namespace pact::engine {

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

class Engine final : private PeerTable::Events, private Routes::Events {
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

  // ---- all-to-all steps, for Group (engine_steps.cpp); each call takes the lock once ----
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
  Engine(const EngineConfig& config, const Params& params);
  Result<void> init();
  void shutdown();
  void writeTrace();
  // The blocks' total bytes, once each is checked against the registrations.
  Result<uint64_t> checkBlocks(std::span<const BlockRef> blocks);

  // ---- the wiring: the peer table's and the routes' events (engine.cpp) ----
  std::vector<uint8_t> hello(const Peer& p) override;
  Result<void> greeted(Peer& p) override;
  Result<bool> wired(Peer& p) override;
  void ready(Peer& p) override;
  void lost(Peer& p, Status transfers) override;
  void changed() override { cv_.notify_all(); }

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
  // The order below is the order of destruction, reversed: the routes (their slabs, which UCX
  // completes into, and the contexts and workers) outlive the peers (whose lanes hold endpoints
  // of those workers), the registrations (regions of those contexts) and the protocol.
  Routes routes_;
  PeerTable peers_;
  std::list<std::unique_ptr<Registration>> registrations_;
  std::unique_ptr<Protocol> proto_;  // after the contexts are open (it needs the routes)
  ScopedFd wakeFd_;
  std::thread thread_;
  bool stop_ = false;
};

}  // namespace pact::engine
