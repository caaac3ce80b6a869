#include "transport/session.h"

#include <arpa/inet.h>
#include <sys/epoll.h>

#include <cstring>
#include <random>
#include <unordered_set>

#include "common/log.h"
#include "telemetry/counters.h"

namespace pact::transport {

namespace {

constexpr uint64_t kListenerKey = uint64_t{1} << 63;  // epoll keys of listening sockets
// The listener proves the key over the connector's nonce in its accept, the connector over the
// listener's nonce in a proof frame; no channel opens before both verified.
constexpr std::string_view kAcceptLabel = "pact-session-accept-v1";
constexpr std::string_view kProofLabel = "pact-session-proof-v1";

uint64_t randomId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng() | 1;
}

std::string socketPeer(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  return formatAddress(ss);
}

telemetry::CounterSet& counters() { return telemetry::processCounters(); }

}  // namespace

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
};

Sessions::Sessions(Config cfg) : cfg_(std::move(cfg)), process_(randomId()) {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) PACT_WARN("%s: epoll_create1: %s", cfg_.face.c_str(), std::strerror(errno));
}

Sessions::~Sessions() {
  std::lock_guard lock(mu_);
  for (const LateBye& b : lateByes_)  // the process leaves: what a fault delayed goes now
    if (auto it = sessions_.find(b.session); it != sessions_.end() && it->second->ready())
      it->second->sock.queue(wire::encode(wire::Close{b.remote}));
  for (auto& [id, s] : sessions_) {
    if (!s->ready()) continue;
    s->sock.queue(wire::encodeBye());
    ignore(s->sock.flush());
  }
  for (auto& [id, s] : sessions_)
    if (!s->lost()) counters().subShared(telemetry::kSessions);
  counters().subShared(telemetry::kChannels, channels_.size());
}

// ---- plumbing ---------------------------------------------------------------------------------

void Sessions::watch(int fd, uint64_t key, bool out) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (out ? uint32_t{EPOLLOUT} : 0u);
  ev.data.u64 = key;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    PACT_WARN("%s: epoll_ctl: %s", cfg_.face.c_str(), std::strerror(errno));
}

void Sessions::watchOut(Session& s, bool out) {
  if (s.watchingOut == out || s.lost()) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (out ? uint32_t{EPOLLOUT} : 0u);
  ev.data.u64 = s.id;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, s.sock.fd(), &ev) == 0) s.watchingOut = out;
}

Sessions::Session& Sessions::addSession(ControlSocket sock, bool outbound, std::string peer) {
  auto s = std::make_unique<Session>();
  s->id = nextSession_++;
  s->outbound = outbound;
  s->sock = std::move(sock);
  s->peer = std::move(peer);
  ++handshaking_;
  enableKeepalive(s->sock.fd(), cfg_.peerTimeout);
  watch(s->sock.fd(), s->id, false);
  counters().addShared(telemetry::kSessions);
  Session& ref = *s;
  sessions_.emplace(ref.id, std::move(s));
  return ref;
}

void Sessions::send(Session& s, const std::vector<uint8_t>& frame) {
  if (s.lost()) return;
  s.sock.queue(frame);
  if (!s.pending) {
    s.pending = true;
    pendingOut_.push_back(s.id);
  }
}

void Sessions::flushPending() {
  if (pendingOut_.empty()) return;
  std::vector<uint64_t> ids;
  ids.swap(pendingOut_);
  for (uint64_t id : ids) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) continue;
    Session& s = *it->second;
    s.pending = false;
    if (s.lost()) continue;
    const Status st = s.sock.flush();
    if (st == Status::kInProgress) {
      s.pending = true;
      pendingOut_.push_back(id);
      watchOut(s, true);
    } else if (st == Status::kOk) {
      watchOut(s, false);
    } else if (isError(st)) {
      if (st == Status::kRefused)
        lose(s, "connection refused: nothing listens at " + s.peer, true);
      else
        lose(s, "control connection to " + s.peer + " reset");
    }
  }
}

