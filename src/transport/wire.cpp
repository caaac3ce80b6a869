#include "transport/wire.h"

#include "common/codec.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace pact::wire {

namespace {

using Writer = ByteWriter;
using Reader = ByteReader;

std::vector<uint8_t> frame(FrameType t, const Writer& body) {
  return pact::frame(kMagic, kVersion, static_cast<uint16_t>(t), body);
}

}  // namespace

void encodeHandle(const ListenHandle& h, uint8_t out[kHandleSize]) {
  Writer w;
  w.u32(kMagic);
  w.u16(kVersion);
  w.u16(h.family);
  w.u16(h.port);
  w.out.insert(w.out.end(), h.addr, h.addr + 16);
  w.u64(h.listenId);
  w.u64(h.epoch);
  w.u64(h.process);
  std::memset(out, 0, kHandleSize);
  std::memcpy(out, w.out.data(), w.out.size());
}

Result<ListenHandle> decodeHandle(std::span<const uint8_t> in) {
  Reader r(in.first(std::min(in.size(), kHandleAddressBytes)), "handle");
  uint32_t magic = 0;
  uint16_t version = 0;
  ListenHandle h;
  if (!r.u32(&magic, "magic") || !r.u16(&version, "version")) return r.error();
  if (magic != kMagic)
    return Error{Status::kInvalidArgument, "handle.magic: not a pact handle (wrong plugin on the peer?)"};
  if (version != kVersion)
    return Error{Status::kRefused, "handle.version: peer speaks wire version " +
                                       std::to_string(version) + ", this side " + std::to_string(kVersion)};
  if (!r.u16(&h.family, "family") || !r.u16(&h.port, "port") || !r.raw(h.addr, 16, "addr") ||
      !r.u64(&h.listenId, "listen_id") || !r.u64(&h.epoch, "epoch") ||
      !r.u64(&h.process, "process"))
    return r.error();
  if (h.family != AF_INET && h.family != AF_INET6)
    return Error{Status::kInvalidArgument, "handle.family: " + std::to_string(h.family) + " is not IPv4/IPv6"};
  if (h.port == 0) return Error{Status::kInvalidArgument, "handle.port: 0"};
  if (h.process == 0) return Error{Status::kInvalidArgument, "handle.process: 0"};
  return h;
}

Result<Header> decodeHeader(std::span<const uint8_t> in) {
  Reader r(in, "frame");
  uint32_t magic = 0;
  uint16_t type = 0;
  Header h;
  if (!r.u32(&magic, "magic") || !r.u16(&h.version, "version") || !r.u16(&type, "type") ||
      !r.u32(&h.length, "length"))
    return r.error();
  if (magic != kMagic) return Error{Status::kInvalidArgument, "frame.magic: not a pact frame"};
  if (type < 1 || type > static_cast<uint16_t>(FrameType::kVerdict) || type == kRetiredEngineFrame)
    return Error{Status::kInvalidArgument, "frame.type: unknown type " + std::to_string(type)};
  if (h.length > kMaxBody)
    return Error{Status::kInvalidArgument, "frame.length: " + std::to_string(h.length) +
                                               " exceeds " + std::to_string(kMaxBody)};
  h.type = static_cast<FrameType>(type);
  return h;
}

const char* fieldName(Field f) {
  switch (f) {
    case Field::kMagic: return "magic";
    case Field::kVersion: return "wire version";
    case Field::kListenId: return "listen id";
    case Field::kEpoch: return "epoch";
    case Field::kAuth: return "authentication";
    case Field::kCapacity: return "capacity";
  }
  return "unknown field";
}

std::string describe(const Refuse& r, bool byPeer) {
  switch (r.field) {
    case Field::kListenId:
      return "listen id " + std::to_string(r.got) + " is not listening (closed)";
    case Field::kCapacity:
      return "no capacity left (limit " + std::to_string(r.expected) + ")";
    case Field::kVersion:
      // An open's payload the listener could not read: it knows only its own version.
      if (r.got == 0) return "the open was not readable at wire version " + std::to_string(r.expected);
      break;
    default:
      break;
  }
  const uint64_t local = byPeer ? r.got : r.expected, remote = byPeer ? r.expected : r.got;
  return std::string(fieldName(r.field)) + " differs (local " + std::to_string(local) + ", remote " +
         std::to_string(remote) + ")";
}

std::vector<uint8_t> encode(const Hello& m) {
  Writer w;
  w.u64(m.process);
  w.u64(m.epoch);
  w.u64(m.listenId);
  w.u8(m.auth);
  for (uint8_t b : m.nonce) w.u8(b);
  return frame(FrameType::kHello, w);
}

