#include "transport/rail_probe.h"

#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"

namespace pact::transport {

namespace {

// A probe and its echo: magic, kind, the watch's id and the probe's time (echoed as sent).
constexpr uint32_t kMagic = 0x50524231;  // "PRB1"
constexpr uint8_t kProbe = 0, kEcho = 1;
struct Packet {
  uint32_t magic;
  uint8_t kind;
  uint8_t pad[3];
  uint64_t id;
  int64_t sentNs;
};
static_assert(sizeof(Packet) == 24);
// An acknowledgement (AckSource): the sink, the NCCL tag, the messages below upTo reported.
constexpr uint8_t kAck = 2;
struct AckPacket {
  uint32_t magic;
  uint8_t kind;
  uint8_t pad[3];
  uint64_t sink;
  uint32_t tag;
  uint32_t upTo;
};
static_assert(sizeof(AckPacket) == 24);

bool toSockaddr(const wire::ProbeAddress& a, sockaddr_storage* ss, socklen_t* len) {
  std::memset(ss, 0, sizeof *ss);
  if (a.family == 4) {
    auto* in = reinterpret_cast<sockaddr_in*>(ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(a.port);
    std::memcpy(&in->sin_addr, a.ip.data(), 4);
    *len = sizeof *in;
    return true;
  }
  if (a.family == 6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(a.port);
    std::memcpy(&in6->sin6_addr, a.ip.data(), 16);
    *len = sizeof *in6;
    return true;
  }
  return false;
}

}  // namespace

int64_t RailWatch::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(now().time_since_epoch()).count();
}

std::chrono::microseconds RailWatch::downTime() const {
  int64_t ns = downTotal_.load(std::memory_order_relaxed);
  if (const int64_t since = downSince_.load(std::memory_order_relaxed); since != 0) ns += RailWatch::nowNs() - since;
  return std::chrono::microseconds(ns / 1000);
}

std::shared_ptr<RailProber> RailProber::acquire() {
  static std::mutex mu;
  static std::weak_ptr<RailProber> current;
  std::lock_guard lock(mu);
  if (auto p = current.lock()) return p;
  std::shared_ptr<RailProber> p(new RailProber());
  current = p;
  return p;
}

RailProber::RailProber() {
  epoll_ = ScopedFd(::epoll_create1(EPOLL_CLOEXEC));
  wake_ = ScopedFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_.get();
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  thread_ = std::thread([this] { run(); });
}

RailProber::~RailProber() {
  stop_.store(true);
  wake();
  if (thread_.joinable()) thread_.join();
}

std::string RailProber::ipOf(const wire::ProbeAddress& a) {
  char text[INET6_ADDRSTRLEN] = "?";
  ::inet_ntop(a.family == 6 ? AF_INET6 : AF_INET, a.ip.data(), text, sizeof text);
  return text;
}

std::string RailProber::describe(const wire::ProbeAddress& a) {
  return (a.family == 6 ? "[" + ipOf(a) + "]" : ipOf(a)) + ":" + std::to_string(a.port);
}

ScopedFd RailProber::bindUdp(const std::string& ip, wire::ProbeAddress* out) {
  wire::ProbeAddress a;
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (::inet_pton(AF_INET, ip.c_str(), a.ip.data()) == 1) {
    a.family = 4;
  } else if (::inet_pton(AF_INET6, ip.c_str(), a.ip.data()) == 1) {
    a.family = 6;
  } else {
    errno = EINVAL;
    return ScopedFd();
  }
  toSockaddr(a, &ss, &len);
  ScopedFd fd(::socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    return ScopedFd();
  a.port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                         : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  *out = a;
  return fd;
}

int RailProber::socketFor(const std::string& ip, wire::ProbeAddress* out) {
  for (const Socket& s : sockets_)
    if (s.ip == ip) {
      *out = s.address;
      return s.fd.get();
    }
  ScopedFd fd = bindUdp(ip, out);
  if (!fd.valid()) return -1;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd.get();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd.get(), &ev) != 0) return -1;
  sockets_.push_back(Socket{ip, std::move(fd), *out});
  return sockets_.back().fd.get();
}

