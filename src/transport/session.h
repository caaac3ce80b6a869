// Sessions: the control plane of one face instance, per peer process rather than per comm.
//
// A session is one TCP control connection between two processes. It carries the handshake
// (wire version, epoch, PACT_AUTH_KEY_FILE proofs) once, and afterwards every channel (comm)
// between the two processes, multiplexed: the open of a comm to a listen id and its answer, each
// side's goodbye (close) and abort. A process death closes the connection and so fails every
// channel over it at once. Either process may open channels over a session, whichever side
// started it; a connect to a process that already has a session with this one joins it.
//
// One listening socket per local address (device) serves every listen comm: a listen comm is a
// listen id (index and generation, recycled) that handles name, not a port of its own.
// Descriptors: one per listening address and one per peer process, whatever the number of comms.
//
// Nothing here blocks. step() does one pass over what epoll reports ready (new connections,
// frames, connections lost) plus the handshake timeouts; every other call steps first. Channel
// ids are this side's, unique for the instance's life and never reused.
//
// Thread-safe (one mutex). Lock order: a device mutex, then this; callbacks given to close() run
// under this lock and may take only leaf locks (a tag-space allocator).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/auth.h"
#include "common/clock.h"
#include "common/scoped_fd.h"
#include "common/status.h"
#include "transport/control_socket.h"
#include "transport/wire.h"

namespace pact::transport {

// What one side of a channel knows of its peer.
struct ChannelView {
  bool peerClosed = false;   // the peer's goodbye arrived
  TimePoint peerClosedAt{};
  std::string abortReason;   // non-empty: the peer aborted the channel
  std::string lostReason;    // non-empty: the session is gone (the peer process died or left)
};

class Sessions {
 public:
  struct Config {
    uint64_t epoch = 0;
    auth::Key key;                        // PACT_AUTH_KEY_FILE (may be disabled)
    std::chrono::microseconds peerTimeout{};  // handshake bound; TCP keepalive
    std::string face;                     // in log lines ("plugin")
    // Sessions of another epoch are refused (the plugin). The engine changes its epoch while
    // connected and judges epochs per transfer, so its sessions do not compare them.
    bool checkEpoch = true;
  };
  explicit Sessions(Config cfg);
  ~Sessions();  // says goodbye on every session (the process leaves)
  Sessions(const Sessions&) = delete;
  Sessions& operator=(const Sessions&) = delete;

  // Readable when step() has something to do (an epoll set): what a face that sleeps polls.
  int fd() const { return epoll_.get(); }

  // ---- listening side
  // A new listen id on the listener of ip (bound on first use, on port when not 0); the handle
  // names both. asDefault: the id opens with listen id 0 also reach (an engine's address names
  // no listen id).
  Result<wire::ListenHandle> listen(const std::string& ip, uint16_t port = 0, bool asDefault = false);
  // The listen id is closed: opens still queued for it, or arriving later, are refused.
  void unlisten(uint64_t listenId);
  struct Incoming {
    uint64_t session = 0;
    wire::Open open;
    std::string peer;  // "ip:port" of the connector's control connection
  };
  // Steps (unless step is false: the caller just did), then the next open for listenId. An error
  // when a session this listen id started was refused (the connector's epoch, version or key),
  // once per refusal; nullopt when none waits.
  Result<std::optional<Incoming>> nextOpen(uint64_t listenId, bool step = true);
  // Answers an open: the channel exists on both sides from now on; returns its id here.
  Result<uint64_t> acceptOpen(const Incoming& in, const std::vector<uint8_t>& payload);
  void refuseOpen(const Incoming& in, const wire::Refuse& why);

  // ---- connecting side
  // Joins (or starts) the session to the handle's process and asks for a channel to its listen
  // id, with the face's payload; returns this side's channel id. The open leaves once the
  // session is ready. A handle without a process (0: an engine's address) always starts a
  // session of its own.
  Result<uint64_t> open(const wire::ListenHandle& h, std::vector<uint8_t> payload);
  // Steps (unless step is false); the answer once it came (then the channel is open), nullopt
  // while waiting, or the error that ended it (refused: kRefused; the session lost:
  // kRemoteError). An error forgets the channel.
  Result<std::optional<wire::Opened>> opened(uint64_t channel, bool step = true);
  // Gives up a channel whose open has not been answered (connect timed out).
  void forget(uint64_t channel);