std::vector<uint8_t> encode(const Accept& m) {
  Writer w;
  w.u64(m.process);
  w.u64(m.epoch);
  for (uint8_t b : m.nonce) w.u8(b);
  for (uint8_t b : m.mac) w.u8(b);
  return frame(FrameType::kAccept, w);
}

std::vector<uint8_t> encode(const Proof& m) {
  Writer w;
  for (uint8_t b : m.mac) w.u8(b);
  return frame(FrameType::kProof, w);
}

namespace {
void putRefuse(Writer& w, const Refuse& m) {
  w.u16(static_cast<uint16_t>(m.field));
  w.u64(m.expected);
  w.u64(m.got);
}
bool getRefuse(Reader& r, Refuse* m) {
  uint16_t field = 0;
  if (!r.u16(&field, "field") || !r.u64(&m->expected, "expected") || !r.u64(&m->got, "got"))
    return false;
  if (field < 1 || field > static_cast<uint16_t>(Field::kCapacity))
    return r.fail("field", "unknown field " + std::to_string(field));
  m->field = static_cast<Field>(field);
  return true;
}
}  // namespace

std::vector<uint8_t> encode(const Refuse& m) {
  Writer w;
  putRefuse(w, m);
  return frame(FrameType::kRefuse, w);
}

namespace {
// Open and Opened: two ids and the face's payload.
std::vector<uint8_t> channelFrame(FrameType t, uint64_t a, uint64_t b, const std::vector<uint8_t>& payload) {
  Writer w;
  w.u64(a);
  w.u64(b);
  w.bytes(payload);
  return frame(t, w);
}
}  // namespace

std::vector<uint8_t> encode(const Open& m) {
  return channelFrame(FrameType::kOpen, m.listenId, m.channel, m.payload);
}

std::vector<uint8_t> encode(const Opened& m) {
  return channelFrame(FrameType::kOpened, m.channel, m.peerChannel, m.payload);
}

void putProbes(Writer& w, const std::vector<ProbeAddress>& probes) {
  const size_t n = std::min(probes.size(), kMaxRails);
  w.u8(static_cast<uint8_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.u8(probes[i].family);
    w.raw(probes[i].ip.data(), probes[i].ip.size());
    w.u16(probes[i].port);
  }
}
bool getProbes(Reader& r, std::vector<ProbeAddress>* probes) {
  uint8_t n = 0;
  if (!r.u8(&n, "probes")) return false;
  if (n > kMaxRails) return r.fail("probes", std::to_string(n) + " outside 0..8");
  probes->resize(n);
  for (auto& p : *probes) {
    if (!r.u8(&p.family, "probe_family") || !r.raw(p.ip.data(), p.ip.size(), "probe_ip") ||
        !r.u16(&p.port, "probe_port"))
      return false;
    if (p.family != 0 && p.family != 4 && p.family != 6)
      return r.fail("probe_family", std::to_string(p.family) + " is not 0, 4 or 6");
    if (p.family != 0 && p.port == 0) return r.fail("probe_port", "0");
  }
  return true;
}

namespace {
void putContract(Writer& w, const Contract& c) {
  w.u8(c.verify);
  w.u8(c.retries);
  w.u8(c.sealed);
  w.u64(c.timeoutUs);
}
bool getContract(Reader& r, Contract* c) {
  if (!r.u8(&c->verify, "verify") || !r.u8(&c->retries, "retries") || !r.u8(&c->sealed, "sealed") ||
      !r.u64(&c->timeoutUs, "timeout_us"))
    return false;
  if (c->verify > 2) return r.fail("verify", std::to_string(c->verify) + " is not 0, 1 or 2");
  if (c->retries > kMaxRetries)
    return r.fail("retries", std::to_string(c->retries) + " outside 0.." + std::to_string(kMaxRetries));
  if (c->sealed > 1) return r.fail("sealed", std::to_string(c->sealed) + " is not 0 or 1");
  if (c->timeoutUs > kMaxTimeoutUs)
    return r.fail("timeout_us", std::to_string(c->timeoutUs) + " is more than an hour");
  return true;
}
}  // namespace

std::vector<uint8_t> encode(const CommShape& m) {
  Writer w;
  w.u16(static_cast<uint16_t>(m.unordered | (m.lanes << 8)));
  w.u16(m.rails);
  w.u64(m.chunk);
  putContract(w, m.contract);
  putProbes(w, m.probes);
  w.u64(m.ackSink);
  putProbes(w, m.ackTo);
  return w.out;
}