Result<wire::ProbeAddress> RailProber::ackAddress(const std::string& ip) {
  std::lock_guard lock(mu_);
  for (const Socket& s : ackSockets_)
    if (s.ip == ip) return s.address;
  wire::ProbeAddress a;
  ScopedFd fd = bindUdp(ip, &a);
  if (!fd.valid()) return Error{Status::kSystemError, "rail ack socket on " + ip + ": " + std::strerror(errno)};
  ackSockets_.push_back(Socket{ip, std::move(fd), a});
  return a;
}

void RailProber::dispatchAck(const void* packet) {
  AckPacket a;
  std::memcpy(&a, packet, sizeof a);
  for (const auto& weak : sinks_)
    if (auto sink = weak.lock(); sink && sink->id() == a.sink) sink->update(a.tag, a.upTo);
}

void RailProber::drainAcks() {
  std::lock_guard lock(mu_);
  for (const Socket& s : ackSockets_)
    for (;;) {
      AckPacket a{};
      const ssize_t n = ::recv(s.fd.get(), &a, sizeof a, MSG_DONTWAIT);
      if (n < 0) break;
      if (n == sizeof a && a.magic == kMagic && a.kind == kAck) dispatchAck(&a);
    }
}

Result<wire::ProbeAddress> RailProber::listen(const std::string& ip) {
  std::lock_guard lock(mu_);
  wire::ProbeAddress a;
  if (socketFor(ip, &a) < 0)
    return Error{Status::kSystemError, "rail probe socket on " + ip + ": " + std::strerror(errno)};
  return a;
}

Result<std::shared_ptr<RailWatch>> RailProber::watch(const std::string& ip, const wire::ProbeAddress& remote,
                                                     std::chrono::microseconds timeout) {
  std::lock_guard lock(mu_);
  wire::ProbeAddress local;
  const int fd = socketFor(ip, &local);
  if (fd < 0) return Error{Status::kSystemError, "rail probe socket on " + ip + ": " + std::strerror(errno)};
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (!toSockaddr(remote, &ss, &len))
    return Error{Status::kInvalidArgument, "rail probe address of family " + std::to_string(remote.family)};
  std::erase_if(watches_, [](const auto& w) { return w.expired(); });
  for (const auto& w : watches_)
    if (auto s = w.lock(); s && s->sock == fd && s->remoteLen == len && std::memcmp(&s->remote, &ss, len) == 0)
      return s;
  const int64_t t = RailWatch::nowNs();
  const int64_t to = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  std::shared_ptr<RailWatch> w(new RailWatch(to, describe(remote)));
  w->sock = fd;
  w->remote = ss;
  w->remoteLen = len;
  w->id = nextId_++;
  w->lastReply = t;  // up until silent for the timeout from now
  w->lastUp = t;
  w->interval = to / 4;
  w->nextProbe = t;
  w->hold = to;
  watches_.push_back(w);
  wake();  // the thread's wait may be longer than this watch's first interval
  return w;
}

void RailProber::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

