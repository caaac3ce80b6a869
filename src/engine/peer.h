// Engine-private: a connection to another engine and the context of a UCX operation on a
// transfer's blocks. Included by the engine's own .cpp files only.
#pragma once

#include <string>
#include <vector>

#include "common/auth.h"

#include "engine/engine.h"

namespace pact::engine {

// The engine Code for a core Status (engine-private).
Code fromStatus(Status s);

// One connection to another engine (or to this one): the control socket (handshake, then
// liveness) and the UCX endpoint everything else travels on.
struct Engine::Peer {
  enum class Phase : uint8_t { kHandshake, kReady, kLost };
  uint64_t id = 0;           // our token: the peer puts it in every message to us
  uint64_t remoteToken = 0;  // its token: we put it in every message to it
  std::string name;
  bool outbound = false;
  Phase phase = Phase::kHandshake;
  transport::ControlSocket socket;
  ucx::Endpoint ep;
  std::string lostReason;
  bool refused = false;      // the handshake was refused (by either side): connect says REFUSED
  // PACT_AUTH_KEY_FILE: our challenge, the peer's, and the peer's Hello until its proof arrives.
  auth::Nonce nonce{};
  auth::Nonce peerNonce{};
  std::vector<uint8_t> peerWorker;
  // Sender's view of this receiver's credit.
  uint64_t creditBudget = 0;  // 0 = unlimited
  uint64_t creditInUse = 0;
};

// A UCX operation on a transfer's blocks: its completion finds the transfer by id (which may be
// gone by then: ids are never reused).
struct Engine::OpContext {
  Engine* engine;
  uint64_t xfer;
  uint32_t attempt;
  uint8_t* dst;
  uint64_t length;
};

}  // namespace pact::engine