  // ---- both
  // Steps when step is set, then what the peer of an open channel has done.
  ChannelView view(uint64_t channel, bool step = true);
  // Tells the peer this side failed the channel (it fails too).
  void abort(uint64_t channel, const std::string& reason);
  // This side closed the channel: the peer gets its goodbye. byeLost (PACT_FAULT
  // lose_remote_done): the first goodbye is lost, and the session, reliable as TCP is, delivers
  // it kLostByeDelay later. whenDone runs once the peer has closed too or its session is gone
  // (then nothing of the channel can still arrive through the session); immediately if so.
  void close(uint64_t channel, bool byeLost, std::function<void()> whenDone);
  static constexpr auto kLostByeDelay = std::chrono::milliseconds(200);
  // Rail failover: the channel's rails say whether its peer lives while the session's own link (rail
  // 0) is out, so the session's keepalive stops judging the peer until released (hold false, or
  // the channel ends); its TCP connection rides the outage out on retransmits, however long
  // (control_socket.h, kHeldUserTimeout). A peer that dies meanwhile is seen by the rails.
  void holdLiveness(uint64_t channel, bool on);
  // "ip:port" of the channel's peer.
  std::string peerName(uint64_t channel);
  // The channel's peer process (its session id, random per plugin or engine instance); 0 when the
  // channel is unknown. What per-peer state (credits, class priority) is keyed by.
  uint64_t peerProcess(uint64_t channel);

  // ---- verified comms: the receiver's verdict on each message (wire::Verdict)
  // Sends v to the channel's peer (v.channel is filled in here).
  void verdict(uint64_t channel, wire::Verdict v);
  // Steps now (a sender waiting for verdicts does not wait for the liveness interval), then moves
  // the verdicts that arrived for the channel into out.
  void takeVerdicts(uint64_t channel, std::vector<wire::Verdict>* out);
  // Verdicts a channel may hold unread: a sender has at most 256 messages in flight, each judged
  // once plus once per round of re-sends; more means a broken peer (the session is dropped).
  static constexpr size_t kMaxQueuedVerdicts = 4096;
  // Channels closed here with a whenDone whose peer has not closed yet (receive comms waiting for
  // their sender's goodbye; a send comm's close waits for nothing).
  size_t closing() const;
  // One pass over what is ready; returns the number of events handled.
  int step();

 private:
  struct Session;
  struct Channel;
  struct ListenSlot {
    uint32_t generation = 0;
    bool open = false;
    // Small and usually empty (a deque would allocate for every listen id).
    std::vector<Incoming> incoming;
    std::vector<std::string> refusals;  // why sessions this listen id started were refused
  };

  int stepLocked();
  Session* sessionTo(const wire::ListenHandle& h);
  Session& addSession(ControlSocket sock, bool outbound, std::string peer);
  void watch(int fd, uint64_t key, bool out);
  // Also wake a sleeper (epoll) when the socket can take the bytes it holds.
  void watchOut(Session& s, bool out);
  void acceptConnections(int listenFd);
  void readSession(Session& s);
  void onFrame(Session& s, const Frame& f);
  void onHandshakeFrame(Session& s, const Frame& f);
  void becomeReady(Session& s);
  void refuseSession(Session& s, wire::Field field, uint64_t ours, uint64_t theirs);
  void lose(Session& s, const std::string& why, bool refused = false);
  void send(Session& s, const std::vector<uint8_t>& frame);
  void flushPending();
  void finish(Channel& c);
  void hold(Channel& c, bool on);
  void rearmKeepalives();
  void reap();  // drops lost sessions whose channels are all gone
  ListenSlot* slot(uint64_t listenId);
  Channel* channelOf(Session& s, uint64_t channel, const char* frame);

  Config cfg_;
  const uint64_t process_;
  mutable std::mutex mu_;
  ScopedFd epoll_;
  struct Listener_ {
    Listener listener;
    std::string ip;
  };
  std::vector<Listener_> listeners_;
  std::vector<ListenSlot> slots_;     // index = listen id's low 32 bits - 1
  uint64_t defaultListen_ = 0;        // the listen id that listen id 0 reaches (0: none)
  std::deque<uint32_t> freeSlots_;
  std::unordered_map<uint64_t, std::unique_ptr<Session>> sessions_;  // by local session id
  std::unordered_multimap<uint64_t, Session*> byProcess_;          // ready or handshaking
  std::unordered_map<uint64_t, std::unique_ptr<Channel>> channels_;
  std::vector<uint64_t> pendingOut_;  // sessions with bytes the socket has not taken yet
  struct LateBye {
    TimePoint due;
    uint64_t session;
    uint64_t remote;  // the peer's channel id
  };
  std::vector<LateBye> lateByes_;  // goodbyes a fault lost once
  uint64_t nextSession_ = 1;
  uint64_t nextChannel_ = 1;
  size_t closing_ = 0;
  size_t handshaking_ = 0;  // sessions neither ready nor lost
  std::vector<uint64_t> reapable_;  // lost sessions with no channel left: freed by the next step
  std::vector<uint64_t> rearm_;     // sessions whose user timeout comes back once the peer is heard
  TimePoint lastStep_{};
  static constexpr auto kMinStepInterval = std::chrono::microseconds(250);
};

}  // namespace pact::transport