void RailProber::answer(int fd) {
  for (;;) {
    Packet p{};
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const ssize_t n = ::recvfrom(fd, &p, sizeof p, 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n < 0) return;  // EAGAIN, or an ICMP error of an earlier probe (the rail's silence tells)
    if (n != sizeof p || p.magic != kMagic) continue;
    if (p.kind == kProbe) {
      p.kind = kEcho;
      ::sendto(fd, &p, sizeof p, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), len);
      continue;
    }
    if (p.kind != kEcho) continue;
    const int64_t t = RailWatch::nowNs();
    std::lock_guard lock(mu_);
    for (const auto& weak : watches_) {
      auto w = weak.lock();
      if (!w || w->id != p.id) continue;
      w->lastReply = t;
      if (!w->up() && t - w->downSince_.load(std::memory_order_relaxed) >= w->hold) {
        // Taken back: answered after its hold-down.
        w->downTotal_.fetch_add(t - w->downSince_.load(std::memory_order_relaxed), std::memory_order_relaxed);
        w->downSince_.store(0, std::memory_order_relaxed);
        w->lastUp = t;
        w->interval = w->timeoutNs_ / 4;
        w->nextProbe = t + w->interval;
        w->ups_.fetch_add(1, std::memory_order_relaxed);
        w->up_.store(true, std::memory_order_release);
        PACT_INFO("rail probe: %s answers again after %lld ms out", w->name().c_str(),
                  static_cast<long long>(w->downTime().count() / 1000));
      }
      break;
    }
  }
}

void RailProber::probeDue(int64_t t) {
  std::lock_guard lock(mu_);
  std::erase_if(sources_, [](const auto& w) { return w.expired(); });
  for (const auto& weak : sources_)
    if (auto src = weak.lock()) src->repeat(t);
  std::erase_if(watches_, [](const auto& w) { return w.expired(); });
  for (const auto& weak : watches_) {
    auto w = weak.lock();
    if (!w) continue;
    if (w->up()) w->lastReply = std::max(w->lastReply, w->heard_.load(std::memory_order_relaxed));
    if (w->up() && t - w->lastReply > w->timeoutNs_) {
      // Taken out. A rail that went down soon after it came back is held out longer.
      w->flaps = t - w->lastUp < std::chrono::nanoseconds(kFlapMemory).count() && w->downs() > 0 ? w->flaps + 1 : 0;
      w->hold = std::min<int64_t>(w->timeoutNs_ << std::min(w->flaps, 20),
                                  std::chrono::nanoseconds(kMaxHold).count());
      w->downSince_.store(t, std::memory_order_relaxed);
      w->downs_.fetch_add(1, std::memory_order_relaxed);
      w->up_.store(false, std::memory_order_release);
      w->interval = w->timeoutNs_ / 4;
      PACT_INFO("rail probe: %s silent for %lld ms (no probe answered, no data): out (held out at least %lld ms)", w->name().c_str(),
                static_cast<long long>((t - w->lastReply) / 1000000), static_cast<long long>(w->hold / 1000000));
    }
    if (t < w->nextProbe) continue;
    Packet p{kMagic, kProbe, {}, w->id, t};
    ::sendto(w->sock, &p, sizeof p, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&w->remote), w->remoteLen);
    if (!w->up())  // out: each unanswered probe waits twice as long for the next, up to the cap
      w->interval = std::min<int64_t>(w->interval * 2, std::chrono::nanoseconds(kMaxProbeInterval).count());
    w->nextProbe = t + std::max<int64_t>(w->interval, 1000000);
  }
}

std::shared_ptr<AckSink> RailProber::ackSink() {
  std::lock_guard lock(mu_);
  std::erase_if(sinks_, [](const auto& w) { return w.expired(); });
  // Ids unique to this process and unlikely to meet an old sender's: a random high half.
  static const uint64_t salt = static_cast<uint64_t>(RailWatch::nowNs()) << 32;
  std::shared_ptr<AckSink> sink(new AckSink(salt ^ nextId_++));
  sinks_.push_back(sink);
  return sink;
}

std::shared_ptr<AckSource> RailProber::ackSource(uint64_t sink, const std::vector<std::shared_ptr<RailWatch>>& paths,
                                                 const std::vector<wire::ProbeAddress>& to) {
  std::vector<AckSource::Path> ps;
  for (size_t r = 0; r < paths.size() && r < to.size(); ++r) {
    AckSource::Path p{paths[r], {}, 0};
    if (toSockaddr(to[r], &p.to, &p.toLen)) ps.push_back(std::move(p));
  }
  std::shared_ptr<AckSource> src(new AckSource(sink, std::move(ps)));
  std::lock_guard lock(mu_);
  sources_.push_back(src);
  return src;
}

