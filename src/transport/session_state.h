// What Sessions keeps per session and per channel: private to session.cpp (the plumbing, the
// listening and connecting sides) and session_frames.cpp (the handshake and the frames of an
// established session).
#pragma once

#include <optional>
#include <unordered_set>

#include "telemetry/counters.h"
#include "transport/session.h"

namespace pact::transport {

inline telemetry::CounterSet& sessionCounters() { return telemetry::processCounters(); }

struct Sessions::Session {
  enum class Phase : uint8_t { kHello, kAwaitProof, kReady, kLost };
  uint64_t id = 0;
  bool outbound = false;
  Phase phase = Phase::kHello;
  ControlSocket sock;
  TimePoint start = now();
  std::string peer;
  uint64_t peerProcess = 0;
  uint64_t listenId = 0;  // the listen id whose connect started the session
  auth::Nonce nonce{};
  auth::Nonce peerNonce{};
  std::vector<uint64_t> queued;          // channels whose open waits for the handshake
  int livenessHolds = 0;                 // channels holding its keepalive off (holdLiveness)
  std::unordered_set<uint64_t> channels;  // every channel over this session
  std::string lostReason;
  bool pending = false;                  // listed in pendingOut_
  bool watchingOut = false;              // its epoll entry asks for EPOLLOUT too
  bool ready() const { return phase == Phase::kReady; }
  bool lost() const { return phase == Phase::kLost; }
};

struct Sessions::Channel {
  uint64_t id = 0;
  Session* session = nullptr;
  uint64_t remote = 0;                  // the peer's channel id (0 until the open is answered)
  wire::Open request;                   // connecting side: the open, until it is sent
  std::optional<wire::Opened> opened;   // connecting side: the answer
  std::optional<Error> failed;          // connecting side: why the open ended without a channel
  bool closedHere = false;
  ChannelView view;
  std::function<void()> whenDone;
  std::vector<wire::Verdict> verdicts;  // from the peer, not taken yet
  bool holdsLiveness = false;           // Sessions::holdLiveness
};

}  // namespace pact::transport