std::vector<uint8_t> encode(const CommAccept& m) {
  Writer w;
  w.u32(m.tagSpace);
  w.u16(static_cast<uint16_t>(m.railAddresses.size()));
  for (const auto& a : m.railAddresses) w.bytes(a);
  putContract(w, m.contract);
  putProbes(w, m.probes);
  return w.out;
}

std::vector<uint8_t> encode(const Verdict& m) {
  Writer w;
  w.u64(m.channel);
  w.u32(m.tag);
  w.u32(m.seq);
  w.u8(static_cast<uint8_t>(m.kind));
  const size_t n = m.kind == VerdictKind::kResend ? std::min(m.pieces.size(), kMaxResendList) : 0;
  w.u16(static_cast<uint16_t>(n));
  for (size_t i = 0; i < n; ++i) w.u32(m.pieces[i]);
  return frame(FrameType::kVerdict, w);
}

std::vector<uint8_t> encode(const OpenRefused& m) {
  Writer w;
  w.u64(m.channel);
  putRefuse(w, m.why);
  return frame(FrameType::kOpenRefused, w);
}

std::vector<uint8_t> encode(const Close& m) {
  Writer w;
  w.u64(m.channel);
  return frame(FrameType::kClose, w);
}

std::vector<uint8_t> encode(const Abort& m) {
  Writer w;
  w.u64(m.channel);
  const std::string_view reason = std::string_view(m.reason).substr(0, kMaxAbortReason);
  std::vector<uint8_t> text(reason.begin(), reason.end());
  if (text.empty()) text.push_back('?');
  for (uint8_t& c : text)
    if (c < 0x20 || c > 0x7e) c = '?';  // decodeAbort accepts printable ASCII only
  w.bytes(text);
  return frame(FrameType::kAbort, w);
}

std::vector<uint8_t> encodeBye() { return frame(FrameType::kBye, Writer{}); }

Result<Hello> decodeHello(std::span<const uint8_t> body) {
  Reader r(body, "hello");
  Hello m;
  if (!r.u64(&m.process, "process") || !r.u64(&m.epoch, "epoch") ||
      !r.u64(&m.listenId, "listen_id") || !r.u8(&m.auth, "auth") ||
      !r.raw(m.nonce.data(), m.nonce.size(), "nonce") || !r.done())
    return r.error();
  if (m.auth > 1)
    return Error{Status::kInvalidArgument, "hello.auth: expected 0 or 1, got " + std::to_string(m.auth)};
  if (m.process == 0) return Error{Status::kInvalidArgument, "hello.process: 0"};
  return m;
}

Result<Accept> decodeAccept(std::span<const uint8_t> body) {
  Reader r(body, "accept");
  Accept m;
  if (!r.u64(&m.process, "process") || !r.u64(&m.epoch, "epoch") ||
      !r.raw(m.nonce.data(), m.nonce.size(), "nonce") || !r.raw(m.mac.data(), m.mac.size(), "mac") ||
      !r.done())
    return r.error();
  if (m.process == 0) return Error{Status::kInvalidArgument, "accept.process: 0"};
  return m;
}

Result<Proof> decodeProof(std::span<const uint8_t> body) {
  Reader r(body, "proof");
  Proof m;
  if (!r.raw(m.mac.data(), m.mac.size(), "mac") || !r.done()) return r.error();
  return m;
}

Result<Refuse> decodeRefuse(std::span<const uint8_t> body) {
  Reader r(body, "refuse");
  Refuse m;
  if (!getRefuse(r, &m) || !r.done()) return r.error();
  return m;
}

Result<Open> decodeOpen(std::span<const uint8_t> body) {
  Reader r(body, "open");
  Open m;
  if (!r.u64(&m.listenId, "listen_id") || !r.u64(&m.channel, "channel") ||
      !r.bytes(&m.payload, kMaxPayload, "payload", 0) || !r.done())
    return r.error();
  if (m.channel == 0) return Error{Status::kInvalidArgument, "open.channel: 0"};
  return m;
}

Result<Opened> decodeOpened(std::span<const uint8_t> body) {
  Reader r(body, "opened");
  Opened m;
  if (!r.u64(&m.channel, "channel") || !r.u64(&m.peerChannel, "peer_channel") ||
      !r.bytes(&m.payload, kMaxPayload, "payload", 0) || !r.done())
    return r.error();
  if (m.channel == 0 || m.peerChannel == 0)
    return Error{Status::kInvalidArgument, "opened.channel: 0"};
  return m;
}