bool AckSink::acked(uint32_t tag, uint32_t seq) const {
  std::lock_guard lock(mu_);
  for (const auto& [t, upTo] : upTo_)
    if (t == tag) return seq < upTo;
  return false;
}

void AckSink::update(uint32_t tag, uint32_t upTo) {
  std::lock_guard lock(mu_);
  for (auto& [t, u] : upTo_)
    if (t == tag) {
      u = std::max(u, upTo);
      return;
    }
  upTo_.emplace_back(tag, upTo);
}

void AckSource::delivered(uint32_t tag, uint32_t seq, bool now) {
  std::lock_guard lock(mu_);
  Tag* st = nullptr;
  for (Tag& x : tags_)
    if (x.tag == tag) st = &x;
  if (st == nullptr) st = &tags_.emplace_back(Tag{tag, 0, {}});
  if (seq != st->next) {
    if (seq > st->next) st->ahead.push_back(seq);
    return;
  }
  ++st->next;
  for (bool more = true; more;) {  // reports above the gap it closed
    more = false;
    for (size_t i = 0; i < st->ahead.size(); ++i)
      if (st->ahead[i] == st->next) {
        ++st->next;
        st->ahead[i] = st->ahead.back();
        st->ahead.pop_back();
        more = true;
        break;
      }
  }
  changed_ = RailWatch::nowNs();
  if (now)
    send(tag, st->next);
  else if (lazy_.fetch_add(1, std::memory_order_relaxed) == 0)
    lazySince_.store(changed_, std::memory_order_relaxed);
}

void AckSource::sendLazy() {
  std::lock_guard lock(mu_);
  if (lazy_.exchange(0) != 0) sendAll();
}

void AckSource::sendAll() const {
  for (const Tag& x : tags_) send(x.tag, x.next);
}

void AckSource::send(uint32_t tag, uint32_t upTo) const {
  AckPacket a{kMagic, kAck, {}, sink_, tag, upTo};
  for (const Path& p : paths_)
    if (p.watch->up()) {  // the first live path; the repeats go the same way while it lives
      ::sendto(p.watch->sock, &a, sizeof a, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&p.to), p.toLen);
      return;
    }
}

void AckSource::repeat(int64_t t) const {
  std::lock_guard lock(mu_);
  if (lazy_.exchange(0) != 0) {  // the receiver made no call that sent them: the thread's loop does
    repeated_ = t;
    sendAll();
    return;
  }
  if (t - changed_ > std::chrono::nanoseconds(RailProber::kAckRepeat).count() ||
      t - repeated_ < std::chrono::nanoseconds(RailProber::kAckInterval).count())
    return;
  repeated_ = t;
  sendAll();
}

void RailProber::run() {
  int64_t lastLoop = RailWatch::nowNs();
  while (!stop_.load()) {
    int64_t wait = 5;  // ms: well under a quarter of any sensible timeout
    {
      std::lock_guard lock(mu_);
      if (watches_.empty()) wait = 100;
    }
    epoll_event events[8];
    const int n = ::epoll_wait(epoll_.get(), events, 8, static_cast<int>(wait));
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_.get()) {
        uint64_t v = 0;
        [[maybe_unused]] ssize_t r = ::read(wake_.get(), &v, sizeof v);
        continue;
      }
      answer(events[i].data.fd);
    }
    const int64_t t = RailWatch::nowNs();
    {
      // A loop late by more than half a watch's timeout means this thread was starved (a loaded
      // machine): what it did not hear while it did not run says nothing of the rail, so the
      // silence starts anew.
      std::lock_guard lock(mu_);
      for (const auto& weak : watches_)
        if (auto w = weak.lock(); w && w->up() && t - lastLoop > w->timeoutNs_ / 2) w->lastReply = t;
    }
    lastLoop = t;
    probeDue(t);
  }
}

}  // namespace pact::transport
