#include "transport/session.h"
#include "ucx/tcp_reset.h"
#include "transport/session_state.h"

#include <arpa/inet.h>
#include <sys/epoll.h>

#include <cstring>
#include <random>

#include "common/log.h"
#include "common/shrink.h"
#include "telemetry/counters.h"

namespace pact::transport {

namespace {

constexpr uint64_t kListenerKey = uint64_t{1} << 63;  // epoll keys of listening sockets
// After a liveness hold: two of the kernel's longest retransmission intervals (TCP_RTO_MAX, 120 s)
// and a margin, so a connection whose link came back is heard before it is given up.
constexpr std::chrono::milliseconds kReleaseGrace{250'000};

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

}  // namespace


Sessions::Sessions(Config cfg) : cfg_(std::move(cfg)), process_(randomId()) {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) PACT_WARN("%s: epoll_create1: %s", cfg_.face.c_str(), std::strerror(errno));
  ucx::markNotUcx(epoll_.get(), true);  // a rail's reset never touches the control plane
}

Sessions::~Sessions() {
  ucx::markNotUcx(epoll_.get(), false);
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
    if (!s->lost()) sessionCounters().subShared(telemetry::kSessions);
  sessionCounters().subShared(telemetry::kChannels, channels_.size());
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
  sessionCounters().addShared(telemetry::kSessions);
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
  sessionCounters().subShared(telemetry::kSessions);
  for (auto [it, end] = byProcess_.equal_range(s.peerProcess); it != end; ++it) {
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
  if (s.channels.empty()) reapable_.push_back(s.id);
}

void Sessions::reap() {
  for (uint64_t id : reapable_) sessions_.erase(id);  // an id twice: the second finds nothing
  reapable_.clear();
}

void Sessions::holdLiveness(uint64_t channel, bool on) {
  std::lock_guard lock(mu_);
  auto it = channels_.find(channel);
  if (it != channels_.end()) hold(*it->second, on);
}

void Sessions::hold(Channel& c, bool on) {
  if (c.holdsLiveness == on) return;
  c.holdsLiveness = on;
  Session& s = *c.session;
  s.livenessHolds += on ? 1 : -1;
  if (s.lost()) return;
  if (on && s.livenessHolds == 1) {
    disableKeepalive(s.sock.fd());
    PACT_INFO("%s session to %s: keepalive off while its rail 0 is out (the rails judge the peer)",
              cfg_.face.c_str(), s.peer.c_str());
  } else if (!on && s.livenessHolds == 0) {
    // Keepalive probes again, but the user timeout only once the peer is heard: it counts from
    // the last thing heard, before the outage, so set now it would end the connection at the
    // first probe (rearmKeepalives, from stepLocked). Until then, what is unacknowledged has
    // kReleaseGrace to be (a dead peer's session ends then).
    enableKeepalive(s.sock.fd(), cfg_.peerTimeout, false);
    graceUserTimeout(s.sock.fd(), kReleaseGrace);
    rearm_.push_back(s.id);
  }
}

void Sessions::rearmKeepalives() {
  std::erase_if(rearm_, [&](uint64_t id) {
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second->lost()) return true;
    Session& s = *it->second;
    if (s.livenessHolds != 0) return true;  // held again: re-armed at its release
    if (!heardRecently(s.sock.fd(), std::chrono::milliseconds(1000))) return false;
    setUserTimeout(s.sock.fd(), cfg_.peerTimeout);
    return true;
  });
}

void Sessions::finish(Channel& c) {
  hold(c, false);
  if (c.closedHere && c.whenDone) --closing_;
  if (c.whenDone) c.whenDone();
  c.session->channels.erase(c.id);
  shrinkIfSparse(c.session->channels);
  if (c.session->lost() && c.session->channels.empty()) reapable_.push_back(c.session->id);
  sessionCounters().subShared(telemetry::kChannels);
  channels_.erase(c.id);
  shrinkIfSparse(channels_);
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
  if (!rearm_.empty()) rearmKeepalives();
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

// ---- listening side ---------------------------------------------------------------------------

Result<wire::ListenHandle> Sessions::listen(const std::string& ip, uint16_t port, bool asDefault) {
  std::lock_guard lock(mu_);
  auto portOf = [](const sockaddr_storage& a) {
    wire::ListenHandle h;
    fillAddress(a, &h);
    return h.port;
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
  wire::ListenHandle h;
  fillAddress(listeners_[li].listener.addr, &h);
  h.listenId = (static_cast<uint64_t>(slotRef.generation) << 32) | index;
  if (asDefault) defaultListen_ = h.listenId;
  h.epoch = cfg_.epoch;
  h.process = process_;
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

Result<std::optional<Sessions::Incoming>> Sessions::nextOpen(uint64_t listenId, bool step) {
  std::lock_guard lock(mu_);
  if (step) stepLocked();
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
  sessionCounters().addShared(telemetry::kChannels);
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
  sessionCounters().addShared(telemetry::kChannels);
  if (s->ready())
    send(*s, wire::encode(request));
  else
    s->queued.push_back(id);
  flushPending();
  return id;
}

Result<std::optional<wire::Opened>> Sessions::opened(uint64_t channel, bool step) {
  std::lock_guard lock(mu_);
  if (step) stepLocked();
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
  if (c.remote != 0) {
    if (byeLost)
      lateByes_.push_back(LateBye{now() + kLostByeDelay, c.session->id, c.remote});
    else
      send(*c.session, wire::encode(wire::Close{c.remote}));
  }
  c.whenDone = std::move(whenDone);
  if (c.view.peerClosed || c.session->lost()) {
    finish(c);  // nothing of the channel can arrive any more
  } else {
    c.closedHere = true;
    if (c.whenDone) ++closing_;
  }
  flushPending();
}

std::string Sessions::peerName(uint64_t channel) {
  std::lock_guard lock(mu_);
  auto it = channels_.find(channel);
  return it == channels_.end() ? "unknown peer" : it->second->session->peer;
}

uint64_t Sessions::peerProcess(uint64_t channel) {
  std::lock_guard lock(mu_);
  auto it = channels_.find(channel);
  return it == channels_.end() ? 0 : it->second->session->peerProcess;
}

void Sessions::verdict(uint64_t channel, wire::Verdict v) {
  std::lock_guard lock(mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end() || it->second->remote == 0 || it->second->session->lost()) return;
  v.channel = it->second->remote;
  send(*it->second->session, wire::encode(v));
  flushPending();
}

void Sessions::takeVerdicts(uint64_t channel, std::vector<wire::Verdict>* out) {
  std::lock_guard lock(mu_);
  stepLocked();
  auto it = channels_.find(channel);
  if (it == channels_.end() || it->second->verdicts.empty()) return;
  for (auto& v : it->second->verdicts) out->push_back(std::move(v));
  it->second->verdicts.clear();
}

size_t Sessions::closing() const {
  std::lock_guard lock(mu_);
  return closing_;
}

}  // namespace pact::transport