Result<CommShape> decodeCommShape(std::span<const uint8_t> payload) {
  Reader r(payload, "comm_shape");
  CommShape m;
  uint16_t channel = 0, rails = 0;
  if (!r.u16(&channel, "order_lanes") || !r.u16(&rails, "rails") || !r.u64(&m.chunk, "chunk") ||
      !getContract(r, &m.contract) || !getProbes(r, &m.probes) || !r.u64(&m.ackSink, "ack_sink") ||
      !getProbes(r, &m.ackTo) || !r.done())
    return r.error();
  if (rails < 1 || rails > kMaxRails)
    return Error{Status::kInvalidArgument, "comm_shape.rails: " + std::to_string(rails) + " outside 1..8"};
  m.rails = static_cast<uint8_t>(rails);
  m.unordered = static_cast<uint8_t>(channel & 0xff);
  m.lanes = static_cast<uint8_t>(channel >> 8);
  if (m.unordered > 1)
    return Error{Status::kInvalidArgument, "comm_shape.order: " + std::to_string(m.unordered) + " is not 0 or 1"};
  if (m.lanes < 1 || m.lanes > kMaxLanes)
    return Error{Status::kInvalidArgument, "comm_shape.lanes: " + std::to_string(m.lanes) + " outside 1..16"};
  if (m.unordered && (m.chunk < kMinChunk || m.chunk > kMaxChunk || (m.chunk & (m.chunk - 1)) != 0))
    return Error{Status::kInvalidArgument,
                 "comm_shape.chunk: " + std::to_string(m.chunk) + " is not a power of two in [4096, 2^30]"};
  return m;
}

Result<CommAccept> decodeCommAccept(std::span<const uint8_t> payload) {
  Reader r(payload, "comm_accept");
  CommAccept m;
  uint16_t rails = 0;
  if (!r.u32(&m.tagSpace, "tag_space") || !r.u16(&rails, "rails")) return r.error();
  if (rails < 1 || rails > kMaxRails)
    return Error{Status::kInvalidArgument, "comm_accept.rails: " + std::to_string(rails) + " outside 1..8"};
  m.railAddresses.resize(rails);
  for (auto& a : m.railAddresses)
    if (!r.bytes(&a, kMaxWorkerAddress, "worker_address")) return r.error();
  if (!getContract(r, &m.contract) || !getProbes(r, &m.probes) || !r.done()) return r.error();
  return m;
}

Result<Verdict> decodeVerdict(std::span<const uint8_t> body) {
  Reader r(body, "verdict");
  Verdict m;
  uint8_t kind = 0;
  uint16_t n = 0;
  if (!r.u64(&m.channel, "channel") || !r.u32(&m.tag, "tag") || !r.u32(&m.seq, "seq") ||
      !r.u8(&kind, "kind") || !r.u16(&n, "pieces"))
    return r.error();
  if (kind > 2) {
    r.fail("kind", std::to_string(kind) + " is not 0, 1 or 2");
    return r.error();
  }
  m.kind = static_cast<VerdictKind>(kind);
  const bool listed = m.kind == VerdictKind::kResend;
  if ((listed && (n < 1 || n > kMaxResendList)) || (!listed && n != 0)) {
    r.fail("pieces", std::to_string(n) + (listed ? " outside 1.." + std::to_string(kMaxResendList)
                                                 : std::string(" listed for a verdict without a list")));
    return r.error();
  }
  m.pieces.resize(n);
  for (auto& p : m.pieces)
    if (!r.u32(&p, "piece")) return r.error();
  if (!r.done()) return r.error();
  return m;
}

Result<OpenRefused> decodeOpenRefused(std::span<const uint8_t> body) {
  Reader r(body, "open_refused");
  OpenRefused m;
  if (!r.u64(&m.channel, "channel") || !getRefuse(r, &m.why) || !r.done()) return r.error();
  return m;
}

Result<Close> decodeClose(std::span<const uint8_t> body) {
  Reader r(body, "close");
  Close m;
  if (!r.u64(&m.channel, "channel") || !r.done()) return r.error();
  return m;
}

Result<Abort> decodeAbort(std::span<const uint8_t> body) {
  Reader r(body, "abort");
  Abort m;
  std::vector<uint8_t> reason;
  if (!r.u64(&m.channel, "channel") || !r.bytes(&reason, kMaxAbortReason, "reason") || !r.done())
    return r.error();
  for (uint8_t c : reason)
    if (c < 0x20 || c > 0x7e)
      return Error{Status::kInvalidArgument,
                   "abort.reason: byte " + std::to_string(c) + " is not printable ASCII"};
  m.reason.assign(reason.begin(), reason.end());
  return m;
}

}  // namespace pact::wire
