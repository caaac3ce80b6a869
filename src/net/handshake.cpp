// listen / connect / accept: the non-blocking connection handshake over the control socket.
//   connector                          listener
//   HELLO{listen id, epoch, worker} -> checks version, listen id, epoch
//                                   <- ACCEPT{tag space, epoch, worker} | REFUSE{field, values}
// connect and accept each step their side and return a null comm until done, so both may be
// called alternately from one thread (NCCL's GDR probe).
#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/log.h"
#include "net/net.h"

namespace pact::net {

namespace {

constexpr size_t kScratchOffset = 64;  // where connect keeps its state pointer inside the handle
static_assert(kScratchOffset >= wire::kHandleAddressBytes &&
              kScratchOffset + sizeof(void*) <= wire::kHandleSize);

uint64_t randomId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng() | 1;
}

std::string peerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char host[INET6_ADDRSTRLEN] = "?";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* s = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
    port = ntohs(s->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
    port = ntohs(s->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

Status refuse(ControlSocket& sock, wire::Field field, uint64_t ours, uint64_t theirs,
              const std::string& peer) {
  PACT_WARN("handshake with %s refused: %s differs (local %llu, remote %llu)", peer.c_str(),
            wire::fieldName(field), static_cast<unsigned long long>(ours),
            static_cast<unsigned long long>(theirs));
  ignore(sock.send(wire::encode(wire::Refuse{field, ours, theirs})));
  return Status::kRefused;
}

bool expired(TimePoint start, const Params& p) { return now() - start > p.peer_timeout; }

// PACT_AUTH_KEY_FILE: the listener proves the key over the connector's nonce in its accept, the
// connector over the listener's nonce in a proof frame; nobody gets a comm before both verified.
constexpr std::string_view kAcceptLabel = "pact-plugin-accept-v1";
constexpr std::string_view kProofLabel = "pact-plugin-proof-v1";

}  // namespace

// A connection the listener took, not yet a comm.
struct ListenPending {
  ControlSocket sock;
  TimePoint start;
  // With authentication: accepted, waiting for the connector's proof.
  bool awaitingProof = false;
  wire::Hello hello;
  auth::Nonce nonce{};
  uint32_t tagSpace = 0;
};

class ListenComm {
 public:
  static constexpr uint32_t kMagic = 0x4e54534c;  // "LSTN"
  uint32_t magic = kMagic;
  std::shared_ptr<DeviceCtx> dev;
  Listener listener;
  uint64_t listenId = 0;
  std::vector<ListenPending> pending;
  ~ListenComm() { magic = 0; }
};

struct ConnectState {
  std::shared_ptr<DeviceCtx> dev;
  ControlSocket sock;
  wire::ListenHandle handle;
  TimePoint start = now();
  std::string peer;
  ChannelConfig channel;
  auth::Nonce nonce{};
};

Status Net::listen(int dev, int trafficClass, void* handle, ListenComm** out) {
  *out = nullptr;
  auto d = device(dev, trafficClass);
  if (!d.ok()) {
    PACT_WARN("listen on device %d: %s", dev, d.error().message.c_str());
    return d.status();
  }
  const ucx::DeviceInfo& info = (*d)->info();
  if (info.ipAddress.empty()) {
    PACT_WARN("listen on %s: the device has no IP address for the connection bootstrap",
              info.name.c_str());
    return Status::kSystemError;
  }
  auto l = listenOn(info.ipAddress);
  if (!l.ok()) {
    PACT_WARN("listen on %s (%s): %s", info.name.c_str(), info.ipAddress.c_str(),
              l.error().message.c_str());
    return l.status();
  }
  auto lc = std::make_unique<ListenComm>();
  lc->dev = *d;
  lc->listener = std::move(l.value());
  lc->listenId = randomId();
  wire::ListenHandle h;
  h.family = lc->listener.addr.ss_family;
  h.listenId = lc->listenId;
  h.epoch = params_.epoch;
  if (h.family == AF_INET) {
    auto* s = reinterpret_cast<sockaddr_in*>(&lc->listener.addr);
    h.port = ntohs(s->sin_port);
    std::memcpy(h.addr, &s->sin_addr, 4);
  } else {
    auto* s = reinterpret_cast<sockaddr_in6*>(&lc->listener.addr);
    h.port = ntohs(s->sin6_port);
    std::memcpy(h.addr, &s->sin6_addr, 16);
  }
  wire::encodeHandle(h, static_cast<uint8_t*>(handle));
  PACT_DEBUG("listen on %s: %s port %u", info.name.c_str(), info.ipAddress.c_str(), h.port);
  *out = lc.release();
  return Status::kOk;
}

Status Net::connect(int dev, int trafficClass, void* handle, SendComm** out) {
  *out = nullptr;
  auto* bytes = static_cast<uint8_t*>(handle);
  ConnectState* st = nullptr;
  std::memcpy(&st, bytes + kScratchOffset, sizeof st);
  auto finish = [&](Status s) {
    delete st;
    st = nullptr;
    std::memcpy(bytes + kScratchOffset, &st, sizeof st);
    return s;
  };
  if (st == nullptr) {
    auto h = wire::decodeHandle(std::span<const uint8_t>(bytes, wire::kHandleSize));
    if (!h.ok()) {
      PACT_WARN("connect: bad handle: %s", h.error().message.c_str());
      return h.status();
    }
    auto d = device(dev, trafficClass);
    if (!d.ok()) {
      PACT_WARN("connect on device %d: %s", dev, d.error().message.c_str());
      return d.status();
    }
    const ChannelConfig channel = channelFor(trafficClass);
    PACT_INFO("connect on %s: traffic class %s, profile %s", (*d)->info().name.c_str(),
              trafficClass < 0 ? "DEFAULT" : std::to_string(trafficClass).c_str(),
              params_.classes.forNccl(trafficClass).describe().c_str());
    auto sock = ControlSocket::connectTo(*h);
    if (!sock.ok()) {
      PACT_WARN("connect: %s", sock.error().message.c_str());
      return sock.status();
    }
    st = new ConnectState{*d, std::move(sock.value()), *h, now(), "", channel};
    std::memcpy(bytes + kScratchOffset, &st, sizeof st);
    wire::Hello hello{h->listenId, randomId(), params_.epoch, (*d)->worker().address()};
    st->nonce = auth::freshNonce();
    hello.auth = params_.auth_key.enabled() ? 1 : 0;
    hello.nonce = st->nonce;
    st->channel = channel;
    hello.unordered = channel.ordered ? 0 : 1;
    hello.lanes = static_cast<uint8_t>(channel.ordered ? 1 : channel.lanes);
    hello.chunk = channel.chunk;
    hello.rails = static_cast<uint8_t>((*d)->rails());
    ignore(st->sock.send(wire::encode(hello)));
  }
  Status fl = st->sock.flush();
  if (isError(fl)) {
    PACT_WARN("connect: listener unreachable (connection refused or reset)");
    return finish(Status::kRemoteError);
  }
  if (st->peer.empty() && st->sock.connected()) st->peer = peerName(st->sock.fd());
  if (st->handle.epoch != params_.epoch && fl == Status::kOk) {
    // The hello is out, so the listener refuses too; this side knows already.
    PACT_WARN("handshake with %s refused: epoch differs (local %llu, remote %llu)",
              st->peer.c_str(), static_cast<unsigned long long>(params_.epoch),
              static_cast<unsigned long long>(st->handle.epoch));
    return finish(Status::kRefused);
  }
  auto f = st->sock.poll();
  if (!f.ok()) {
    PACT_WARN("connect to %s: %s", st->peer.c_str(), f.error().message.c_str());
    return finish(Status::kRemoteError);
  }
  if (!f.value()) {
    if (!expired(st->start, params_)) return Status::kOk;
    PACT_WARN("connect to %s: no answer within PACT_PEER_TIMEOUT", st->peer.c_str());
    return finish(Status::kTimeout);
  }
  const Frame& frame = *f.value();
  if (frame.header.version != wire::kVersion)
    return finish(refuse(st->sock, wire::Field::kVersion, wire::kVersion, frame.header.version, st->peer));
  if (frame.header.type == wire::FrameType::kRefuse) {
    auto r = wire::decodeRefuse(frame.body);
    if (r.ok())
      PACT_WARN("handshake refused by %s: %s differs (remote %llu, local %llu)", st->peer.c_str(),
                wire::fieldName(r->field), static_cast<unsigned long long>(r->expected),
                static_cast<unsigned long long>(r->got));
    else
      PACT_WARN("handshake refused by %s (%s)", st->peer.c_str(), r.error().message.c_str());
    return finish(Status::kRefused);
  }
  auto acc = frame.header.type == wire::FrameType::kAccept
                 ? wire::decodeAccept(frame.body)
                 : Result<wire::Accept>(Status::kInvalidArgument, "expected an accept frame");
  if (!acc.ok()) {
    PACT_WARN("connect to %s: %s", st->peer.c_str(), acc.error().message.c_str());
    return finish(Status::kInvalidArgument);
  }
  if (acc->epoch != params_.epoch)
    return finish(refuse(st->sock, wire::Field::kEpoch, params_.epoch, acc->epoch, st->peer));
  if (const auth::Key& key = params_.auth_key; key.enabled()) {
    if (!auth::verify(key.secret, kAcceptLabel, st->nonce, acc->nonce, acc->mac))
      return finish(refuse(st->sock, wire::Field::kAuth, 1, 0, st->peer));
    ignore(st->sock.send(wire::encode(wire::Proof{auth::mac(key.secret, kProofLabel, acc->nonce, st->nonce)})));
  }
  std::lock_guard lock(st->dev->mutex());
  auto comm = std::make_unique<SendComm>(st->dev, std::move(st->sock), acc->tagSpace, st->peer,
                                         st->channel);
  Status s = comm->connectLanes(acc->railAddresses);
  if (s != Status::kOk) return finish(s);
  PACT_INFO("send comm %p connected to %s on %s (tag space %u, %s, %d lane(s), chunk %zu)",
            static_cast<void*>(comm.get()), st->peer.c_str(), st->dev->info().name.c_str(),
            acc->tagSpace, st->channel.ordered ? "ordered" : "unordered",
            st->channel.ordered ? 1 : st->channel.lanes, st->channel.chunk);
  *out = comm.release();
  return finish(Status::kOk);
}

Status Net::accept(ListenComm* lc, RecvComm** out) {
  *out = nullptr;
  if (lc == nullptr || lc->magic != ListenComm::kMagic) return Status::kInvalidArgument;
  for (;;) {
    auto fd = acceptOne(lc->listener.fd.get());
    if (!fd.ok()) {
      PACT_WARN("accept: %s", fd.error().message.c_str());
      return fd.status();
    }
    if (!fd->valid()) break;
    ListenPending p;
    p.sock = ControlSocket(std::move(fd.value()));
    p.start = now();
    lc->pending.push_back(std::move(p));
  }
  for (size_t i = 0; i < lc->pending.size();) {
    auto& p = lc->pending[i];
    auto drop = [&] { lc->pending.erase(lc->pending.begin() + static_cast<long>(i)); };
    const std::string peer = peerName(p.sock.fd());
    auto f = p.sock.poll();
    if (!f.ok() || (!f.value() && expired(p.start, params_))) {
      PACT_INFO("accept: dropped connection from %s: %s", peer.c_str(),
                f.ok() ? "no hello within PACT_PEER_TIMEOUT" : f.error().message.c_str());
      drop();
      continue;
    }
    if (!f.value()) {
      ++i;
      continue;
    }
    const Frame& frame = *f.value();
    if (p.awaitingProof) {
      RecvComm* comm = nullptr;
      Status s = finishAuthenticated(lc, p, frame, peer, &comm);
      drop();
      if (s != Status::kOk) return s;
      *out = comm;
      return Status::kOk;
    }
    Status refused = Status::kOk;
    auto hello = wire::decodeHello(frame.body);
    if (frame.header.version != wire::kVersion)
      refused = refuse(p.sock, wire::Field::kVersion, wire::kVersion, frame.header.version, peer);
    else if (frame.header.type != wire::FrameType::kHello || !hello.ok()) {
      PACT_WARN("accept: malformed hello from %s: %s", peer.c_str(),
                hello.ok() ? "unexpected frame type" : hello.error().message.c_str());
      drop();
      continue;
    } else if (hello->listenId != lc->listenId)
      refused = refuse(p.sock, wire::Field::kListenId, lc->listenId, hello->listenId, peer);
    else if (hello->epoch != params_.epoch)
      refused = refuse(p.sock, wire::Field::kEpoch, params_.epoch, hello->epoch, peer);
    else if (hello->auth != (params_.auth_key.enabled() ? 1 : 0))
      refused = refuse(p.sock, wire::Field::kAuth, params_.auth_key.enabled() ? 1 : 0, hello->auth, peer);
    if (refused != Status::kOk) {
      drop();
      return refused;
    }
    std::lock_guard lock(lc->dev->mutex());
    auto space = allocTagSpace(*lc->dev);
    if (!space.ok()) {
      PACT_WARN("accept: %s", space.error().message.c_str());
      return space.status();
    }
    wire::Accept accept{*space, params_.epoch, lc->dev->addresses()};
    if (const auth::Key& key = params_.auth_key; key.enabled()) {
      p.nonce = auth::freshNonce();
      accept.nonce = p.nonce;
      accept.mac = auth::mac(key.secret, kAcceptLabel, hello->nonce, p.nonce);
      ignore(p.sock.send(wire::encode(accept)));
      p.awaitingProof = true;
      p.hello = *hello;
      p.tagSpace = *space;
      ++i;
      continue;
    }
    ignore(p.sock.send(wire::encode(accept)));
    *out = newRecvComm(lc, std::move(p.sock), *space, *hello, peer);
    drop();
    return Status::kOk;
  }
  return Status::kOk;
}

// The connector's answer to an authenticated accept: its proof (then the comm exists) or a
// refusal (then accept fails, as connect did).
Status Net::finishAuthenticated(ListenComm* lc, ListenPending& p, const Frame& frame,
                                const std::string& peer, RecvComm** out) {
  if (frame.header.type == wire::FrameType::kRefuse) {
    auto r = wire::decodeRefuse(frame.body);
    PACT_WARN("accept: %s refused the handshake (%s)", peer.c_str(),
              r.ok() ? wire::fieldName(r->field) : r.error().message.c_str());
    return Status::kRefused;
  }
  auto proof = frame.header.type == wire::FrameType::kProof
                   ? wire::decodeProof(frame.body)
                   : Result<wire::Proof>(Status::kInvalidArgument, "expected a proof frame");
  if (!proof.ok() ||
      !auth::verify(params_.auth_key.secret, kProofLabel, p.nonce, p.hello.nonce, proof->mac)) {
    return refuse(p.sock, wire::Field::kAuth, 1, 0, peer);
  }
  std::lock_guard lock(lc->dev->mutex());
  *out = newRecvComm(lc, std::move(p.sock), p.tagSpace, p.hello, peer);
  return Status::kOk;
}

RecvComm* Net::newRecvComm(ListenComm* lc, ControlSocket sock, uint32_t space,
                           const wire::Hello& hello, const std::string& peer) {
  // The sender's channel, with this process's PACT_FAULT (reject, lose_remote_done).
  ChannelConfig channel = channelFor(-1);
  channel.ordered = hello.unordered == 0;
  channel.lanes = hello.lanes;
  channel.chunk = hello.chunk;
  channel.rails = static_cast<int>(std::min<size_t>({hello.lanes, hello.rails, lc->dev->rails()}));
  auto* comm = new RecvComm(lc->dev, std::move(sock), space, peer, channel);
  PACT_INFO("recv comm %p accepted from %s on %s (tag space %u)", static_cast<void*>(comm),
            peer.c_str(), lc->dev->info().name.c_str(), space);
  return comm;
}

Status Net::closeListen(ListenComm* lc) {
  if (lc == nullptr) return Status::kOk;
  if (lc->magic != ListenComm::kMagic) return Status::kInvalidArgument;
  delete lc;
  return Status::kOk;
}

}  // namespace pact::net