void Sessions::lose(Session& s, const std::string& why, bool refused) {
  if (s.lost()) return;
  if (!s.ready()) --handshaking_;
  if (s.channels.empty())
    PACT_INFO("%s: session with %s (process %016llx) lost: %s", cfg_.face.c_str(), s.peer.c_str(),
              static_cast<unsigned long long>(s.peerProcess), why.c_str());
  else
    PACT_WARN("%s: session with %s (process %016llx) lost with %zu comm(s) over it: %s",
              cfg_.face.c_str(), s.peer.c_str(), static_cast<unsigned long long>(s.peerProcess),
              s.channels.size(), why.c_str());
  if (!s.outbound && refused && s.listenId != 0)
    if (ListenSlot* l = slot(s.listenId)) l->refusals.push_back(why);
  s.phase = Session::Phase::kLost;
  s.lostReason = why;
  counters().subShared(telemetry::kSessions);
  for (auto it = byProcess_.begin(); it != byProcess_.end(); ++it) {
    if (it->second == &s) {
      byProcess_.erase(it);
      break;
    }
  }
  ignore(s.sock.flush());  // a refusal on its way goes out; then the peer sees the close
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.sock.fd(), nullptr);
  s.sock = ControlSocket();  // the descriptor goes now
  std::vector<Channel*> done;
  for (uint64_t id : s.channels) {
    Channel& c = *channels_.at(id);
    if (c.remote == 0 && !c.opened) {
      c.failed = Error{refused ? Status::kRefused : Status::kRemoteError, why};
    } else {
      if (!c.view.peerClosed) c.view.lostReason = why;  // after its goodbye, nothing is lost
      if (c.closedHere) done.push_back(&c);
    }
  }
  for (Channel* c : done) finish(*c);
  lostAny_ = true;
}

void Sessions::reap() {
  if (!lostAny_) return;
  lostAny_ = false;
  std::erase_if(sessions_, [&](const auto& e) {
    if (!e.second->lost()) return false;
    if (!e.second->channels.empty()) {
      lostAny_ = true;  // look again once its channels are gone
      return false;
    }
    return true;
  });
}

void Sessions::finish(Channel& c) {
  if (c.closedHere && c.whenDone) --closing_;
  if (c.whenDone) c.whenDone();
  c.session->channels.erase(c.id);
  if (c.session->lost() && c.session->channels.empty()) lostAny_ = true;
  counters().subShared(telemetry::kChannels);
  channels_.erase(c.id);
}

Sessions::ListenSlot* Sessions::slot(uint64_t listenId) {
  if (listenId == 0) listenId = defaultListen_;
  const uint64_t index = (listenId & 0xffffffffu);
  if (index == 0 || index > slots_.size()) return nullptr;
  ListenSlot& l = slots_[index - 1];
  return l.generation == (listenId >> 32) ? &l : nullptr;
}

Sessions::Channel* Sessions::channelOf(Session& s, uint64_t channel, const char* frame) {
  auto it = channels_.find(channel);
  if (it == channels_.end() || it->second->session != &s) {
    PACT_DEBUG("%s: %s for channel %llu, which %s does not hold (closed already)",
               cfg_.face.c_str(), frame, static_cast<unsigned long long>(channel), s.peer.c_str());
    return nullptr;
  }
  return it->second.get();
}

// ---- stepping ---------------------------------------------------------------------------------

int Sessions::step() {
  std::lock_guard lock(mu_);
  return stepLocked();
}

int Sessions::stepLocked() {
  lastStep_ = now();
  int n = 0;
  epoll_event ev[64];
  for (int round = 0; round < 16; ++round) {
    const int k = ::epoll_wait(epoll_.get(), ev, 64, 0);
    if (k <= 0) break;
    for (int i = 0; i < k; ++i) {
      const uint64_t key = ev[i].data.u64;
      if (key & kListenerKey) {
        acceptConnections(listeners_[key & ~kListenerKey].listener.fd.get());
      } else if (auto it = sessions_.find(key); it != sessions_.end()) {
        readSession(*it->second);
      }
    }
    n += k;
    if (k < 64) break;
  }
  const auto t = now();
  std::erase_if(lateByes_, [&](const LateBye& b) {
    if (b.due > t) return false;
    if (auto it = sessions_.find(b.session); it != sessions_.end())
      send(*it->second, wire::encode(wire::Close{b.remote}));
    return true;
  });
  flushPending();
  // Handshakes that did not finish in time (ready sessions are not walked on every step).
  if (handshaking_ > 0)
    for (auto& [id, s] : sessions_)
      if (!s->ready() && !s->lost() && t - s->start > cfg_.peerTimeout)
        lose(*s, "no handshake within PACT_PEER_TIMEOUT");
  reap();
  return n;
}

