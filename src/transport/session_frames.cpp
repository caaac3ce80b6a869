// Sessions: the handshake of a new session (wire version, epoch, PACT_AUTH_KEY_FILE proofs) and
// the frames of an established one (channel opens, answers, goodbyes, aborts, the process's bye).
#include <string_view>

#include "common/log.h"
#include "transport/session.h"
#include "transport/session_state.h"

namespace pact::transport {

namespace {
// The listener proves the key over the connector's nonce in its accept, the connector over the
// listener's nonce in a proof frame; no channel opens before both verified.
constexpr std::string_view kAcceptLabel = "pact-session-accept-v1";
constexpr std::string_view kProofLabel = "pact-session-proof-v1";
}  // namespace

void Sessions::refuseSession(Session& s, wire::Field field, uint64_t ours, uint64_t theirs) {
  const wire::Refuse r{field, ours, theirs};
  const std::string why = "refused: " + wire::describe(r, false);
  PACT_WARN("%s: handshake with %s %s", cfg_.face.c_str(), s.peer.c_str(), why.c_str());
  s.sock.queue(wire::encode(r));
  lose(s, why, true);
}

void Sessions::onHandshakeFrame(Session& s, const Frame& f) {
  const auth::Key& key = cfg_.key;
  const uint8_t ours = key.enabled() ? 1 : 0;
  if (f.header.version != wire::kVersion)
    return refuseSession(s, wire::Field::kVersion, wire::kVersion, f.header.version);
  if (f.header.type == wire::FrameType::kRefuse) {
    auto r = wire::decodeRefuse(f.body);
    const std::string why = r.ok() ? "refused by the peer: " + wire::describe(*r, true)
                                   : "refused by the peer (" + r.error().message + ")";
    PACT_WARN("%s: handshake with %s %s", cfg_.face.c_str(), s.peer.c_str(), why.c_str());
    return lose(s, why, true);
  }
  if (!s.outbound && s.phase == Session::Phase::kHello) {
    auto hello = f.header.type == wire::FrameType::kHello
                     ? wire::decodeHello(f.body)
                     : Result<wire::Hello>(Status::kInvalidArgument, "expected a hello frame");
    if (!hello.ok()) {
      PACT_WARN("%s: malformed hello from %s: %s", cfg_.face.c_str(), s.peer.c_str(),
                hello.error().message.c_str());
      return lose(s, "malformed hello: " + hello.error().message);
    }
    s.peerProcess = hello->process;
    s.listenId = hello->listenId;
    if (cfg_.checkEpoch && hello->epoch != cfg_.epoch)
      return refuseSession(s, wire::Field::kEpoch, cfg_.epoch, hello->epoch);
    if (hello->auth != ours) return refuseSession(s, wire::Field::kAuth, ours, hello->auth);
    wire::Accept accept{process_, cfg_.epoch, {}, {}};
    if (key.enabled()) {
      s.peerNonce = hello->nonce;
      s.nonce = auth::freshNonce();
      accept.nonce = s.nonce;
      accept.mac = auth::mac(key.secret, kAcceptLabel, hello->nonce, s.nonce);
    }
    send(s, wire::encode(accept));
    if (!key.enabled()) return becomeReady(s);
    s.phase = Session::Phase::kAwaitProof;  // no channel opens before the connector's proof
    return;
  }
  if (!s.outbound && s.phase == Session::Phase::kAwaitProof) {
    auto proof = f.header.type == wire::FrameType::kProof
                     ? wire::decodeProof(f.body)
                     : Result<wire::Proof>(Status::kInvalidArgument, "expected a proof frame");
    if (!proof.ok() || !auth::verify(key.secret, kProofLabel, s.nonce, s.peerNonce, proof->mac))
      return refuseSession(s, wire::Field::kAuth, 1, 0);
    return becomeReady(s);
  }
  // The connector, waiting for the accept.
  auto acc = f.header.type == wire::FrameType::kAccept
                 ? wire::decodeAccept(f.body)
                 : Result<wire::Accept>(Status::kInvalidArgument, "expected an accept frame");
  if (!acc.ok()) {
    PACT_WARN("%s: handshake with %s: %s", cfg_.face.c_str(), s.peer.c_str(), acc.error().message.c_str());
    return lose(s, "handshake: " + acc.error().message);
  }
  if (cfg_.checkEpoch && acc->epoch != cfg_.epoch)
    return refuseSession(s, wire::Field::kEpoch, cfg_.epoch, acc->epoch);
  if (s.peerProcess == 0) {
    s.peerProcess = acc->process;  // an address without a process: now it is known
  } else if (acc->process != s.peerProcess) {
    // The handle is older than the process that listens there now (a restart on the same port).
    return lose(s, "another process listens at " + s.peer + " now (the handle is stale)", true);
  }
  if (key.enabled()) {
    if (!auth::verify(key.secret, kAcceptLabel, s.nonce, acc->nonce, acc->mac))
      return refuseSession(s, wire::Field::kAuth, 1, 0);
    send(s, wire::encode(wire::Proof{auth::mac(key.secret, kProofLabel, acc->nonce, s.nonce)}));
  }
  becomeReady(s);
}

void Sessions::becomeReady(Session& s) {
  s.phase = Session::Phase::kReady;
  --handshaking_;
  if (!s.outbound) byProcess_.emplace(s.peerProcess, &s);
  PACT_DEBUG("%s: session with %s (process %016llx) ready", cfg_.face.c_str(), s.peer.c_str(),
             static_cast<unsigned long long>(s.peerProcess));
  for (uint64_t id : s.queued)
    if (auto it = channels_.find(id); it != channels_.end()) send(s, wire::encode(it->second->request));
  s.queued.clear();
}

void Sessions::onFrame(Session& s, const Frame& f) {
  auto malformed = [&](const Error& e) { lose(s, "malformed frame from the peer: " + e.message); };
  switch (f.header.type) {
    case wire::FrameType::kOpen: {
      auto m = wire::decodeOpen(f.body);
      if (!m.ok()) return malformed(m.error());
      ListenSlot* l = slot(m->listenId);
      if (l == nullptr || !l->open) {
        send(s, wire::encode(wire::OpenRefused{m->channel, {wire::Field::kListenId, 0, m->listenId}}));
        return;
      }
      l->incoming.push_back(Incoming{s.id, *m, s.peer});
      return;
    }
    case wire::FrameType::kOpened: {
      auto m = wire::decodeOpened(f.body);
      if (!m.ok()) return malformed(m.error());
      Channel* c = channelOf(s, m->channel, "opened");
      if (c == nullptr || c->remote != 0) {
        send(s, wire::encode(wire::Close{m->peerChannel}));  // nobody waits for it any more
        return;
      }
      c->remote = m->peerChannel;
      c->opened = std::move(*m);
      return;
    }
    case wire::FrameType::kOpenRefused: {
      auto m = wire::decodeOpenRefused(f.body);
      if (!m.ok()) return malformed(m.error());
      if (Channel* c = channelOf(s, m->channel, "open refused"); c != nullptr && c->remote == 0)
        c->failed = Error{Status::kRefused, "refused by " + s.peer + ": " + wire::describe(m->why, true)};
      return;
    }
    case wire::FrameType::kClose: {
      auto m = wire::decodeClose(f.body);
      if (!m.ok()) return malformed(m.error());
      Channel* c = channelOf(s, m->channel, "close");
      if (c == nullptr) return;
      c->view.peerClosed = true;
      c->view.peerClosedAt = now();
      if (c->closedHere) finish(*c);
      return;
    }
    case wire::FrameType::kAbort: {
      auto m = wire::decodeAbort(f.body);
      if (!m.ok()) return malformed(m.error());
      if (Channel* c = channelOf(s, m->channel, "abort"); c != nullptr && c->view.abortReason.empty())
        c->view.abortReason = m->reason;
      return;
    }
    case wire::FrameType::kVerdict: {
      auto m = wire::decodeVerdict(f.body);
      if (!m.ok()) return malformed(m.error());
      Channel* c = channelOf(s, m->channel, "verdict");
      if (c == nullptr) return;  // closed here: nobody waits for it
      if (c->verdicts.size() >= kMaxQueuedVerdicts)
        return lose(s, "the peer sent more than " + std::to_string(kMaxQueuedVerdicts) +
                           " verdicts nobody took (a broken peer)");
      c->verdicts.push_back(std::move(*m));
      return;
    }
    case wire::FrameType::kBye: {
      // The process left on purpose: every comm of it is closed, as if each had said goodbye.
      const auto t = now();
      for (uint64_t id : s.channels) {
        Channel& c = *channels_.at(id);
        if (c.remote == 0 || c.view.peerClosed) continue;
        c.view.peerClosed = true;
        c.view.peerClosedAt = t;
      }
      return lose(s, "the peer process left (it said goodbye)");
    }
    default:
      return lose(s, "unexpected frame type " + std::to_string(static_cast<int>(f.header.type)) +
                         " on an established session");
  }
}

}  // namespace pact::transport