void Sessions::acceptConnections(int listenFd) {
  for (;;) {
    auto fd = acceptOne(listenFd);
    if (!fd.ok()) {
      PACT_WARN("%s: accept: %s", cfg_.face.c_str(), fd.error().message.c_str());
      return;
    }
    if (!fd->valid()) return;
    const std::string peer = socketPeer(fd->get());
    addSession(ControlSocket(std::move(fd.value())), false, peer);
  }
}

void Sessions::readSession(Session& s) {
  while (!s.lost()) {
    auto f = s.sock.poll();
    if (!f.ok()) {
      lose(s, f.error().message);
      return;
    }
    if (!f.value()) return;
    if (s.ready())
      onFrame(s, **f);
    else
      onHandshakeFrame(s, **f);
  }
}

void Sessions::refuseSession(Session& s, wire::Field field, uint64_t ours, uint64_t theirs) {
  PACT_WARN("%s: handshake with %s refused: %s differs (local %llu, remote %llu)",
            cfg_.face.c_str(), s.peer.c_str(), wire::fieldName(field),
            static_cast<unsigned long long>(ours), static_cast<unsigned long long>(theirs));
  s.sock.queue(wire::encode(wire::Refuse{field, ours, theirs}));
  lose(s, std::string("refused: ") + wire::fieldName(field) + " differs (local " +
              std::to_string(ours) + ", remote " + std::to_string(theirs) + ")",
       true);
}

void Sessions::onHandshakeFrame(Session& s, const Frame& f) {
  const auth::Key& key = cfg_.key;
  const uint8_t ours = key.enabled() ? 1 : 0;
  if (f.header.version != wire::kVersion)
    return refuseSession(s, wire::Field::kVersion, wire::kVersion, f.header.version);
  if (f.header.type == wire::FrameType::kRefuse) {
    auto r = wire::decodeRefuse(f.body);
    std::string why = r.ok() ? std::string("refused by the peer: ") + wire::fieldName(r->field) +
                                   " differs (remote " + std::to_string(r->expected) + ", local " +
                                   std::to_string(r->got) + ")"
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
      send(s, wire::encode(accept));
      s.phase = Session::Phase::kAwaitProof;
      return;
    }
    send(s, wire::encode(accept));
    return becomeReady(s);
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
        c->failed = Error{Status::kRefused,
                          "refused by " + s.peer + ": " + wire::fieldName(m->why.field) +
                              (m->why.field == wire::Field::kListenId
                                   ? " " + std::to_string(m->why.got) + " is not listening (closed)"
                                   : " (limit " + std::to_string(m->why.expected) + ")")};
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
    case wire::FrameType::kBye: {
      // The process left on purpose: every comm of it is closed, as if each had said goodbye.
      const auto t = now();
      for (uint64_t id : s.channels) {
        Channel& c = *channels_.at(id);
        if (c.remote == 0 || c.view.peerClosed) continue;
        c.view.peerClosed = true;
        c.view.peerClosedAt = t;
      }
      return lose(s, "the peer process closed its plugin");
    }
    default:
      return lose(s, "unexpected frame type " + std::to_string(static_cast<int>(f.header.type)) +
                         " on an established session");
  }
}

// ---- listening side ---------------------------------------------------------------------------

Result<wire::ListenHandle> Sessions::listen(const std::string& ip, uint16_t port, bool asDefault) {
  std::lock_guard lock(mu_);
  auto portOf = [](const sockaddr_storage& a) {
    return ntohs(a.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in*>(&a)->sin_port
                                        : reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  };
  size_t li = 0;
  while (li < listeners_.size() &&
         (listeners_[li].ip != ip || (port != 0 && portOf(listeners_[li].listener.addr) != port)))
    ++li;
  if (li == listeners_.size()) {
    auto l = listenOn(ip, port);
    if (!l.ok()) return l.error();
    listeners_.push_back(Listener_{std::move(l.value()), ip});
    watch(listeners_.back().listener.fd.get(), kListenerKey | li, false);
    PACT_DEBUG("%s: session listener on %s", cfg_.face.c_str(),
               formatAddress(listeners_.back().listener.addr).c_str());
  }
  uint32_t index;
  if (!freeSlots_.empty()) {
    index = freeSlots_.front();
    freeSlots_.pop_front();
  } else {
    slots_.emplace_back();
    index = static_cast<uint32_t>(slots_.size());
  }
  ListenSlot& slotRef = slots_[index - 1];
  slotRef.open = true;
  const sockaddr_storage& addr = listeners_[li].listener.addr;
  wire::ListenHandle h;
  h.family = addr.ss_family;
  h.listenId = (static_cast<uint64_t>(slotRef.generation) << 32) | index;
  if (asDefault) defaultListen_ = h.listenId;
  h.epoch = cfg_.epoch;
  h.process = process_;
  if (h.family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&addr);
    h.port = ntohs(s->sin_port);
    std::memcpy(h.addr, &s->sin_addr, 4);
  } else {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&addr);
    h.port = ntohs(s->sin6_port);
    std::memcpy(h.addr, &s->sin6_addr, 16);
  }
  return h;
}

void Sessions::unlisten(uint64_t listenId) {
  std::lock_guard lock(mu_);
  ListenSlot* l = slot(listenId);
  if (l == nullptr) return;
  if (defaultListen_ == listenId) defaultListen_ = 0;
  for (const Incoming& in : l->incoming)
    if (auto it = sessions_.find(in.session); it != sessions_.end())
      send(*it->second, wire::encode(wire::OpenRefused{in.open.channel, {wire::Field::kListenId, 0, listenId}}));
  const uint32_t next = l->generation + 1;
  *l = ListenSlot();
  l->generation = next;  // a late open for the old id is refused
  freeSlots_.push_back(static_cast<uint32_t>(listenId & 0xffffffffu));
  flushPending();
}

Result<std::optional<Sessions::Incoming>> Sessions::nextOpen(uint64_t listenId) {
  std::lock_guard lock(mu_);
  stepLocked();
  ListenSlot* l = slot(listenId);
  if (l == nullptr || !l->open) return Error{Status::kInvalidArgument, "listen id is not open"};
  if (!l->refusals.empty()) {
    Error e{Status::kRefused, l->refusals.front()};
    l->refusals.erase(l->refusals.begin());
    return e;
  }
  while (!l->incoming.empty()) {
    Incoming in = std::move(l->incoming.front());
    l->incoming.erase(l->incoming.begin());
    auto it = sessions_.find(in.session);
    if (it != sessions_.end() && it->second->ready()) return std::optional<Incoming>(std::move(in));
  }
  return std::optional<Incoming>();
}

Result<uint64_t> Sessions::acceptOpen(const Incoming& in, const std::vector<uint8_t>& payload) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(in.session);
  if (it == sessions_.end() || !it->second->ready())
    return Error{Status::kRemoteError, "the connector's session with " + in.peer + " is gone"};
  Session& s = *it->second;
  auto c = std::make_unique<Channel>();
  c->id = nextChannel_++;
  c->session = &s;
  c->remote = in.open.channel;
  const uint64_t id = c->id;
  s.channels.insert(id);
  channels_.emplace(id, std::move(c));
  counters().addShared(telemetry::kChannels);
  send(s, wire::encode(wire::Opened{in.open.channel, id, payload}));
  flushPending();
  return id;
}

void Sessions::refuseOpen(const Incoming& in, const wire::Refuse& why) {
  std::lock_guard lock(mu_);
  if (auto it = sessions_.find(in.session); it != sessions_.end())
    send(*it->second, wire::encode(wire::OpenRefused{in.open.channel, why}));
  flushPending();
}

// ---- connecting side --------------------------------------------------------------------------

Sessions::Session* Sessions::sessionTo(const wire::ListenHandle& h) {
  if (h.process == 0) return nullptr;
  auto range = byProcess_.equal_range(h.process);
  for (auto it = range.first; it != range.second; ++it)
    if (!it->second->lost()) return it->second;
  return nullptr;
}

Result<uint64_t> Sessions::open(const wire::ListenHandle& h, std::vector<uint8_t> payload) {
  std::lock_guard lock(mu_);
  stepLocked();
  Session* s = sessionTo(h);
  if (s == nullptr) {
    auto sock = ControlSocket::connectTo(h);
    if (!sock.ok()) return sock.error();
    s = &addSession(std::move(sock.value()), true, formatAddress(h));
    s->peerProcess = h.process;
    s->listenId = h.listenId;
    if (h.process != 0) byProcess_.emplace(h.process, s);
    wire::Hello hello{process_, cfg_.epoch, h.listenId, cfg_.key.enabled() ? uint8_t{1} : uint8_t{0}, {}};
    s->nonce = auth::freshNonce();
    hello.nonce = s->nonce;
    send(*s, wire::encode(hello));
  }
  auto c = std::make_unique<Channel>();
  c->id = nextChannel_++;
  c->session = s;
  c->request = wire::Open{h.listenId, c->id, std::move(payload)};
  const wire::Open& request = c->request;
  const uint64_t id = c->id;
  s->channels.insert(id);
  channels_.emplace(id, std::move(c));
  counters().addShared(telemetry::kChannels);
  if (s->ready())
    send(*s, wire::encode(request));
  else
    s->queued.push_back(id);
  flushPending();
  return id;
}

Result<std::optional<wire::Opened>> Sessions::opened(uint64_t channel) {
  std::lock_guard lock(mu_);
  stepLocked();
  auto it = channels_.find(channel);
  if (it == channels_.end()) return Error{Status::kInvalidArgument, "unknown channel"};
  Channel& c = *it->second;
  if (c.failed) {
    Error e = *c.failed;
    finish(c);
    return e;
  }
  if (c.opened) return c.opened;
  return std::optional<wire::Opened>();
}

void Sessions::forget(uint64_t channel) {
  std::lock_guard lock(mu_);
  if (auto it = channels_.find(channel); it != channels_.end()) finish(*it->second);
}

// ---- both sides -------------------------------------------------------------------------------

ChannelView Sessions::view(uint64_t channel, bool step) {
  std::lock_guard lock(mu_);
  // Every comm looks every PACT_LIVENESS_INTERVAL; one epoll look serves all comms for a while.
  if (step && now() - lastStep_ >= kMinStepInterval) stepLocked();
  auto it = channels_.find(channel);
  if (it == channels_.end()) return ChannelView{false, {}, {}, "the channel is closed"};
  return it->second->view;
}

void Sessions::abort(uint64_t channel, const std::string& reason) {
  std::lock_guard lock(mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end() || it->second->remote == 0) return;
  send(*it->second->session, wire::encode(wire::Abort{it->second->remote, reason}));
  flushPending();
}

void Sessions::close(uint64_t channel, bool byeLost, std::function<void()> whenDone) {
  std::lock_guard lock(mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end()) {
    if (whenDone) whenDone();
    return;
  }
  Channel& c = *it->second;
  c.closedHere = true;
  if (c.remote != 0) {
    if (byeLost)
      lateByes_.push_back(LateBye{now() + kLostByeDelay, c.session->id, c.remote});
    else
      send(*c.session, wire::encode(wire::Close{c.remote}));
  }
  c.whenDone = std::move(whenDone);
  if (c.view.peerClosed || c.session->lost()) {
    c.closedHere = false;  // not counted as closing
    finish(c);
  } else if (c.whenDone) {
    ++closing_;
  }
  flushPending();
}

std::string Sessions::peerName(uint64_t channel) {
  std::lock_guard lock(mu_);
  auto it = channels_.find(channel);
  return it == channels_.end() ? "unknown peer" : it->second->session->peer;
}

size_t Sessions::closing() const {
  std::lock_guard lock(mu_);
  return closing_;
}

}  // namespace pact::transport
